"""Build the Kafka Streams application of the interop tests once, and run it.

:func:`build` resolves ``org.apache.kafka:kafka-streams`` (pinned in ``pom.xml``
beside this file) with Maven and compiles ``StreamsApp.java`` with ``javac``,
both cached under ``.cache/kafka/streams-<version>/``: the classpath in
``classpath.txt`` (Maven runs again only when a jar named there is gone), the
classes in ``classes-<digest>/`` (``digest``: a hash of the source and the
version, so an edited source is compiled again and an unchanged one never).
CI keeps ``.cache/kafka`` as it keeps the broker's classpath, so a warm run
starts neither Maven nor ``javac``.

Threads and processes: concurrent builds each write their own temporary files
and rename them into place; the last rename wins, and both results are equal.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafka_harness.kafka_runtime import DEFAULT_CACHE_DIR, KafkaRuntimeError

__all__ = ["STREAMS_VERSION", "StreamsApp", "build"]

STREAMS_VERSION: Final = "4.4.0"
"""The Kafka Streams release; keep in step with ``pom.xml``."""

_HERE: Final = Path(__file__).resolve().parent
SOURCE: Final = _HERE / "StreamsApp.java"
POM: Final = _HERE / "pom.xml"
_MAIN: Final = "StreamsApp"
_LOG4J2: Final = """\
status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c{1}: %m%n
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
"""
_JVM_OPTS: Final = ("-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


@dataclass(frozen=True)
class StreamsApp:
    """The built application: its classes, classpath and logging configuration.  Immutable."""

    classes: Path
    classpath: tuple[Path, ...]
    log_config: Path

    def argv(self, args: Sequence[str]) -> list[str]:
        """The command line that runs the application with ``args`` (see ``StreamsApp.java``)."""
        return [
            "java",
            *_JVM_OPTS,
            f"-Dlog4j2.configurationFile={self.log_config}",
            "-cp",
            os.pathsep.join(str(p) for p in (self.classes, *self.classpath)),
            _MAIN,
            *args,
        ]


def _run(argv: Sequence[str], *, cwd: Path, timeout_s: float) -> None:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise KafkaRuntimeError(
            f"{argv[0]} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
        )


def _classpath(home: Path, timeout_s: float) -> tuple[Path, ...]:
    cp_file = home / "classpath.txt"
    entries: list[Path] = []
    if cp_file.is_file():
        entries = [Path(p) for p in cp_file.read_text().strip().split(os.pathsep) if p]
    if entries and all(entry.is_file() for entry in entries):
        return tuple(entries)
    if shutil.which("mvn") is None:
        raise KafkaRuntimeError("mvn is not on PATH: cannot fetch Kafka Streams")
    tmp = home / f"classpath.txt.{os.getpid()}.tmp"
    _run(
        [
            "mvn",
            "--batch-mode",
            "--quiet",
            "--file",
            str(POM),
            "-Dmdep.includeScope=runtime",
            f"-Dmdep.outputFile={tmp}",
            "dependency:build-classpath",
        ],
        cwd=home,
        timeout_s=timeout_s,
    )
    tmp.replace(cp_file)
    entries = [Path(p) for p in cp_file.read_text().strip().split(os.pathsep) if p]
    if not entries or not all(entry.is_file() for entry in entries):
        raise KafkaRuntimeError(f"Maven wrote an incomplete classpath to {cp_file}")
    return tuple(entries)


def build(cache_dir: Path = DEFAULT_CACHE_DIR, *, timeout_s: float = 900) -> StreamsApp:
    """Resolve and compile the application (each only if not cached; module docstring)."""
    home = cache_dir / f"streams-{STREAMS_VERSION}"
    home.mkdir(parents=True, exist_ok=True)
    classpath = _classpath(home, timeout_s)
    digest = hashlib.sha256(SOURCE.read_bytes() + STREAMS_VERSION.encode()).hexdigest()[:16]
    classes = home / f"classes-{digest}"
    if not (classes / f"{_MAIN}.class").is_file():
        if shutil.which("javac") is None:
            raise KafkaRuntimeError("javac is not on PATH: cannot compile the Kafka Streams app")
        built = Path(tempfile.mkdtemp(prefix="classes-", dir=home))
        _run(
            [
                "javac",
                "-cp",
                os.pathsep.join(str(p) for p in classpath),
                "-d",
                str(built),
                str(SOURCE),
            ],
            cwd=home,
            timeout_s=timeout_s,
        )
        try:
            built.rename(classes)
        except OSError:  # another build renamed its own first: the same classes
            shutil.rmtree(built, ignore_errors=True)
    log_config = home / "log4j2.properties"
    if not log_config.is_file() or log_config.read_text() != _LOG4J2:
        log_config.write_text(_LOG4J2)
    return StreamsApp(classes=classes, classpath=classpath, log_config=log_config)
