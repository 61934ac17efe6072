"""A compressed batch whose CRC checks out but whose records do not decode.

The CRC-32C covers the compressed bytes, so a batch written damaged (a bad
compressor, a bit flip before the checksum was computed) passes every CRC
check.  The store's open decodes every record: its error names the ``.log``
file and the batch's position there, and ``verify`` decodes what the open
decodes, so it reports the same batch.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from changelog.config import LogConfig
from changelog.errors import CorruptRecordError
from changelog.record.batch import decode_header
from statestore import StateManager, StateManagerConfig
from statestore.errors import RestoreError
from tests.cli.helpers import run_cli

QUIET = StateManagerConfig(run_cleaner=False)
CRC_POSITION = 17  # the CRC-32C field of a record batch v2
ATTRIBUTES_POSITION = 21  # the CRC covers attributes .. end
RECORDS_POSITION = 61  # the (compressed) records follow the 61-byte header


def build(state: Path, codec: str) -> Path:
    config = LogConfig(compression_type=codec, segment_bytes=4096)
    with StateManager(state, config=QUIET, log_config=config) as manager:
        store = manager.store("users")
        for round_number in range(6):
            for i in range(40):
                store.put(f"user-{i:03d}", {"round": round_number, "pad": "x" * 30})
            manager.commit()
    return state / "users-changelog-0"


def damage_compressed_batch(partition: Path) -> tuple[Path, int]:
    """Garble the compressed records of the second batch of the first segment, CRC recomputed."""
    log = sorted(partition.glob("*.log"))[0]
    data = bytearray(log.read_bytes())
    first = decode_header(data, 0, path=log)
    position = first.size_in_bytes
    header = decode_header(data, position, path=log)
    assert header.compression != 0
    end = position + header.size_in_bytes
    for index in range(position + RECORDS_POSITION, end):
        data[index] = 0x5A
    crc = crc32c.crc32c(bytes(data[position + ATTRIBUTES_POSITION : end]))
    struct.pack_into(">I", data, position + CRC_POSITION, crc)
    log.write_bytes(bytes(data))
    decode_header(data, position, path=log, validate=True)  # the CRC checks out
    return log, position


@pytest.mark.parametrize("codec", ["gzip", "zstd", "lz4", "snappy"])
def test_the_open_names_the_log_file_and_batch_position(tmp_path: Path, codec: str) -> None:
    state = tmp_path / "state"
    log, position = damage_compressed_batch(build(state, codec))
    with StateManager(state, config=QUIET) as manager, pytest.raises(RestoreError) as caught:
        manager.store("users")
    cause = caught.value.__cause__
    assert isinstance(cause, CorruptRecordError)
    assert cause.path == log
    assert cause.position == position
    assert f"{log} at position {position}" in str(caught.value)


def test_verify_decodes_what_the_open_decodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    log, position = damage_compressed_batch(build(state, "gzip"))
    result = run_cli(["verify", str(state)], capsys)
    assert result.status == 1, result.out
    assert f"ERROR {log} at position {position}: " in result.out
    assert "verify: FAILED" in result.out
