"""One secured broker for the security tests: SASL and TLS listeners, client certificates, ACLs.

The broker (``test_security.py``'s module fixture) runs Kafka's StandardAuthorizer
and five listeners, so one start serves every secured case:

=================  ===============  =================================================
listener           protocol         who uses it (principal)
=================  ===============  =================================================
``PLAINTEXT``      PLAINTEXT        the broker, the oracle, topic set-up (``ANONYMOUS``)
``SASL_PLAINTEXT`` SASL_PLAINTEXT   PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (``User:<name>``)
``SSL``            SSL              TLS without a client certificate (``ANONYMOUS``)
``SASL_SSL``       SASL_SSL         SASL over TLS, the same mechanisms (``User:<name>``)
``MTLS``           SSL              ``ssl.client.auth=required`` (``User:CN=<subject>``)
=================  ===============  =================================================

``User:admin`` and ``User:ANONYMOUS`` are super users; everyone else gets the
ACLs docs/scale-out.md lists (:func:`grant`).  Certificates are made here with
``openssl``: the broker's (subject alternative name ``IP:127.0.0.1``), a
stranger's the clients do not trust, a client's whose key is encrypted with a
passphrase (the broker trusts it on ``MTLS``) and a stranger client's the
broker does not trust.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import attrs
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import KafkaDist
from statestore.kafka import SecurityConfig, changelog_topic_name
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.oracle import PARTITIONS, App

SECRETS = {"admin": "adm1n-S3cret", "alice": "al1ce-S3cret", "mallory": "mall0ry-S3cret"}
"""SASL/PLAIN users of the broker (name -> password)."""
SCRAM_SECRETS = {"sam": "s4m-Scr4m-S3cret", "sara": "s4ra-Scr4m512-S3cret"}
"""SCRAM users (made at run time with the admin client): sam SHA-256, sara SHA-512."""
KEYSTORE_PASSWORD = "keyst0re-S3cret"
CLIENT_KEY_PASSWORD = "cl1ent-K3y-S3cret"
CLIENT_SUBJECT = "inventory-client"
"""The client certificate's CN: its principal on ``MTLS`` is ``User:CN=inventory-client``."""

ALL_SECRETS = (*SECRETS.values(), *SCRAM_SECRETS.values(), KEYSTORE_PASSWORD, CLIENT_KEY_PASSWORD)

_SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule required;"

BROKER_SETTINGS = {
    **BROKER_OVERRIDES,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    **{
        f"listener.name.{listener}.{mechanism}.sasl.jaas.config": _SCRAM_LOGIN
        for listener in ("sasl_plaintext", "sasl_ssl")
        for mechanism in ("scram-sha-256", "scram-sha-512")
    },
}


def self_signed(
    directory: Path, name: str, subject: str = "localhost", key_password: str | None = None
) -> tuple[Path, Path]:
    """``(certificate.pem, key.pem)`` for ``CN=<subject>``, ``IP:127.0.0.1``; the key is
    encrypted with ``key_password`` if given."""
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    protect = ["-passout", f"pass:{key_password}"] if key_password else ["-nodes"]
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", *protect, "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={subject}",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@attrs.frozen(kw_only=True)
class Secured:
    """The running secured broker and the certificates of the tests."""

    broker: KafkaBroker
    broker_cert: Path
    """The certificate the broker presents (clients trust it with ``ssl_ca_location``)."""
    stranger_cert: Path
    """A certificate that is not the broker's."""
    client_cert: Path
    client_key: Path
    """The client's key, encrypted with :data:`CLIENT_KEY_PASSWORD`."""
    stranger_client_cert: Path
    stranger_client_key: Path
    """A client certificate the broker does not trust (also encrypted, same passphrase)."""


def start_secured(dist: KafkaDist, work: Path) -> Secured:
    """Make the certificates and start the broker (the caller stops or kills ``.broker``)."""
    cert, key = self_signed(work, "broker")
    stranger, _ = self_signed(work, "stranger")
    client_cert, client_key = self_signed(
        work, "client", CLIENT_SUBJECT, key_password=CLIENT_KEY_PASSWORD
    )
    other_cert, other_key = self_signed(
        work, "other-client", CLIENT_SUBJECT, key_password=CLIENT_KEY_PASSWORD
    )
    keystore = work / "broker.p12"
    subprocess.run(
        [
            "openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key),
            "-out", str(keystore), "-passout", f"pass:{KEYSTORE_PASSWORD}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    broker = KafkaBroker(
        dist,
        work / "broker",
        sasl_users=SECRETS,
        ssl_keystore=(keystore, KEYSTORE_PASSWORD),
        mtls_truststore=client_cert,
    )
    try:
        broker.start(BROKER_SETTINGS)
    except BaseException:
        broker.kill()
        raise
    return Secured(
        broker=broker,
        broker_cert=cert,
        stranger_cert=stranger,
        client_cert=client_cert,
        client_key=client_key,
        stranger_client_cert=other_cert,
        stranger_client_key=other_key,
    )


def plain(user: str, protocol: str = "SASL_PLAINTEXT") -> SecurityConfig:
    """SASL/PLAIN as ``user``."""
    return SecurityConfig(
        security_protocol=protocol,  # type: ignore[arg-type]
        sasl_mechanism="PLAIN",
        sasl_username=user,
        sasl_password=SECRETS[user],
    )


def admin(broker: KafkaBroker) -> AdminClient:
    """``User:admin`` (a super user) over SASL."""
    return AdminClient(
        {"bootstrap.servers": broker.sasl_bootstrap_servers, **plain("admin").client_settings()}
    )


def add_scram_user(broker: KafkaBroker, user: str, mechanism: str) -> None:
    """Make ``user``'s SCRAM credential (``SCRAM-SHA-256`` or ``-512``) with the admin client."""
    from confluent_kafka.admin import (  # noqa: PLC0415
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    kind = {
        "SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
        "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512,
    }[mechanism]
    upsert = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(kind, 4096), SCRAM_SECRETS[user].encode()
    )
    client = admin(broker)  # kept: a destroyed handle fails its pending futures
    for future in client.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=60)


def wait_until_accepted(bootstrap: str, security: SecurityConfig, timeout_s: float = 30) -> None:
    """Until a client with ``security`` gets metadata (a new SCRAM credential reaches the
    listener's cache asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        probe = AdminClient({"bootstrap.servers": bootstrap, **security.client_settings()})
        try:
            probe.list_topics(timeout=5)
        except KafkaException:
            assert time.monotonic() < deadline, "the credential never worked"
        else:
            return


def grant(
    broker: KafkaBroker,
    principal: str,
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
    """The ACLs docs/scale-out.md lists for ``app``, to ``principal``, less those switched off."""
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
    client = admin(broker)  # kept alive until the futures are done
    for future in client.create_acls(bindings).values():
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


def ends(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], int]:
    """Every partition's high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "secured-oracle"})
    try:
        return {(topic, p): _end(consumer, topic, p) for topic in topics for p in range(PARTITIONS)}
    finally:
        consumer.close()


def topics(broker: KafkaBroker) -> set[str]:
    """The broker's topic list (over PLAINTEXT)."""
    return set(
        AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=30).topics
    )


def no_secret(*texts: str) -> None:
    """No password, passphrase or SCRAM secret of the tests in any of ``texts``."""
    for text in texts:
        for secret in ALL_SECRETS:
            assert secret not in text, f"a secret leaked: {secret[:3]}..."
