"""A secured broker (tests/kafka/cluster/secured.py): SASL, TLS, client certificates, ACLs.

One broker with Kafka's StandardAuthorizer serves every case, on its own
listener (``SASL_PLAINTEXT``, ``SSL``, ``SASL_SSL``, ``MTLS``); the ACLs are
those docs/scale-out.md lists, granted by ``User:admin``.

* ``User:alice`` (SASL/PLAIN), ``User:sam`` (SCRAM-SHA-256), ``User:sara``
  (SCRAM-SHA-512 over ``SASL_SSL``) and ``User:CN=inventory-client`` (a client
  certificate on ``MTLS``, its key behind a passphrase; two processors with
  standbys of each other, so the standby consumers get in too) each run an
  exactly-once application end to end that passes the oracle; TLS alone
  (``SSL``, the broker's certificate trusted) does too.
* ``User:mallory`` lacks the output topic or the changelog topic (or may only
  describe them), its transactional id or its group; ``sara`` and the
  certificate's principal lack one topic each: the start fails with
  :class:`AuthorizationFailedError`, nothing is written (the topic list and the
  topics' end offsets unchanged where the refusal comes before ``init_transactions``).
* A processor that does not trust the broker's certificate, whose client
  certificate the broker does not trust, or whose SCRAM password is wrong, is
  refused at start within seconds (not the metadata timeout) with a
  :class:`KafkaClientError` naming librdkafka's reason, and creates nothing.
* No password, SCRAM secret or key passphrase appears in the captured logs
  (Python's and librdkafka's stderr), in the errors (str and repr), in the
  configs' reprs, or in ``processor.metrics()`` and its Prometheus scrape.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic
from prometheus_client import CollectorRegistry, generate_latest

from kafka_harness.kafka_runtime import CLUSTER_KAFKA_VERSION, fetch, missing_prerequisites
from statestore.kafka import (
    AuthorizationFailedError,
    KafkaClientError,
    Processor,
    SecurityConfig,
    changelog_topic_name,
)
from statestore.metrics.prometheus import ProcessorCollector
from tests.kafka.cluster.helpers import poll_each, standbys_caught_up
from tests.kafka.cluster.oracle import PARTITIONS, App, run_until
from tests.kafka.cluster.secured import (
    CLIENT_KEY_PASSWORD,
    CLIENT_SUBJECT,
    SCRAM_SECRETS,
    Secured,
    add_scram_user,
    ends,
    grant,
    no_secret,
    plain,
    start_secured,
    topics,
    wait_until_accepted,
)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    reason = missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make the certificates")
    started = time.monotonic()
    found = start_secured(fetch(version=CLUSTER_KAFKA_VERSION), tmp_path_factory.mktemp("secured"))
    print(f"secured broker up in {time.monotonic() - started:.1f}s")
    try:
        yield found
        found.broker.stop()
    finally:
        found.broker.kill()


def _scraped(processor: Processor) -> str:
    """The processor's Prometheus page, as a scrape renders it."""
    registry = CollectorRegistry()
    registry.register(ProcessorCollector(processor, thread_id="secured"))
    return generate_latest(registry).decode()


def _run_end_to_end(app: App, tmp_path: Path, **config: Any) -> tuple[str, str]:
    """Feed, run exactly once until everything is committed, check the oracle; return the
    repr of the processor's metrics and its Prometheus page (read while it ran)."""
    app.feed(200)
    processor = app.processor(tmp_path, processing_guarantee="exactly_once_v2", **config)
    with processor:
        run_until(
            lambda: processor.poll_once(0.1),
            lambda: len(processor.assignment) == PARTITIONS and app.committed_end(),
        )
        processor.commit()
        metrics, page = repr(processor.metrics()), _scraped(processor)
    app.check()
    assert processor.commits >= 1
    assert "statestore_stream_thread_commit_total" in page
    return metrics, page


def _run_two_with_standbys(app: App, tmp_path: Path, **config: Any) -> tuple[str, str]:
    """As :func:`_run_end_to_end` with two processors that keep standbys of each other's
    partitions (so the standby consumers authenticate and read too): runs until every input
    is committed and each standby is caught up; the metrics and page are both processors'."""
    app.feed(200)
    settings = {
        "processing_guarantee": "exactly_once_v2",
        "num_standby_replicas": 1,
        "standby_refresh_ms": 200,
        **config,
    }
    first = app.processor(tmp_path / "i1", **settings)
    second = app.processor(tmp_path / "i2", instance_id="i2", **settings)
    with first, second:
        run_until(
            poll_each(first, second),
            lambda: (
                len(first.assignment) + len(second.assignment) == PARTITIONS
                and app.committed_end()
                and standbys_caught_up(first, second)
                and standbys_caught_up(second, first)
            ),
        )
        first.commit()
        second.commit()
        metrics = repr([first.metrics(), second.metrics()])
        page = _scraped(first) + _scraped(second)
        ran = (first.assignment, second.assignment)
    app.check()
    # Both ran partitions (standbys_caught_up needs the owner's assignment), each the other's
    # standby; which of them committed inputs depends on who joined first.
    assert first.commits + second.commits >= 1
    assert all(ran), ran
    assert "statestore_stream_standby_records_lag" in page
    return metrics, page


def _mtls(secured: Secured, *, trusted: bool = True) -> SecurityConfig:
    """TLS with a client certificate (the one the broker trusts, or a stranger's)."""
    cert, key = (
        (secured.client_cert, secured.client_key)
        if trusted
        else (secured.stranger_client_cert, secured.stranger_client_key)
    )
    return SecurityConfig(
        security_protocol="SSL",
        ssl_ca_location=str(secured.broker_cert),
        ssl_certificate_location=str(cert),
        ssl_key_location=str(key),
        ssl_key_password=CLIENT_KEY_PASSWORD,
    )


def _sara(secured: Secured) -> SecurityConfig:
    """SCRAM-SHA-512 over TLS (``SASL_SSL``) as ``sara`` (made once, at first use)."""
    security = SecurityConfig(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="sara",
        sasl_password=SCRAM_SECRETS["sara"],
        ssl_ca_location=str(secured.broker_cert),
    )
    add_scram_user(secured.broker, "sara", "SCRAM-SHA-512")
    wait_until_accepted(secured.broker.sasl_ssl_bootstrap_servers, security)
    return security


def test_the_granted_principal_runs_exactly_once_end_to_end(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-ok")
    grant(secured.broker, "User:alice", app)
    app.feed(200)
    config: dict[str, Any] = {
        "bootstrap_servers": secured.broker.sasl_bootstrap_servers,
        "security": plain("alice"),
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
    no_secret(caplog.text, captured.out, captured.err, metrics)


def _create_changelog(secured: Secured, changelog: str) -> None:
    """Creates the compacted topic ``changelog`` as an operator would, and waits until the
    metadata shows it."""
    operator = AdminClient({"bootstrap.servers": secured.broker.bootstrap_servers})
    operator.create_topics(
        [NewTopic(changelog, num_partitions=PARTITIONS, config={"cleanup.policy": "compact"})]
    )[changelog].result(timeout=60)
    deadline = time.monotonic() + 30
    while changelog not in topics(secured.broker):
        assert time.monotonic() < deadline, "the changelog topic never showed in the metadata"


def _refused_on_a_topic(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    app: App,
    *,
    bootstrap: str,
    security: SecurityConfig,
    watched: list[str],
) -> AuthorizationFailedError:
    """Starts ``app``'s processor as a principal refused on a topic: its
    ``TOPIC_AUTHORIZATION_FAILED``, once no topic was created, nothing written to
    ``watched`` and no secret shown."""
    ends_before = ends(secured.broker.bootstrap_servers, watched)  # (makes __consumer_offsets)
    topics_before = topics(secured.broker)
    with caplog.at_level(logging.DEBUG):
        processor = app.processor(tmp_path, bootstrap_servers=bootstrap, security=security)
        with pytest.raises(AuthorizationFailedError) as refused:
            processor.start()
        processor.close()
    error = refused.value
    assert error.code == "TOPIC_AUTHORIZATION_FAILED", error
    assert topics(secured.broker) == topics_before, "a topic was created"
    assert ends(secured.broker.bootstrap_servers, watched) == ends_before, "something was written"
    captured = capfd.readouterr()
    no_secret(str(error), repr(error), caplog.text, captured.out, captured.err)
    return error


@pytest.mark.parametrize("missing", ["output", "output-write", "changelog", "changelog-write"])
def test_a_principal_without_rights_is_refused_at_start_with_nothing_written(
    secured: Secured,
    tmp_path: Path,
    missing: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.broker.bootstrap_servers, f"sec-no-{missing}")
    changelog = changelog_topic_name(app.name, "sums")
    if missing.startswith("changelog"):
        # The changelog exists (made by an operator) but mallory may not touch it.
        _create_changelog(secured, changelog)
    outputs = {"output": None, "output-write": AclOperation.DESCRIBE}
    grant(
        secured.broker,
        "User:mallory",
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
    error = _refused_on_a_topic(
        secured,
        tmp_path,
        caplog,
        capfd,
        app,
        bootstrap=secured.broker.sasl_bootstrap_servers,
        security=plain("mallory"),
        watched=[app.output, *([changelog] if missing.startswith("changelog") else [])],
    )
    assert (changelog if missing.startswith("changelog") else app.output) in error.operation
    assert not app.committed_end() or not app.fed, "input offsets were committed"


def _refused_without(
    secured: Secured,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    app: App,
    *,
    transactional_id: bool = True,
    group: bool = True,
) -> AuthorizationFailedError:
    """Starts mallory's processor with the ACLs ``grant`` gives but the ones turned off:
    its refusal, once nothing was written, no input offset committed, no secret shown."""
    grant(secured.broker, "User:mallory", app, transactional_id=transactional_id, group=group)
    app.feed(20)
    ends_before = ends(secured.broker.bootstrap_servers, [app.output])
    processor = app.processor(
        tmp_path, bootstrap_servers=secured.broker.sasl_bootstrap_servers, security=plain("mallory")
    )
    with pytest.raises(AuthorizationFailedError) as refused:
        processor.start()
    processor.close()
    assert ends(secured.broker.bootstrap_servers, [app.output]) == ends_before, (
        "something was written"
    )
    assert not app.committed_end(), "input offsets were committed"
    captured = capfd.readouterr()
    no_secret(str(refused.value), captured.out, captured.err)
    return refused.value


def test_a_principal_without_its_transactional_id_is_refused_at_start(
    secured: Secured, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-no-txn")
    error = _refused_without(secured, tmp_path, capfd, app, transactional_id=False)
    assert error.code == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", error
    assert error.operation == "init_transactions"


def test_a_principal_without_its_group_is_refused_at_start(
    secured: Secured, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-no-group")
    error = _refused_without(secured, tmp_path, capfd, app, group=False)
    assert error.code == "GROUP_AUTHORIZATION_FAILED", error
    assert app.name in error.operation


def test_a_scram_sha_256_principal_runs_exactly_once_end_to_end(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    add_scram_user(secured.broker, "sam", "SCRAM-SHA-256")
    app = App(secured.broker.bootstrap_servers, "sec-scram")
    grant(secured.broker, "User:sam", app)
    security = SecurityConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="sam",
        sasl_password=SCRAM_SECRETS["sam"],
    )
    wait_until_accepted(secured.broker.sasl_bootstrap_servers, security)
    with caplog.at_level(logging.DEBUG):
        metrics, page = _run_end_to_end(
            app,
            tmp_path,
            bootstrap_servers=secured.broker.sasl_bootstrap_servers,
            security=security,
        )
    captured = capfd.readouterr()
    no_secret(caplog.text, captured.out, captured.err, metrics, page, repr(security))


def test_scram_sha_512_over_sasl_ssl_runs_exactly_once_end_to_end(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-sasl-ssl")
    grant(secured.broker, "User:sara", app)
    security = _sara(secured)
    config = {"bootstrap_servers": secured.broker.sasl_ssl_bootstrap_servers, "security": security}
    with caplog.at_level(logging.DEBUG):
        metrics, page = _run_end_to_end(app, tmp_path, **config)
        logging.getLogger("statestore").info("config: %r", app.config(**config))
    captured = capfd.readouterr()
    assert "sasl_password='***'" in caplog.text
    no_secret(caplog.text, captured.out, captured.err, metrics, page)


def test_a_processor_over_tls_runs_exactly_once_end_to_end(
    secured: Secured, tmp_path: Path
) -> None:
    app = App(secured.broker.bootstrap_servers, "tls-ok")
    security = SecurityConfig(security_protocol="SSL", ssl_ca_location=str(secured.broker_cert))
    _run_end_to_end(
        app, tmp_path, bootstrap_servers=secured.broker.ssl_bootstrap_servers, security=security
    )


def test_a_processor_that_does_not_trust_the_certificate_is_refused_at_start(
    secured: Secured, tmp_path: Path
) -> None:
    app = App(secured.broker.bootstrap_servers, "tls-untrusted")
    before = topics(secured.broker)
    security = SecurityConfig(security_protocol="SSL", ssl_ca_location=str(secured.stranger_cert))
    processor = app.processor(
        tmp_path, bootstrap_servers=secured.broker.ssl_bootstrap_servers, security=security
    )
    started = time.monotonic()
    with pytest.raises(KafkaClientError) as refused:
        processor.start()
    took_s = time.monotonic() - started
    processor.close()
    assert refused.value.code == "_SSL", refused.value  # certificate verify failed
    assert took_s < 15, f"refused after {took_s:.1f}s: the metadata timeout was waited out"
    assert topics(secured.broker) == before, "a refused start created a topic"


def test_a_wrong_password_is_refused_at_start_without_showing_it(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-wrong-password")
    grant(secured.broker, "User:sara", app)
    wrong = "wr0ng-Scr4m512-Guess"
    security = attrs.evolve(_sara(secured), sasl_password=wrong)  # sara exists, not with this
    before = topics(secured.broker)
    with caplog.at_level(logging.DEBUG):
        processor = app.processor(
            tmp_path, bootstrap_servers=secured.broker.sasl_ssl_bootstrap_servers, security=security
        )
        started = time.monotonic()
        with pytest.raises(KafkaClientError) as refused:
            processor.start()
        took_s = time.monotonic() - started
        processor.close()
    assert refused.value.code == "_AUTHENTICATION", refused.value
    assert took_s < 15, f"refused after {took_s:.1f}s: the metadata timeout was waited out"
    assert topics(secured.broker) == before, "a refused start created a topic"
    captured = capfd.readouterr()
    texts = (str(refused.value), repr(refused.value), caplog.text, captured.out, captured.err)
    no_secret(*texts)
    assert not any(wrong in text for text in texts), "the wrong password leaked"


def test_a_client_certificate_principal_runs_exactly_once_end_to_end(
    secured: Secured,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-mtls")
    # the principal of a client certificate is its distinguished name (no mapping rules)
    grant(secured.broker, f"User:CN={CLIENT_SUBJECT}", app)
    security = _mtls(secured)
    with caplog.at_level(logging.DEBUG):
        metrics, page = _run_two_with_standbys(
            app,
            tmp_path,
            bootstrap_servers=secured.broker.mtls_bootstrap_servers,
            security=security,
        )
        logging.getLogger("statestore").info("security: %r", security)
    captured = capfd.readouterr()
    assert "ssl_key_password='***'" in caplog.text
    no_secret(caplog.text, captured.out, captured.err, metrics, page)


def test_a_client_certificate_the_broker_does_not_trust_is_refused_at_start(
    secured: Secured, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = App(secured.broker.bootstrap_servers, "sec-mtls-stranger")
    grant(secured.broker, f"User:CN={CLIENT_SUBJECT}", app)  # the name is right, the key is not
    before = topics(secured.broker)
    processor = app.processor(
        tmp_path,
        bootstrap_servers=secured.broker.mtls_bootstrap_servers,
        security=_mtls(secured, trusted=False),
    )
    started = time.monotonic()
    with pytest.raises(KafkaClientError) as refused:
        processor.start()
    took_s = time.monotonic() - started
    processor.close()
    # the broker ends the handshake with a TLS alert (certificate unknown)
    assert refused.value.code == "_TRANSPORT", refused.value
    assert "alert" in refused.value.reason, refused.value
    assert took_s < 15, f"refused after {took_s:.1f}s: the metadata timeout was waited out"
    assert topics(secured.broker) == before, "a refused start created a topic"
    captured = capfd.readouterr()
    no_secret(str(refused.value), repr(refused.value), captured.out, captured.err)


@pytest.mark.parametrize("who", ["mtls", "scram-sha-512"])
def test_a_principal_of_each_mechanism_without_rights_is_refused_at_start(
    secured: Secured,
    tmp_path: Path,
    who: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # the certificate's principal may not write the output topic; sara may not touch the
    # (existing) changelog topic
    app = App(secured.broker.bootstrap_servers, f"sec-no-rights-{who}")
    changelog = changelog_topic_name(app.name, "sums")
    if who == "mtls":
        principal, security = f"User:CN={CLIENT_SUBJECT}", _mtls(secured)
        bootstrap = secured.broker.mtls_bootstrap_servers
        grant(secured.broker, principal, app, output=None)
        watched, refused_topic = [app.output], app.output
    else:
        _create_changelog(secured, changelog)
        principal, security = "User:sara", _sara(secured)
        bootstrap = secured.broker.sasl_ssl_bootstrap_servers
        grant(secured.broker, principal, app, changelog=())
        watched, refused_topic = [app.output, changelog], changelog
    app.feed(20)
    error = _refused_on_a_topic(
        secured,
        tmp_path,
        caplog,
        capfd,
        app,
        bootstrap=bootstrap,
        security=security,
        watched=watched,
    )
    assert refused_topic in error.operation
    assert not app.committed_end(), "input offsets were committed"
