"""TLS to the broker: ``SecurityConfig(security_protocol="SSL")`` on every client, end to end.

The broker (its own, for this module) has an ``SSL`` listener with a key and a
self-signed certificate made here with ``openssl`` (subject alternative name
``IP:127.0.0.1``, so librdkafka's default hostname verification applies); its
``PLAINTEXT`` listener serves the broker itself and the oracle.  The processor
reaches the broker over TLS only, trusting that certificate
(``ssl_ca_location``): an exactly-once run passes the oracle.  A processor that
does not trust the certificate is refused at start with a typed error and
creates nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kafka_harness.broker import KafkaBroker
from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch, missing_prerequisites
from statestore.kafka import KafkaClientError, SecurityConfig
from tests.kafka.cluster.conftest import BROKER_OVERRIDES
from tests.kafka.cluster.oracle import PARTITIONS, App, run_until

PASSWORD = "keyst0re-S3cret"


def _self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """``(certificate.pem, key.pem)`` for ``CN=localhost``, ``IP:127.0.0.1``."""
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaBroker, Path, Path]]:
    """The broker, the certificate it presents, and a certificate it does not."""
    reason = missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the broker's certificate")
    work = tmp_path_factory.mktemp("tls-broker")
    cert, key = _self_signed(work, "broker")
    other, _ = _self_signed(work, "stranger")
    keystore = work / "broker.p12"
    subprocess.run(
        [
            "openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key),
            "-out", str(keystore), "-passout", f"pass:{PASSWORD}",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    broker = KafkaBroker(
        fetch(version=CLUSTER_KAFKA_VERSION), work / "broker", ssl_keystore=(keystore, PASSWORD)
    )
    try:
        broker.start(BROKER_OVERRIDES)
        yield broker, cert, other
        broker.stop()
    finally:
        broker.kill()


def test_a_processor_over_tls_runs_exactly_once_end_to_end(
    tls: tuple[KafkaBroker, Path, Path], tmp_path: Path
) -> None:
    broker, cert, _other = tls
    app = App(broker.bootstrap_servers, "tls-ok")
    app.feed(200)
    security = SecurityConfig(security_protocol="SSL", ssl_ca_location=str(cert))
    with app.processor(
        tmp_path, bootstrap_servers=broker.ssl_bootstrap_servers, security=security
    ) as processor:
        run_until(
            lambda: processor.poll_once(0.1),
            lambda: len(processor.assignment) == PARTITIONS and app.committed_end(),
        )
        processor.commit()
    app.check()
    assert processor.commits >= 1


def test_a_processor_that_does_not_trust_the_certificate_is_refused_at_start(
    tls: tuple[KafkaBroker, Path, Path], tmp_path: Path
) -> None:
    broker, _cert, other = tls
    app = App(broker.bootstrap_servers, "tls-untrusted")
    before = set(
        AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=30).topics
    )
    security = SecurityConfig(security_protocol="SSL", ssl_ca_location=str(other))
    processor = app.processor(
        tmp_path, bootstrap_servers=broker.ssl_bootstrap_servers, security=security
    )
    with pytest.raises(KafkaClientError):
        processor.start()
    processor.close()
    after = set(
        AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=30).topics
    )
    assert after == before, "a refused start created a topic"
