"""Tables, value rendering and the progress line."""

from __future__ import annotations

import io

import msgpack
import pytest

from statestore.cli.output import decode_for_display, encode_key, format_bytes, format_table
from statestore.cli.progress import Progress
from statestore.serdes import IntSerde


def test_format_table_aligns_numbers_right_and_text_left() -> None:
    table = format_table(["name", "count"], [["a", 5], ["longer", 12345]])
    assert table.splitlines() == [
        "name    count",
        "------  -----",
        "a           5",
        "longer  12345",
    ]


def test_format_bytes() -> None:
    assert format_bytes(0) == "0 B"
    assert format_bytes(1023) == "1023 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(5 * 1024**3) == "5.0 GiB"


@pytest.mark.parametrize(
    ("data", "fmt", "shown"),
    [
        (msgpack.packb({"a": [1, 2]}), "auto", {"a": [1, 2]}),
        (b"hello world", "auto", "hello world"),
        (b"\xff\xfe\x00", "auto", "0xfffe00"),
        (b"\xff", "str", "0xff"),
        (b"abc", "hex", "0x616263"),
        (b'{"x": 1}', "json", {"x": 1}),
        (IntSerde().serialize(-42), "int", -42),
        (None, "auto", None),
    ],
)
def test_decode_for_display(data: bytes | None, fmt: str, shown: object) -> None:
    assert decode_for_display(data, fmt) == shown


def test_decode_for_display_refuses_a_format_that_does_not_fit() -> None:
    with pytest.raises(ValueError, match="8 bytes"):
        decode_for_display(b"abc", "int")
    with pytest.raises(ValueError, match="not msgpack"):
        decode_for_display(b"\xc1", "msgpack")


@pytest.mark.parametrize("number", [-(2**63), -1, 0, 7, 2**63 - 1])
def test_int_keys_encode_like_the_store_serde(number: int) -> None:
    assert encode_key(str(number), "int") == IntSerde().serialize(number)


def test_encode_key_hex_and_bad_input() -> None:
    assert encode_key("0x00ff", "hex") == b"\x00\xff"
    with pytest.raises(ValueError, match="not hex"):
        encode_key("zz", "hex")
    with pytest.raises(ValueError, match="64 bits"):
        encode_key(str(2**63), "int")


def test_progress_draws_nothing_when_not_a_tty() -> None:
    stream = io.StringIO()
    with Progress("verify", 100, stream=stream) as progress:
        progress.advance(50)
    assert stream.getvalue() == ""
    assert not progress.enabled


def test_progress_draws_a_bar_on_a_tty_and_erases_it() -> None:
    stream = io.StringIO()
    with Progress("verify", 2048, stream=stream, enabled=True) as progress:
        progress.advance(1024)
        assert "[##########..........]  50%  1.0 KiB/2.0 KiB" in progress.render()
    text = stream.getvalue()
    assert text.startswith("\rverify  [")
    assert text.endswith("\r\x1b[K")


def test_progress_without_a_total_counts_units() -> None:
    progress = Progress("restore", unit="records", stream=io.StringIO(), enabled=True)
    progress.advance(1500)
    assert progress.render().startswith("restore  1,500 records  ")
