"""The command line of an example program, checked the same way for each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest


def helps_then_runs(
    main: Callable[[Sequence[str] | None], None],
    prog: str,
    directory: Path,
    capsys: pytest.CaptureFixture[str],
) -> list[str]:
    """``--help`` prints ``prog``'s usage and creates nothing in ``directory`` (the working
    directory); then a run into ``directory / "state"`` creates only that.  Its output lines."""
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {prog}")
    assert list(directory.iterdir()) == []  # --help is not a state directory
    main([str(directory / "state")])
    lines = capsys.readouterr().out.splitlines()
    assert [p.name for p in directory.iterdir()] == ["state"]
    return lines
