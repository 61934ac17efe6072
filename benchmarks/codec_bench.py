"""Record batch codec: records/s of encode and decode, compiled paths vs pure Python.

``encode_batch`` runs our compiled record encoder (``changelog/record/_records.c``)
when it is built; the ``encode_batch (aiokafka)`` row is the same call with it
switched off (aiokafka's compiled builder, what the append path used before), in
the same run, so their ratio is what the C loop buys.

Usage::

    python -m benchmarks.codec_bench [--quick] [--batches N] [--reps N]

Workload: batches of 1,000 records with 16-byte random keys and ~100-byte random
values (the shape DESIGN.md's measured facts use).  Each line is the median over
interleaved repetitions of records/s; the baseline of a fast path is its
pure-Python reference measured in the same run, so the ratio is the speed-up.
``iter_batches`` (framing + CRC-32C of every batch) is reported in MB/s.
Prints a table and ends with one JSON line (see :mod:`benchmarks._harness`).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable, Sequence

from benchmarks._harness import Result, Target, emit_json, machine_info, median, print_table
from changelog.record import batch as record_batch
from changelog.record.batch import (
    Record,
    compiled_decoder_available,
    compiled_encoder_available,
    decode_key_values,
    decode_records,
    decode_records_py,
    encode_batch,
    encode_batch_py,
    encode_records,
    encode_records_py,
    fast_codec_available,
    iter_batches,
)

RECORDS_PER_BATCH = 1000
KEY_BYTES = 16
VALUE_BYTES = 100
PATH = "bench.log"


def make_pairs(batches: int, *, seed: int = 42) -> list[list[tuple[bytes, bytes]]]:
    """``batches`` lists of 1,000 ``(key, value)`` pairs of random bytes."""
    rng = random.Random(seed)
    return [
        [
            (rng.randbytes(KEY_BYTES), rng.randbytes(VALUE_BYTES + rng.randint(-10, 10)))
            for _ in range(RECORDS_PER_BATCH)
        ]
        for _ in range(batches)
    ]


def key_value_pairs_no_crc(batch: bytes, *, path: str, position: int) -> Sequence[object]:
    """The restore path's decode without the CRC check (the reader it is compared with has none)."""
    return record_batch.key_value_pairs(batch, path=path, position=position, validate=False)


def rate(fn: Callable[[], int]) -> Callable[[], float]:
    """Wrap ``fn`` (returns the records it handled) into a records/s measurement."""

    def measure() -> float:
        start = time.perf_counter()
        count = fn()
        return count / (time.perf_counter() - start)

    return measure


def main(argv: Sequence[str] | None = None) -> int:
    """Run the codec benchmark and print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds, not minutes")
    parser.add_argument("--batches", type=int, default=None, help="batches per repetition")
    parser.add_argument("--reps", type=int, default=None, help="interleaved repetitions")
    args = parser.parse_args(argv)
    batches = args.batches or (20 if args.quick else 200)
    reps = args.reps or (3 if args.quick else 7)
    py_batches = max(1, batches // 5)  # the pure path is slow; its rate does not depend on count

    pairs = make_pairs(batches)
    encoded = [
        encode_batch(i * RECORDS_PER_BATCH, p, timestamp_ms=1_700_000_000_000)
        for i, p in enumerate(pairs)
    ]
    decoded = [decode_records(b, path=PATH, position=0) for b in encoded]
    log = b"".join(encoded)

    def enc_fast() -> int:
        for i, p in enumerate(pairs):
            encode_batch(i * RECORDS_PER_BATCH, p, timestamp_ms=1_700_000_000_000)
        return batches * RECORDS_PER_BATCH

    def enc_aiokafka() -> int:
        compiled = record_batch._ENCODE_BATCH
        record_batch._ENCODE_BATCH = None  # type: ignore[misc]  # the benchmark's own switch
        try:
            return enc_fast()
        finally:
            record_batch._ENCODE_BATCH = compiled  # type: ignore[misc]

    def enc_py() -> int:
        for i, p in enumerate(pairs[:py_batches]):
            encode_batch_py(i * RECORDS_PER_BATCH, p, timestamp_ms=1_700_000_000_000)
        return py_batches * RECORDS_PER_BATCH

    def enc_records(
        encoder: Callable[..., bytes], records: list[list[Record]]
    ) -> Callable[[], int]:
        def run() -> int:
            for batch in records:
                encoder(
                    batch,
                    base_offset=batch[0].offset,
                    last_offset_delta=batch[-1].offset - batch[0].offset,
                )
            return len(records) * RECORDS_PER_BATCH

        return run

    def dec(decoder: Callable[..., Sequence[object]], count: int) -> Callable[[], int]:
        def run() -> int:
            for b in encoded[:count]:
                decoder(b, path=PATH, position=0)
            return count * RECORDS_PER_BATCH

        return run

    def pairs_aiokafka() -> int:
        """The restore path's pairs from aiokafka's compiled reader: the decoder we replaced."""
        from aiokafka.record.default_records import DefaultRecordBatch  # noqa: PLC0415

        for b in encoded:
            [(r.key, r.value) for r in DefaultRecordBatch(b)]
        return batches * RECORDS_PER_BATCH

    def scan() -> int:
        for _ in iter_batches(log, path=PATH):
            pass
        return len(log)

    cases: list[tuple[str, Callable[[], int]]] = [
        ("encode_batch", enc_fast),
        ("encode_batch (aiokafka)", enc_aiokafka),
        ("encode_batch_py", enc_py),
        ("encode_records", enc_records(encode_records, decoded)),
        ("encode_records_py", enc_records(encode_records_py, decoded[:py_batches])),
        ("decode_records", dec(decode_records, batches)),
        ("decode_records_py", dec(decode_records_py, py_batches)),
        ("decode_key_values", dec(decode_key_values, batches)),
        ("key_value_pairs", dec(key_value_pairs_no_crc, batches)),
        ("key_value_pairs (aiokafka reader)", pairs_aiokafka),
        ("iter_batches+crc", scan),
    ]
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    measures = [(name, rate(fn)) for name, fn in cases]
    for _ in range(reps):
        for name, measure in measures:
            samples[name].append(measure())
    med = {name: median(values) for name, values in samples.items()}

    def result(
        name: str, baseline: str | None, target: Target | None = None, note: str = ""
    ) -> Result:
        return Result(
            name=name,
            value=med[name],
            unit="records/s",
            baseline_name=baseline,
            baseline_value=med[baseline] if baseline else None,
            target=target,
            samples=samples[name],
            baseline_samples=samples[baseline] if baseline else [],
            note=note,
            group="codec",
        )

    results = [
        result("encode_batch", "encode_batch_py", Target("ratio>=", 3.0)),
        result(
            "encode_batch",
            "encode_batch (aiokafka)",
            note=f"compiled record encoder {'ON' if compiled_encoder_available() else 'OFF (not built)'}",
        ),
        result("encode_records", "encode_records_py", Target("ratio>=", 3.0)),
        result("decode_records", "decode_records_py", Target("ratio>=", 2.0)),
        result(
            "decode_key_values",
            "decode_records",
            Target("ratio>=", 2.0),
            note="(offset, key, value) tuples instead of Record objects",
        ),
        result(
            "key_value_pairs",
            "key_value_pairs (aiokafka reader)",
            Target("ratio>=", 1.5),
            note=f"compiled record decoder {'ON' if compiled_decoder_available() else 'OFF'}; no CRC either side",
        ),
        result("encode_batch_py", None),
        result("decode_records_py", None),
        Result(
            name="iter_batches+crc",
            value=med["iter_batches+crc"] / 1e6,
            unit="MB/s",
            samples=[s / 1e6 for s in samples["iter_batches+crc"]],
            group="codec",
        ),
    ]
    print_table(
        results,
        title=(
            f"record batch codec: {batches} batches x {RECORDS_PER_BATCH} records, "
            f"~{VALUE_BYTES}-byte values, median of {reps}; "
            f"aiokafka builder {'ON' if fast_codec_available() else 'OFF'}"
        ),
    )
    emit_json(
        "codec",
        results,
        extra={
            "fast_codec": fast_codec_available(),
            "compiled_encoder": compiled_encoder_available(),
            "compiled_decoder": compiled_decoder_available(),
            "records_per_batch": RECORDS_PER_BATCH,
            "batches": batches,
            "reps": reps,
            "machine": machine_info(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
