"""A secured broker: SASL/PLAIN and Kafka's StandardAuthorizer with the ACLs docs/scale-out.md lists.

The broker (its own, for this module) has a ``SASL_PLAINTEXT`` listener for
the applications and the admin, whose principal ``User:admin`` is a super
user; its ``PLAINTEXT`` and controller listeners (principal
``User:ANONYMOUS``, also a super user) serve the broker itself and the oracle.
The ACLs are granted by ``User:admin`` over SASL with the admin client.

* ``User:alice`` has exactly the documented ACLs: an exactly-once run with a
  changelog and an output topic passes the oracle.
* ``User:mallory`` lacks the output topic or the changelog topic (or may only
  describe them), its transactional id or its group: the start fails with
  :class:`AuthorizationFailedError`, nothing is written (the topic list and the
  topics' end offsets unchanged where the refusal comes before ``init_transactions``).
* ``User:sam`` authenticates with SCRAM-SHA-256 (its credential made with the
  admin client), has the same ACLs as alice, and runs exactly once end to end.
* No password appears in the captured logs (Python's and librdkafka's
  stderr), in the errors, or in the configs' reprs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch, missing_prerequisites
from statestore.kafka import AuthorizationFailedError, SecurityConfig, changelog_topic_name
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.oracle import PARTITIONS, App, run_until

SECRETS = {"admin": "adm1n-S3cret", "alice": "al1ce-S3cret", "mallory": "mall0ry-S3cret"}
SCRAM_SECRETS = {"sam": "s4m-Scr4m-S3cret"}


def _security(user: str) -> SecurityConfig:
    return SecurityConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username=user,
        sasl_password=SECRETS[user],
    )


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    reason = missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    dist = fetch(version=CLUSTER_KAFKA_VERSION)
    broker = KafkaBroker(dist, tmp_path_factory.mktemp("secured-broker"), sasl_users=SECRETS)
    try:
        broker.start(
            {
                **BROKER_OVERRIDES,
                "authorizer.class.name": (
                    "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                ),
                "super.users": "User:admin;User:ANONYMOUS",
                # SCRAM beside PLAIN on the SASL listener; credentials are made at run time
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
            }
        )
        yield broker
        broker.stop()
    finally:
        broker.kill()


def _admin(broker: KafkaBroker) -> AdminClient:
    """``User:admin`` (a super user) over SASL."""
    return AdminClient(
        {"bootstrap.servers": broker.sasl_bootstrap_servers, **_security("admin").client_settings()}
    )


def _grant(
    broker: KafkaBroker,
    user: str,
    app: App,
    *,
    output: AclOperation | None = AclOperation.WRITE,
    changelog: tuple[AclOperation, ...] = (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.CREATE,
    ),
    transactional_id: bool = True,
    group: bool = True,
) -> None:
    """The ACLs docs/scale-out.md lists for ``app``, less those switched off."""
    principal = f"User:{user}"
    topic, group_kind, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    literal, prefixed = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
    wanted = [
        (topic, app.input, literal, AclOperation.READ),
    ]
    if group:
        wanted.append((group_kind, app.name, prefixed, AclOperation.READ))
    if transactional_id:
        wanted.append((txn, f"{app.name}-", prefixed, AclOperation.WRITE))
    if output is not None:
        wanted.append((topic, app.output, literal, output))
    wanted += [
        (topic, changelog_topic_name(app.name, "sums"), literal, operation)
        for operation in changelog
    ]
    bindings = [
        AclBinding(kind, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
        for kind, name, pattern, operation in wanted
    ]
    admin = _admin(broker)  # kept alive until the futures are done
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


def _end(consumer: Consumer, topic: str, partition: int) -> int:
    """The high watermark; a topic created a moment ago may not have its leader yet."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return int(
                consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)[1]
            )
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                raise
            assert time.monotonic() < deadline, f"{topic}-{partition} has no leader"
            time.sleep(0.2)


def _ends(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secured-oracle"})
    try:
        return {(topic, p): _end(consumer, topic, p) for topic in topics for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _no_secret(*texts: str) -> None:
    for text in texts:
        for user, secret in SECRETS.items():
            assert secret not in text, f"{user}'s password leaked"


def test_the_granted_principal_runs_exactly_once_end_to_end(
    secured: KafkaBroker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.bootstrap_servers, "sec-ok")
    _grant(secured, "alice", app)
    app.feed(200)
    config: dict[str, Any] = {
        "bootstrap_servers": secured.sasl_bootstrap_servers,
        "security": _security("alice"),
        "processing_guarantee": "exactly_once_v2",
    }
    with caplog.at_level(logging.DEBUG):
        processor = app.processor(tmp_path, **config)
        with processor:
            run_until(
                lambda: processor.poll_once(0.1),
                lambda: len(processor.assignment) == PARTITIONS and app.committed_end(),
            )
            processor.commit()
            metrics = repr(processor.metrics())
        app.check()
        assert processor.commits >= 1
        logging.getLogger("statestore").info("config: %r", app.config(**config))
    captured = capfd.readouterr()
    assert "sasl_password='***'" in caplog.text
    _no_secret(caplog.text, captured.out, captured.err, metrics)


@pytest.mark.parametrize("missing", ["output", "output-write", "changelog", "changelog-write"])
def test_a_principal_without_rights_is_refused_at_start_with_nothing_written(
    secured: KafkaBroker,
    tmp_path: Path,
    missing: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.bootstrap_servers, f"sec-no-{missing}")
    changelog = changelog_topic_name(app.name, "sums")
    plain = AdminClient({"bootstrap.servers": secured.bootstrap_servers})
    if missing.startswith("changelog"):
        # The changelog exists (made by an operator) but mallory may not touch it.
        plain.create_topics(
            [NewTopic(changelog, num_partitions=PARTITIONS, config={"cleanup.policy": "compact"})]
        )[changelog].result(timeout=60)
    outputs = {"output": None, "output-write": AclOperation.DESCRIBE}
    _grant(
        secured,
        "mallory",
        app,
        output=outputs.get(missing, AclOperation.WRITE),
        changelog={
            "changelog": (),
            "changelog-write": (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS),
        }.get(
            missing,
            (
                AclOperation.READ,
                AclOperation.WRITE,
                AclOperation.DESCRIBE_CONFIGS,
                AclOperation.CREATE,
            ),
        ),
    )
    app.feed(20)
    deadline = time.monotonic() + 30
    while missing.startswith("changelog") and changelog not in set(
        plain.list_topics(timeout=30).topics
    ):
        assert time.monotonic() < deadline, "the changelog topic never showed in the metadata"
    watched = [app.output, *([changelog] if missing.startswith("changelog") else [])]
    ends_before = _ends(secured.bootstrap_servers, watched)  # (makes __consumer_offsets)
    topics_before = set(plain.list_topics(timeout=30).topics)
    with caplog.at_level(logging.DEBUG):
        processor = app.processor(
            tmp_path,
            bootstrap_servers=secured.sasl_bootstrap_servers,
            security=_security("mallory"),
        )
        with pytest.raises(AuthorizationFailedError) as refused:
            processor.start()
        processor.close()
    error = refused.value
    assert error.code == "TOPIC_AUTHORIZATION_FAILED", error
    assert (changelog if missing.startswith("changelog") else app.output) in error.operation
    assert set(plain.list_topics(timeout=30).topics) == topics_before, "a topic was created"
    assert _ends(secured.bootstrap_servers, watched) == ends_before, "something was written"
    assert not app.committed_end() or not app.fed, "input offsets were committed"
    captured = capfd.readouterr()
    _no_secret(str(error), repr(error), caplog.text, captured.out, captured.err)


def test_a_principal_without_its_transactional_id_is_refused_at_start(
    secured: KafkaBroker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = App(secured.bootstrap_servers, "sec-no-txn")
    _grant(secured, "mallory", app, transactional_id=False)
    app.feed(20)
    ends_before = _ends(secured.bootstrap_servers, [app.output])
    processor = app.processor(
        tmp_path, bootstrap_servers=secured.sasl_bootstrap_servers, security=_security("mallory")
    )
    with pytest.raises(AuthorizationFailedError) as refused:
        processor.start()
    processor.close()
    assert refused.value.code == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", refused.value
    assert refused.value.operation == "init_transactions"
    assert _ends(secured.bootstrap_servers, [app.output]) == ends_before, "something was written"
    assert not app.committed_end(), "input offsets were committed"
    captured = capfd.readouterr()
    _no_secret(str(refused.value), captured.out, captured.err)


def test_a_principal_without_its_group_is_refused_at_start(
    secured: KafkaBroker, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = App(secured.bootstrap_servers, "sec-no-group")
    _grant(secured, "mallory", app, group=False)
    app.feed(20)
    ends_before = _ends(secured.bootstrap_servers, [app.output])
    processor = app.processor(
        tmp_path, bootstrap_servers=secured.sasl_bootstrap_servers, security=_security("mallory")
    )
    with pytest.raises(AuthorizationFailedError) as refused:
        processor.start()
    processor.close()
    assert refused.value.code == "GROUP_AUTHORIZATION_FAILED", refused.value
    assert app.name in refused.value.operation
    assert _ends(secured.bootstrap_servers, [app.output]) == ends_before, "something was written"
    captured = capfd.readouterr()
    _no_secret(str(refused.value), captured.out, captured.err)


def test_a_scram_principal_runs_exactly_once_end_to_end(
    secured: KafkaBroker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from confluent_kafka.admin import (  # noqa: PLC0415
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upsert = UserScramCredentialUpsertion(
        "sam",
        ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        SCRAM_SECRETS["sam"].encode(),
    )
    admin = _admin(secured)  # kept: a destroyed handle fails its pending futures
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=60)
    app = App(secured.bootstrap_servers, "sec-scram")
    _grant(secured, "sam", app)
    app.feed(200)
    security = SecurityConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="sam",
        sasl_password=SCRAM_SECRETS["sam"],
    )
    config: dict[str, Any] = {
        "bootstrap_servers": secured.sasl_bootstrap_servers,
        "security": security,
    }
    deadline = time.monotonic() + 30  # the credential reaches the listener's cache
    while True:
        probe = AdminClient(
            {"bootstrap.servers": secured.sasl_bootstrap_servers, **security.client_settings()}
        )
        try:
            probe.list_topics(timeout=5)
            break
        except KafkaException:
            assert time.monotonic() < deadline, "the SCRAM credential never worked"
    with caplog.at_level(logging.DEBUG):
        with app.processor(tmp_path, **config) as processor:
            run_until(
                lambda: processor.poll_once(0.1),
                lambda: len(processor.assignment) == PARTITIONS and app.committed_end(),
            )
            processor.commit()
        app.check()
        assert processor.commits >= 1
    captured = capfd.readouterr()
    for text in (caplog.text, captured.out, captured.err):
        assert SCRAM_SECRETS["sam"] not in text, "sam's password leaked"
