"""Security settings: validated, masked in every repr, given to every client the runtime makes.

The processor runs against the in-memory cluster with a client factory that
records the settings each client was made with (admin, producer, main,
restore and standby consumers).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
from confluent_kafka import KafkaException

from statestore.errors import InvalidStoreConfigError
from statestore.kafka import (
    KafkaClientError,
    KafkaStoreSpec,
    Processor,
    ProcessorConfig,
    SecurityConfig,
)
from statestore.kafka.security import await_cluster
from statestore.serdes import IntSerde, StringSerde
from tests.statestore.kafka.fake_cluster import FakeAdmin, FakeClients, FakeCluster

SECRET = "s3cr3t-Pa55word"
KEY_SECRET = "k3y-Pa55phrase"

SASL = SecurityConfig(
    security_protocol="SASL_PLAINTEXT",
    sasl_mechanism="PLAIN",
    sasl_username="alice",
    sasl_password=SECRET,
)


class RecordingClients(FakeClients):
    """The fake cluster's clients, remembering the settings of each client made."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.made: list[tuple[str, dict[str, Any]]] = []

    def admin(self, settings: Mapping[str, Any]) -> FakeAdmin:
        self.made.append(("admin", dict(settings)))
        return super().admin(settings)

    def consumer(self, settings: Mapping[str, Any]) -> Any:
        self.made.append((f"consumer {settings['group.id']}", dict(settings)))
        return super().consumer(settings)

    def producer(self, settings: Mapping[str, Any]) -> Any:
        self.made.append(("producer", dict(settings)))
        return super().producer(settings)


def _config(security: SecurityConfig) -> ProcessorConfig:
    return ProcessorConfig(
        application_id="app",
        bootstrap_servers="fake:9092",
        input_topics=("in",),
        output_topics=("out",),
        instance_id="i1",
        num_standby_replicas=1,
        security=security,
    )


def test_every_client_gets_the_security_settings(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.create("in", 2)
    cluster.create("out", 2)
    clients = RecordingClients(cluster)
    processor = Processor(
        _config(SASL),
        tmp_path,
        [KafkaStoreSpec(name="sums", key_serde=StringSerde(), value_serde=IntSerde())],
        lambda _context, _message: None,
        clients=clients,  # type: ignore[arg-type]
    )
    processor.start()
    try:
        processor.poll_once(0.01)
    finally:
        processor.close()
    kinds = {kind for kind, _settings in clients.made}
    assert kinds == {
        "admin",
        "producer",
        "consumer app",
        "consumer app-restore",
        "consumer app-standby",
    }
    for kind, settings in clients.made:
        assert settings["security.protocol"] == "SASL_PLAINTEXT", kind
        assert settings["sasl.mechanism"] == "PLAIN", kind
        assert settings["sasl.username"] == "alice", kind
        assert settings["sasl.password"] == SECRET, kind


def test_plaintext_adds_no_setting() -> None:
    assert SecurityConfig().client_settings() == {}


def test_tls_settings_use_kafkas_names() -> None:
    tls = SecurityConfig(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="bob",
        sasl_password=SECRET,
        ssl_ca_location="/etc/kafka/ca.pem",
        ssl_certificate_location="/etc/kafka/client.pem",
        ssl_key_location="/etc/kafka/client.key",
        ssl_key_password=KEY_SECRET,
    )
    assert tls.client_settings() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bob",
        "sasl.password": SECRET,
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.key",
        "ssl.key.password": KEY_SECRET,
    }
    shown = repr(tls)
    assert SECRET not in shown
    assert KEY_SECRET not in shown
    assert "sasl_password='***'" in shown
    assert "ssl_key_password='***'" in shown


def test_secrets_are_masked_in_reprs_logs_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    config = _config(SASL)
    assert "sasl_password='***'" in repr(SASL)
    assert "sasl_username='alice'" in repr(SASL)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("statestore").info("config %s / %r", config, config)
        changed = attrs.evolve(config, instance_id="i2")
    assert SECRET not in repr(config)
    assert SECRET not in str(changed)
    assert SECRET not in caplog.text
    with pytest.raises(InvalidStoreConfigError) as refused:
        SecurityConfig(security_protocol="PLAINTEXT", sasl_password=SECRET)
    assert SECRET not in str(refused.value)
    assert refused.value.setting == "sasl_password"
    assert SECRET not in repr(refused.value.value)


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "a", "sasl_password": "p"},
            "sasl_mechanism",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": "p"},
            "sasl_username",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "a"},
            "sasl_password",
        ),
        ({"security_protocol": "SSL", "sasl_mechanism": "PLAIN"}, "sasl_mechanism"),
        ({"security_protocol": "PLAINTEXT", "ssl_ca_location": "/ca.pem"}, "ssl_ca_location"),
        ({"security_protocol": "TLS"}, "security_protocol"),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "GSSAPI",
                "sasl_username": "a",
                "sasl_password": "p",
            },
            "sasl_mechanism",
        ),
        ({"security_protocol": "SSL", "ssl_key_password": ""}, "ssl_key_password"),
    ],
)
def test_inconsistent_settings_are_refused(kwargs: dict[str, Any], setting: str) -> None:
    with pytest.raises(InvalidStoreConfigError) as refused:
        SecurityConfig(**kwargs)
    assert refused.value.setting == setting


SETTINGS = {"bootstrap.servers": "fake:9092", **SASL.client_settings()}


class _Error:
    """A librdkafka ``KafkaError`` as ``error_cb`` and a failed call see it."""

    def __init__(self, name: str, reason: str) -> None:
        self._name, self._reason = name, reason

    def name(self) -> str:
        return self._name

    def str(self) -> str:
        return self._reason


class _Unreachable:
    """A client factory whose admin client's metadata calls fail ``failures`` times with
    ``_TRANSPORT``; each ``poll`` delivers the next of ``reports`` to the ``error_cb`` it was
    made with (librdkafka serves its callbacks only in a poll)."""

    def __init__(self, failures: int, reports: list[_Error]) -> None:
        self.failures, self.reports = failures, list(reports)
        self.calls: list[float] = []
        self.error_cb: Any = None

    def admin(self, settings: Mapping[str, Any]) -> _Unreachable:
        assert settings["bootstrap.servers"] == "fake:9092"
        self.error_cb = settings["error_cb"]
        return self

    def list_topics(self, timeout: float) -> object:
        self.calls.append(timeout)
        if len(self.calls) <= self.failures:
            raise KafkaException(_Error("_TRANSPORT", "Failed to get metadata"))
        return object()

    def poll(self, _timeout: float) -> int:
        if self.reports:
            self.error_cb(self.reports.pop(0))
        return 0


@pytest.mark.parametrize(
    ("report", "code"),
    [
        (_Error("_SSL", "SSL handshake failed: certificate verify failed"), "_SSL"),
        (_Error("_AUTHENTICATION", "SASL authentication error: Invalid username or password"), "_AUTHENTICATION"),
        (_Error("_TRANSPORT", "Receive failed: SSL routines::ssl/tls alert certificate unknown"), "_TRANSPORT"),
        (_Error("_TRANSPORT", "SSL routines:ssl3_read_bytes:sslv3 alert bad certificate: SSL alert number 42"), "_TRANSPORT"),
    ],
)  # fmt: skip
def test_a_tls_or_sasl_refusal_fails_at_the_first_failed_slice(report: _Error, code: str) -> None:
    admin = _Unreachable(failures=100, reports=[_Error("_ALL_BROKERS_DOWN", "down"), report])
    with pytest.raises(KafkaClientError) as refused:
        await_cluster(admin, SETTINGS, timeout_s=60)
    assert (refused.value.operation, refused.value.code) == ("connect", code)
    assert report.str() in str(refused.value)
    assert len(admin.calls) == 2, "refused at the poll that delivered the refusal"
    assert all(timeout <= 1.0 for timeout in admin.calls)


def test_errors_that_may_heal_are_waited_out() -> None:
    down = [_Error("_TRANSPORT", "Connection refused"), _Error("_ALL_BROKERS_DOWN", "1/1 down")]
    admin = _Unreachable(failures=2, reports=down)
    await_cluster(admin, SETTINGS, timeout_s=60)
    assert len(admin.calls) == 3 and admin.error_cb.refused is None


def test_the_last_failure_is_raised_at_the_timeout() -> None:
    admin = _Unreachable(failures=10**9, reports=[])
    with pytest.raises(KafkaClientError) as timed_out:
        await_cluster(admin, SETTINGS, timeout_s=0.05)
    assert (timed_out.value.operation, timed_out.value.code) == ("connect", "_TRANSPORT")
