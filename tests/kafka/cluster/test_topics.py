"""Changelog topics on a real broker: created compacted, validated, mismatches refused unchanged."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from kafka_harness.broker import KafkaBroker
from statestore.kafka import (
    ChangelogTopicConfig,
    ChangelogTopicMismatchError,
    CoPartitioningError,
    changelog_topic_name,
    check_copartitioned,
    ensure_changelog_topic,
)
from statestore.kafka.topics import topic_info


def _admin(cluster: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def _configs(admin: AdminClient, topic: str) -> dict[str, str]:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    return {name: entry.value for name, entry in entries.items()}


def _create(admin: AdminClient, topic: str, partitions: int, **configs: str) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=partitions, config=configs)])[topic].result(
        timeout=30
    )


def test_name_follows_kafka_streams() -> None:
    assert changelog_topic_name("app", "balances") == "app-balances-changelog"


def test_created_compacted_then_validated(cluster: KafkaBroker) -> None:
    admin = _admin(cluster)
    config = ChangelogTopicConfig(delete_retention_ms=3_600_000)
    topic = changelog_topic_name("topics-a", "s")
    created = ensure_changelog_topic(admin, topic, partitions=3, config=config)
    assert created.partitions == 3
    configs = _configs(admin, topic)
    assert configs["cleanup.policy"] == "compact"
    assert configs["delete.retention.ms"] == "3600000"
    again = ensure_changelog_topic(admin, topic, partitions=3, config=config)
    assert again == created  # same topic id: validated, not recreated


@pytest.mark.parametrize(
    ("partitions", "configs", "setting"),
    [
        (2, {"cleanup.policy": "compact", "delete.retention.ms": "86400000"}, "partitions"),
        (3, {"cleanup.policy": "delete", "delete.retention.ms": "86400000"}, "cleanup.policy"),
        (3, {"cleanup.policy": "compact", "delete.retention.ms": "1000"}, "delete.retention.ms"),
    ],
)
def test_a_mismatch_is_refused_and_nothing_changes(
    cluster: KafkaBroker, partitions: int, configs: dict[str, str], setting: str
) -> None:
    admin = _admin(cluster)
    topic = f"topics-mismatch-{setting.replace('.', '-')}-changelog"
    _create(admin, topic, partitions, **configs)
    before = (topic_info(admin, topic), _configs(admin, topic))
    with pytest.raises(ChangelogTopicMismatchError) as caught:
        ensure_changelog_topic(admin, topic, partitions=3, config=ChangelogTopicConfig())
    assert caught.value.setting == setting
    assert caught.value.topic == topic
    assert (topic_info(admin, topic), _configs(admin, topic)) == before


def test_compact_delete_policy_is_accepted(cluster: KafkaBroker) -> None:
    admin = _admin(cluster)
    topic = "topics-compact-delete-changelog"
    _create(admin, topic, 1, **{"cleanup.policy": "compact,delete"})
    before = (topic_info(admin, topic), _configs(admin, topic))
    accepted = ensure_changelog_topic(admin, topic, partitions=1, config=ChangelogTopicConfig())
    assert accepted == before[0]  # validated as it is: same topic id, one partition
    assert before[1]["cleanup.policy"] == "compact,delete"
    assert _configs(admin, topic) == before[1]  # and left unchanged


def test_copartitioning_is_checked(cluster: KafkaBroker) -> None:
    admin = _admin(cluster)
    _create(admin, "topics-in-a", 4)
    _create(admin, "topics-in-b", 4)
    _create(admin, "topics-in-c", 3)
    assert check_copartitioned(admin, ["topics-in-a", "topics-in-b"]) == 4
    with pytest.raises(CoPartitioningError) as caught:
        check_copartitioned(admin, ["topics-in-a", "topics-in-c"])
    assert caught.value.partitions == {"topics-in-a": 4, "topics-in-c": 3}
