"""Changelog topic settings of the stores in time, as Kafka Streams' ``InternalTopicManager`` has them.

Expected values come from Kafka Streams: ``WindowedChangelogTopicConfig`` (retention + the one
day of ``windowstore.changelog.additional.retention.ms``) and ``VersionedChangelogTopicConfig``
(``min.compaction.lag.ms`` = history retention + one day), and its validation rules.  And the
spec constructors, and what a processor refuses for a store in time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore import TimeSettings
from statestore.errors import InvalidStoreConfigError, UnsupportedStoreOperationError
from statestore.kafka import (
    ChangelogTopicConfig,
    ChangelogTopicMismatchError,
    Processor,
    ProcessorConfig,
)
from statestore.kafka.store import KafkaStoreSpec
from statestore.kafka.topics import validate_changelog_topic
from statestore.stores.time.settings import TtlSettings

DAY_MS = 86_400_000
CONFIG = ChangelogTopicConfig()
WINDOW = TimeSettings.window(window_size_ms=60_000, retention_ms=3_600_000)
SESSION = TimeSettings.session(retention_ms=7_200_000)
VERSIONED = TimeSettings.versioned_key_value(history_retention_ms=600_000)
TIMESTAMPED = TimeSettings.timestamped_key_value()
NO_TIME_LIMIT = {"message.timestamp.after.max.ms": str(2**63 - 1)}


def test_created_topic_settings() -> None:
    window = CONFIG.topic_configs(WINDOW)
    assert window["cleanup.policy"] == "compact,delete"
    assert window["retention.ms"] == str(3_600_000 + DAY_MS)
    session = CONFIG.topic_configs(SESSION)
    assert (session["cleanup.policy"], session["retention.ms"]) == (
        "compact,delete",
        str(7_200_000 + DAY_MS),
    )
    versioned = CONFIG.topic_configs(VERSIONED)
    assert versioned["cleanup.policy"] == "compact"
    assert versioned["min.compaction.lag.ms"] == str(600_000 + DAY_MS)
    assert "retention.ms" not in versioned
    assert CONFIG.topic_configs(TIMESTAMPED) == {**CONFIG.topic_configs(), **NO_TIME_LIMIT}
    assert CONFIG.topic_configs()["cleanup.policy"] == "compact"


def test_a_store_in_time_takes_record_times_of_any_distance_ahead() -> None:
    """Its records carry the store's timestamps, not the producer's clock: Kafka 4's default
    (one hour ahead at most) would fail every commit holding a record of a later event time.
    A key-value store's records are stamped by the producer: its topic keeps the default."""
    for time in (WINDOW, SESSION, VERSIONED, TIMESTAMPED):
        assert CONFIG.topic_configs(time)["message.timestamp.after.max.ms"] == str(2**63 - 1)
    assert "message.timestamp.after.max.ms" not in CONFIG.topic_configs()
    unset = ChangelogTopicConfig(message_timestamp_after_max_ms=None)  # brokers before 3.6
    assert "message.timestamp.after.max.ms" not in unset.topic_configs(WINDOW)
    hour = ChangelogTopicConfig(message_timestamp_after_max_ms=3_600_000)
    assert hour.topic_configs(WINDOW)["message.timestamp.after.max.ms"] == "3600000"
    for bad in (-1, True, "1"):
        with pytest.raises(InvalidStoreConfigError):
            ChangelogTopicConfig(message_timestamp_after_max_ms=bad)  # type: ignore[arg-type]


def check(time: TimeSettings | None, **configs: str) -> None:
    validate_changelog_topic(
        "t",
        partitions=2,
        actual_partitions=2,
        configs={"delete.retention.ms": str(CONFIG.delete_retention_ms), **configs},
        config=CONFIG,
        time=time,
    )


def refused(time: TimeSettings | None, **configs: str) -> ChangelogTopicMismatchError:
    with pytest.raises(ChangelogTopicMismatchError) as error:
        check(time, **configs)
    return error.value


def test_window_and_session_topics() -> None:
    for time, needed in ((WINDOW, 3_600_000 + DAY_MS), (SESSION, 7_200_000 + DAY_MS)):
        policy = {"cleanup.policy": "compact,delete"}
        check(time, **policy, **{"retention.ms": str(needed)})
        check(time, **policy, **{"retention.ms": str(needed * 2)})
        check(time, **policy, **{"retention.ms": "-1"})  # infinite
        check(time, **{"cleanup.policy": "compact", "retention.ms": "1"})  # no deletion by time
        short = refused(time, **policy, **{"retention.ms": str(needed - 1)})
        assert (short.setting, short.expected, short.actual) == (
            "retention.ms",
            f">= {needed}",
            str(needed - 1),
        )
        by_size = refused(time, **policy, **{"retention.ms": str(needed), "retention.bytes": "10"})
        assert by_size.setting == "retention.bytes"
        assert refused(time, **{"cleanup.policy": "delete"}).setting == "cleanup.policy"


def test_versioned_topics() -> None:
    needed = 600_000 + DAY_MS
    check(VERSIONED, **{"cleanup.policy": "compact", "min.compaction.lag.ms": str(needed)})
    lag = refused(VERSIONED, **{"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
    assert (lag.setting, lag.expected, lag.actual) == ("min.compaction.lag.ms", f">= {needed}", "0")
    deleting = refused(
        VERSIONED, **{"cleanup.policy": "compact,delete", "min.compaction.lag.ms": str(needed)}
    )
    assert deleting.setting == "cleanup.policy"


@pytest.mark.parametrize("time", [None, TIMESTAMPED])
def test_key_value_topics_need_compact_only(time: TimeSettings | None) -> None:
    check(time, **{"cleanup.policy": "compact"})
    check(time, **{"cleanup.policy": "compact,delete"})  # as a key-value store's topic
    assert refused(time, **{"cleanup.policy": "delete"}).setting == "cleanup.policy"


def test_spec_constructors() -> None:
    window = KafkaStoreSpec.window("w", window_size_ms=60_000, retention_ms=3_600_000)
    assert window.time == WINDOW
    assert window.record_format == "timestamped"
    assert KafkaStoreSpec.session("s", retention_ms=7_200_000).time == SESSION
    assert KafkaStoreSpec.session("s", retention_ms=7_200_000).record_format == "plain"
    assert KafkaStoreSpec.versioned("v", history_retention_ms=600_000).record_format == "versioned"
    assert KafkaStoreSpec.timestamped("t").time == TIMESTAMPED
    assert KafkaStoreSpec(name="kv").record_format == "plain"


def test_interactive_queries_refuse_a_store_in_time(tmp_path: Path) -> None:
    config = ProcessorConfig(
        application_id="app", bootstrap_servers="unused:9092", input_topics=("in",), instance_id="i"
    )
    stores = [
        KafkaStoreSpec.window("w", window_size_ms=60_000, retention_ms=3_600_000),
        KafkaStoreSpec(name="kv"),
    ]
    processor = Processor(config, tmp_path, stores, lambda _context, _message: None)
    with pytest.raises(UnsupportedStoreOperationError) as refused:
        processor.query("w", "k")
    assert (refused.value.store, refused.value.operation) == ("w", "query")


def test_a_ttl_store_restores_with_the_local_expiry_rule() -> None:
    """A TTL store runs in distributed mode: its topic is a key-value store's (taking record
    times of any distance ahead, as every store in time's), and the broker
    restore and the standbys get the local rule's cutoff (tests/kafka/cluster/test_ttl_store.py
    shows no expired value comes back from a broker restore)."""
    spec = KafkaStoreSpec.ttl("profiles", ttl=TtlSettings(ttl_ms=60_000))
    assert spec.time == TimeSettings.timestamped_key_value(ttl=TtlSettings(ttl_ms=60_000))
    assert spec.expiry_cutoff_ms(1_000_000) == 1_000_000 - 60_000
    assert KafkaStoreSpec.timestamped("seen").expiry_cutoff_ms(1_000_000) is None
    assert CONFIG.topic_configs(spec.time) == {**CONFIG.topic_configs(), **NO_TIME_LIMIT}
