"""Distributed mode against a real Kafka 4.4 broker on this machine: restore and EOS commits.

    python -m benchmarks.cluster_bench [--size tiny|quick|full] [--reps N]

Cases (medians over interleaved repetitions):

``restore``
    The same ``restore_keys`` live keys (random order, ~100-byte msgpack values) are
    restored (a) from a one-partition changelog topic on the broker with
    :func:`statestore.kafka.restore.restore_partition` (a ``read_committed``
    consumer with the restorer's settings, ``RESTORE_CONSUMER_SETTINGS``, byte-sized
    WriteBatches) and (b) from the local changelog by opening a local store
    with ``restore_mode="full"`` (log load, replay, flush).  Both start from an
    empty RocksDB with the same options; (b) is the baseline.  The broker shares
    the two cores with the client, so (a) pays the broker's CPU too.
``restore-partitions``
    The same ``restore_keys`` keys spread over ``P`` = 6 and 48 partitions (Kafka's
    murmur2, as the producer would): (a) restored from a ``P``-partition changelog
    topic by the runtime's restorer (:class:`statestore.kafka.restorer.Restorer`: one
    consumer assigned every partition, byte-sized WriteBatches, a RocksDB per
    partition opened, planned and flushed), from the first ``add`` until every task
    is handed back; (b) a local store with ``P`` partitions holding the same keys,
    reopened with ``restore_mode="full"`` (the baseline).
``restart``
    One worker of ``examples.balances.cluster`` owning two partitions is ``kill -9`` ed
    and started again with the same ``--instance``: seconds from the new process's
    start until it runs both partitions, with ``--static-membership`` (the broker
    hands the instance its partitions back) and without (the baseline: the dead
    member holds them until the session timeout).
``eos``
    Exactly-once commits with :func:`statestore.kafka.commit.commit_tasks` and a
    real transactional producer (``retry.backoff.ms=10``, ``linger.ms=5``): each
    transaction carries ``R`` changelog records (~100 B values) plus the input
    offsets (``send_offsets_to_transaction`` with a consumer's group metadata),
    then the RocksDB apply.  ``R`` = 100 and 1,000.  Reported as records/s and
    transactions/s; no baseline (the at-least-once path with the same records is
    reported beside it for scale).

``failover``
    Two worker processes of ``examples.balances.cluster`` over two partitions, with
    ``--standby-replicas`` 0 (baseline) and 1, and 1 with ``--static-membership``;
    ``failover_txns`` transactions fed in ten chunks, then the owner of one partition
    is ``kill -9`` ed (idle, no open transaction) while new inputs arrive every 0.1 s.
    Reported: seconds from the kill until the first committed output of the moved
    partition (a ``read_committed`` consumer of that output partition; dominated by
    the broker's 6 s session timeout here), and the changelog records the survivor's
    restore replayed.  The JSON line at the end is what
:mod:`benchmarks.run` would fold in; this script is run on its own (it starts a JVM).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks._harness import (
    Result,
    emit_json,
    machine_info,
    make_keys,
    make_values,
    median,
    print_table,
    scratch_dir,
)
from benchmarks._stream_common import produce_retrying
from benchmarks.store_bench import open_manager, open_store, packed_pairs, write_store

SIZES = {
    "tiny": {
        "restore_keys": 5_000,
        "txns_100": 20,
        "txns_1000": 5,
        "failover_txns": 500,
        "reps": 1,
    },
    "quick": {
        "restore_keys": 100_000,
        "txns_100": 100,
        "txns_1000": 20,
        "failover_txns": 5_000,
        "reps": 3,
    },
    "full": {
        "restore_keys": 1_000_000,
        "txns_100": 300,
        "txns_1000": 60,
        "failover_txns": 20_000,
        "reps": 3,
    },
}


def _broker(work: Path) -> Any:
    from examples.balances.cluster_demo import FAST_GROUP_BROKER_SETTINGS  # noqa: PLC0415
    from kafka_harness.broker import KafkaBroker  # noqa: PLC0415
    from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch  # noqa: PLC0415

    broker = KafkaBroker(fetch(version=CLUSTER_KAFKA_VERSION), work)
    broker.start(FAST_GROUP_BROKER_SETTINGS)
    return broker


def _produce_changelog(bootstrap: str, topic: str, pairs: list[tuple[bytes, bytes]]) -> int:
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from statestore.kafka import ChangelogTopicConfig, ensure_changelog_topic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ensure_changelog_topic(admin, topic, partitions=1, config=ChangelogTopicConfig())
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": "true", "linger.ms": "5"}
    )
    for i, (key, value) in enumerate(pairs):
        produce_retrying(producer, topic, key=key, value=value, partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("changelog records not acknowledged")
    return len(pairs)


def _broker_restore(bootstrap: str, topic: str, db: Path) -> tuple[float, int]:
    from confluent_kafka import Consumer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from statestore.config import RocksDBConfig  # noqa: PLC0415
    from statestore.kafka.restore import (  # noqa: PLC0415
        RESTORE_CONSUMER_SETTINGS,
        restore_partition,
    )
    from statestore.kafka.topics import topic_info, watermarks  # noqa: PLC0415
    from statestore.stores.engine import RocksDBEngine  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = topic_info(admin, topic)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-restore",
            **RESTORE_CONSUMER_SETTINGS,
        }
    )
    try:
        started = time.perf_counter()
        low, high = watermarks(admin, topic, [0])[0]
        engine = RocksDBEngine.open(db, config=RocksDBConfig(), cache=None)
        count = restore_partition(
            consumer,
            engine,
            store="bench",
            topic=topic,
            partition=0,
            topic_id=info.topic_id,
            start_offset=low,
            end_offset=high,
            batch_bytes=4 * 1024 * 1024,
            stall_timeout_s=60,
        )
        seconds = time.perf_counter() - started
        engine.close()
    finally:
        consumer.close()
    return seconds, count


def _local_restore(state_dir: Path) -> float:
    with open_manager(state_dir) as mgr:
        started = time.perf_counter()
        open_store(mgr)
        return time.perf_counter() - started


def case_restore(bootstrap: str, n: int, reps: int) -> list[Result]:
    keys = make_keys(n)
    pairs = packed_pairs(keys, make_values(n))
    topic = f"bench-{time.monotonic_ns()}-changelog"
    broker_s: list[float] = []
    local_s: list[float] = []
    with scratch_dir("cluster-restore") as d:
        _produce_changelog(bootstrap, topic, pairs)
        with open_manager(d / "local") as mgr:
            write_store(open_store(mgr), keys, make_values(n), commit_every=1000)
        for _ in range(reps):
            seconds, count = _broker_restore(bootstrap, topic, d / "db")
            assert count == n, (count, n)
            shutil.rmtree(d / "db")
            broker_s.append(seconds)
            local_s.append(_local_restore(d / "local"))
    return [
        Result(
            name=f"restore from the broker ({n} keys)",
            value=n / median(broker_s),
            unit="rec/s",
            baseline_name="local changelog restore",
            baseline_value=n / median(local_s),
            samples=[n / s for s in broker_s],
            baseline_samples=[n / s for s in local_s],
            group="cluster",
            note="broker on the same 2 cores",
        )
    ]


def _produce_partitioned(
    bootstrap: str, topic: str, pairs: list[tuple[bytes, bytes]], partitions: int
) -> Any:
    from confluent_kafka import Producer  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from statestore.kafka import ChangelogTopicConfig, ensure_changelog_topic  # noqa: PLC0415
    from statestore.partitioner import partition_for  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ensure_changelog_topic(
        admin, topic, partitions=partitions, config=ChangelogTopicConfig()
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": "true", "linger.ms": "5"}
    )
    for i, (key, value) in enumerate(pairs):
        partition = partition_for(key, partitions)
        produce_retrying(producer, topic, key=key, value=value, partition=partition)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("changelog records not acknowledged")
    return admin, info


def _restorer_restore(bootstrap: str, admin: Any, info: Any, partitions: int, d: Path) -> float:
    """Seconds for the runtime's restorer to hand back every partition of ``info``."""
    from confluent_kafka import Consumer  # noqa: PLC0415

    from statestore.config import RocksDBConfig  # noqa: PLC0415
    from statestore.kafka import ChangelogTopicConfig  # noqa: PLC0415
    from statestore.kafka.restore import RESTORE_CONSUMER_SETTINGS  # noqa: PLC0415
    from statestore.kafka.restorer import Restorer  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-restore",
            **RESTORE_CONSUMER_SETTINGS,
        }
    )
    restorer = Restorer(
        consumer=consumer,
        close_consumer=consumer.close,
        admin=admin,
        state_dir=d,
        topics={"bench": info},
        rocksdb=RocksDBConfig(),
        changelog=ChangelogTopicConfig(),
        batch_bytes=4 * 1024 * 1024,
        stall_timeout_s=120,
    )
    restorer.start()
    try:
        started = time.perf_counter()
        for p in range(partitions):
            restorer.add(p)
        done: list[Any] = []
        while len(done) < partitions:
            taken = restorer.take()
            if not taken:
                time.sleep(0.002)
            done.extend(taken)
        seconds = time.perf_counter() - started
        for result in done:
            if result.error is not None:
                raise result.error
            for engine in result.engines.values():
                engine.close()
    finally:
        restorer.close()
    return seconds


def case_restore_partitions(bootstrap: str, n: int, reps: int) -> list[Result]:
    keys = make_keys(n)
    values = make_values(n)
    pairs = packed_pairs(keys, values)
    results = []
    for partitions in (6, 48):
        topic = f"bench-{time.monotonic_ns()}-p{partitions}-changelog"
        broker_s: list[float] = []
        local_s: list[float] = []
        with scratch_dir("cluster-restore-p") as d:
            admin, info = _produce_partitioned(bootstrap, topic, pairs, partitions)
            with open_manager(d / "local") as mgr:
                api_store = mgr.store(
                    "bench",
                    key_type=bytes,
                    partitions=partitions,
                )
                write_store(api_store, keys, values, commit_every=1000)
            for _ in range(reps):
                shutil.rmtree(d / "db", ignore_errors=True)
                (d / "db").mkdir()
                broker_s.append(_restorer_restore(bootstrap, admin, info, partitions, d / "db"))
                with open_manager(d / "local") as mgr:
                    started = time.perf_counter()
                    mgr.store("bench", key_type=bytes)
                    local_s.append(time.perf_counter() - started)
        results.append(
            Result(
                name=f"restore from the broker, {partitions} partitions ({n} keys)",
                value=n / median(broker_s),
                unit="rec/s",
                baseline_name="local restore, same keys and partitions",
                baseline_value=n / median(local_s),
                samples=[n / s for s in broker_s],
                baseline_samples=[n / s for s in local_s],
                group="cluster",
                note="restorer thread, one consumer; broker on the same 2 cores",
            )
        )
    return results


def _eos_rate(
    bootstrap: str, records: int, txns: int, guarantee: str, d: Path
) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    from statestore.config import RocksDBConfig  # noqa: PLC0415
    from statestore.kafka import (  # noqa: PLC0415
        ChangelogTopicConfig,
        TaskStore,
        ensure_changelog_topic,
    )
    from statestore.kafka.commit import OpenTransaction, StoreTopic, commit_tasks  # noqa: PLC0415
    from statestore.serdes import BytesSerde  # noqa: PLC0415
    from statestore.stores.engine import RocksDBEngine  # noqa: PLC0415

    tag = time.monotonic_ns()
    topic = f"bench-eos-{tag}-changelog"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    info = ensure_changelog_topic(admin, topic, partitions=1, config=ChangelogTopicConfig())
    settings = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": "true",
        "acks": "all",
        "linger.ms": "5",
        "retry.backoff.ms": "10",
    }
    if guarantee == "exactly_once_v2":
        settings["transactional.id"] = f"bench-{tag}"
    producer = Producer(settings)
    if guarantee == "exactly_once_v2":
        producer.init_transactions(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{tag}"})
    engine = RocksDBEngine.open(d / f"eos-{tag}", config=RocksDBConfig(), cache=None)
    store: TaskStore[bytes, bytes] = TaskStore(
        name="bench", partition=0, engine=engine, key_serde=BytesSerde(), value_serde=BytesSerde()
    )
    keys = make_keys(records * 10)
    value = b"v" * 100
    transaction = OpenTransaction(producer, guarantee=guarantee)  # type: ignore[arg-type]
    try:
        started = time.perf_counter()
        for t in range(txns):
            for i in range(records):
                store.store.put(keys[(t * records + i) % len(keys)], value)
            commit_tasks(
                transaction,
                stores=[StoreTopic(store=store, topic=topic, topic_id=info.topic_id)],
                offsets=[TopicPartition(topic, 0, t + 1)],
                group_metadata=consumer.consumer_group_metadata,
                commit_offsets=lambda tps: consumer.commit(offsets=tps, asynchronous=False),
                timeout_s=30,
            )
        seconds = time.perf_counter() - started
    finally:
        store.close()
        consumer.close()
    return records * txns / seconds, txns / seconds


def case_eos(bootstrap: str, sizes: dict[str, int], reps: int) -> list[Result]:
    results = []
    with scratch_dir("cluster-eos") as d:
        for records, txns in ((100, sizes["txns_100"]), (1000, sizes["txns_1000"])):
            eos = [_eos_rate(bootstrap, records, txns, "exactly_once_v2", d) for _ in range(reps)]
            alo = [_eos_rate(bootstrap, records, txns, "at_least_once", d) for _ in range(reps)]
            results.append(
                Result(
                    name=f"EOS commit, {records} records/txn",
                    value=median([r for r, _ in eos]),
                    unit="rec/s",
                    baseline_name="at-least-once commit, same records",
                    baseline_value=median([r for r, _ in alo]),
                    samples=[r for r, _ in eos],
                    baseline_samples=[r for r, _ in alo],
                    group="cluster",
                    note=f"{median([t for _, t in eos]):.0f} txn/s",
                )
            )
    return results


def _first_output_after(bootstrap: str, topic: str, partition: int, start: int) -> Any:
    """A ``read_committed`` consumer of ``topic``-``partition`` from offset ``start``."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-failover-probe",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": "10",
        }
    )
    consumer.assign([TopicPartition(topic, partition, start)])
    return consumer


def _failover_once(
    bootstrap: str, txns: int, standbys: int, work: Path, *, static: bool = False
) -> tuple[float, int]:
    """``(seconds from kill -9 of a partition's owner to the first committed output of that
    partition, changelog records the survivor's restore replayed)``."""
    import threading  # noqa: PLC0415

    from examples.balances import cluster  # noqa: PLC0415
    from examples.balances.cluster_demo import WorkerProcess  # noqa: PLC0415
    from examples.balances.transactions import generate  # noqa: PLC0415

    app = f"failover-{time.monotonic_ns()}"
    data = list(generate(txns, 1000, 12))
    more = list(generate(5000, 1000, 13))
    cluster.create_topics(bootstrap, 2, app)
    extra = ("--standby-replicas", str(standbys), *(("--static-membership",) if static else ()))
    first = WorkerProcess(bootstrap, app, work, f"{app}-a", *extra)
    workers = [first]
    feeding = threading.Event()
    feeder: threading.Thread | None = None
    probe: Any = None
    try:
        first.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
        second = WorkerProcess(bootstrap, app, work, f"{app}-b", *extra)
        workers.append(second)
        for w in workers:
            w.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 1)
            if standbys:
                w.wait(lambda e: e["event"] == "standbys" and len(e["partitions"]) == 1)
        chunk = max(1, txns // 10)
        for start in range(0, txns, chunk):
            cluster.feed(bootstrap, data[start : start + chunk], app)
            time.sleep(0.2)
        deadline = time.monotonic() + 300
        while cluster.group_lag(bootstrap, app) != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the group did not catch up")
            time.sleep(0.2)
        time.sleep(2)  # standbys tail the last commits
        (moved,) = next(
            e["partitions"] for e in reversed(first.events) if e["event"] == "assignment"
        )
        output = cluster.OUTPUT_TOPIC.format(app=app)
        probe = _first_output_after(
            bootstrap, output, moved, _high_watermark(bootstrap, output, moved)
        )

        def feed_on() -> None:  # traffic on every partition, as a live service has
            for start in range(0, len(more), 5):
                if feeding.wait(0.1):
                    return
                cluster.feed(bootstrap, more[start : start + 5], app)

        first.kill()
        killed = time.perf_counter()
        feeder = threading.Thread(target=feed_on, daemon=True)
        feeder.start()
        first_output = None
        while first_output is None:
            if time.perf_counter() - killed > 120:
                raise RuntimeError("no output of the moved partition in 120 s")
            message = probe.poll(0.05)
            if message is not None and message.error() is None:
                first_output = time.perf_counter() - killed
        second.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2, 120)
        restored = [e for e in second.events if e["event"] == "restored"]
        return first_output, int(restored[-1]["records"])
    finally:
        feeding.set()
        if feeder is not None:
            feeder.join(30)
        if probe is not None:
            probe.close()
        for w in workers:
            w.stop()


def _high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-failover-probe"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1])
    finally:
        consumer.close()


def case_failover(bootstrap: str, txns: int, reps: int) -> list[Result]:
    variants = {
        "with a standby": (1, False),
        "without a standby": (0, False),
        "with a standby, static membership": (1, True),
    }
    runs: dict[str, list[tuple[float, int]]] = {name: [] for name in variants}
    with scratch_dir("cluster-failover") as d:
        for _ in range(reps):
            for name, (standbys, static) in variants.items():
                runs[name].append(_failover_once(bootstrap, txns, standbys, d, static=static))
    results = []
    for name in ("with a standby", "with a standby, static membership"):
        results.append(
            Result(
                name=f"failover {name}: kill -9 to the first committed output ({txns} txns)",
                value=median([o for o, _n in runs[name]]),
                unit="s",
                baseline_name="without a standby",
                baseline_value=median([o for o, _n in runs["without a standby"]]),
                samples=[o for o, _n in runs[name]],
                baseline_samples=[o for o, _n in runs["without a standby"]],
                group="cluster",
                note="2 workers, 2 partitions, inputs fed every 0.1 s after the kill;"
                " 6 s session timeout; goal < 2 s + session timeout",
            )
        )
    results.append(
        Result(
            name="records replayed at failover, with a standby",
            value=median([float(n) for _o, n in runs["with a standby"]]),
            unit="records",
            baseline_name="without a standby",
            baseline_value=median([float(n) for _o, n in runs["without a standby"]]),
            group="cluster",
        )
    )
    return results


def _restart_once(bootstrap: str, static: bool, work: Path, protocol: str = "consumer") -> float:
    """Seconds from the restart of a ``kill -9`` ed worker until it runs its partitions again."""
    from examples.balances import cluster  # noqa: PLC0415
    from examples.balances.cluster_demo import WorkerProcess  # noqa: PLC0415

    app = f"restart-{time.monotonic_ns()}"
    cluster.create_topics(bootstrap, 2, app)
    extra = ("--group-protocol", protocol, *(("--static-membership",) if static else ()))
    worker = WorkerProcess(bootstrap, app, work, f"{app}-a", *extra)
    try:
        worker.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2)
        worker.kill()
        restarted = time.perf_counter()
        worker = WorkerProcess(bootstrap, app, work, f"{app}-a", *extra)
        worker.wait(lambda e: e["event"] == "assignment" and len(e["partitions"]) == 2, 120)
        return time.perf_counter() - restarted
    finally:
        worker.stop()


def case_restart(bootstrap: str, reps: int) -> list[Result]:
    results = []
    for protocol in ("consumer", "classic"):
        static: list[float] = []
        dynamic: list[float] = []
        with scratch_dir("cluster-restart") as d:
            for _ in range(reps):
                static.append(_restart_once(bootstrap, True, d, protocol))
                dynamic.append(_restart_once(bootstrap, False, d, protocol))
        results.append(
            Result(
                name=f"restart after kill -9 until running, static ({protocol} protocol)",
                value=median(static),
                unit="s",
                baseline_name="dynamic membership",
                baseline_value=median(dynamic),
                samples=static,
                baseline_samples=dynamic,
                group="cluster",
                note="one worker, 2 partitions; 6 s session timeout (classic: 10 s);"
                " includes the process start",
            )
        )
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the cases against a broker started here; print the table and the JSON line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_bench")
    parser.add_argument("--size", choices=sorted(SIZES), default="quick")
    parser.add_argument("--reps", type=int)
    parser.add_argument(
        "--only",
        choices=["restore", "restart", "failover"],
        help="only the restore cases (1 and 6/48 partitions), the restart or the failover case",
    )
    args = parser.parse_args(argv)
    sizes = SIZES[args.size]
    reps = args.reps or sizes["reps"]
    with scratch_dir("cluster-broker") as work:
        broker = _broker(work / "broker")
        try:
            results = []
            if args.only in {None, "restore"}:
                results += case_restore(broker.bootstrap_servers, sizes["restore_keys"], reps)
                results += case_restore_partitions(
                    broker.bootstrap_servers, sizes["restore_keys"], reps
                )
                print_table(results)
            if args.only in {None, "restart"}:
                results += case_restart(broker.bootstrap_servers, reps)
            if args.only is None:
                results += case_eos(broker.bootstrap_servers, sizes, reps)
                print_table(results)
            if args.only in {None, "failover"}:
                results += case_failover(broker.bootstrap_servers, sizes["failover_txns"], reps)
        finally:
            broker.kill()
    print_table(results, title=f"cluster_bench ({args.size}, reps={reps}, medians)")
    emit_json("cluster", results, extra={"size": args.size, "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
