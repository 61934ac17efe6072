"""How the runtime's clients authenticate to a secured cluster: TLS and SASL settings.

:class:`SecurityConfig` holds Kafka's client security settings under Kafka's
names (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.*``).  The processor adds :meth:`SecurityConfig.client_settings`
to the settings of every client it makes: the admin client, the transactional
producer, the main consumer and the restore and standby consumers.

Secrets (``sasl_password``, ``ssl_key_password``) are masked in the repr, so
they never reach a log line, a metric label or an error message built from
the configuration.

:func:`await_cluster` is the first call of a start: a probe admin client asks
the cluster for its metadata in short slices and refuses at once, with a
:class:`~statestore.kafka.errors.KafkaClientError`, when librdkafka reports
a connection that no retry lets in (:class:`ConnectionErrors`: a TLS
handshake that failed on either side, a SASL authentication that failed),
instead of waiting out the metadata timeout.  librdkafka's messages name the
broker and the reason, never a password.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from statestore.errors import InvalidStoreConfigError
from statestore.kafka.errors import KafkaClientError, client_error

__all__ = [
    "ConnectionErrors",
    "SaslMechanism",
    "SecurityConfig",
    "SecurityProtocol",
    "await_cluster",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_PROTOCOLS: Final = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
_MECHANISMS: Final = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"})
_MASK: Final = "'***'"


def _masked(value: str | None) -> str:
    return "None" if value is None else _MASK


def _optional_text(
    _instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        # The value itself is not echoed: it may be a secret.
        raise InvalidStoreConfigError(attribute.name, "<hidden>", "must be a non-empty string")


@attrs.frozen(kw_only=True)
class SecurityConfig:
    """Kafka client security: ``security.protocol``, SASL credentials and TLS files.

    Invariants: the SASL protocols need ``sasl_mechanism``, ``sasl_username``
    and ``sasl_password``; the others take none of them.  The ``ssl_*`` files
    need a TLS protocol (``SSL`` or ``SASL_SSL``).  Paths are passed to
    librdkafka as given (it reads them when a client starts).
    """

    security_protocol: SecurityProtocol = attrs.field(default="PLAINTEXT")
    """``security.protocol``."""
    sasl_mechanism: SaslMechanism | None = attrs.field(default=None)
    """``sasl.mechanism`` (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``)."""
    sasl_username: str | None = attrs.field(default=None, validator=_optional_text)
    """``sasl.username``: the principal is ``User:<sasl_username>``."""
    sasl_password: str | None = attrs.field(default=None, validator=_optional_text, repr=_masked)
    """``sasl.password`` (masked in the repr)."""
    ssl_ca_location: str | None = attrs.field(default=None, validator=_optional_text)
    """``ssl.ca.location``: CA certificate file(s) to verify the broker with."""
    ssl_certificate_location: str | None = attrs.field(default=None, validator=_optional_text)
    """``ssl.certificate.location``: this client's certificate (mutual TLS)."""
    ssl_key_location: str | None = attrs.field(default=None, validator=_optional_text)
    """``ssl.key.location``: this client's private key (mutual TLS)."""
    ssl_key_password: str | None = attrs.field(default=None, validator=_optional_text, repr=_masked)
    """``ssl.key.password``: the private key's passphrase (masked in the repr)."""
    ssl_endpoint_identification_algorithm: Literal["https", "none"] = attrs.field(default="https")
    """``ssl.endpoint.identification.algorithm``: ``https`` checks the broker's host name."""

    @security_protocol.validator
    def _check_protocol(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in _PROTOCOLS:
            raise InvalidStoreConfigError(
                attribute.name, value, f"must be one of {', '.join(sorted(_PROTOCOLS))}"
            )

    @sasl_mechanism.validator
    def _check_mechanism(self, attribute: attrs.Attribute[str | None], value: str | None) -> None:
        if value is not None and value not in _MECHANISMS:
            raise InvalidStoreConfigError(
                attribute.name, value, f"must be one of {', '.join(sorted(_MECHANISMS))}"
            )

    @ssl_endpoint_identification_algorithm.validator
    def _check_endpoint(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in ("https", "none"):
            raise InvalidStoreConfigError(attribute.name, value, "must be 'https' or 'none'")

    def __attrs_post_init__(self) -> None:
        sasl = self.security_protocol.startswith("SASL_")
        credentials = {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password": self.sasl_password,
        }
        for name, value in credentials.items():
            shown = "<hidden>" if name == "sasl_password" else value
            if sasl and value is None:
                raise InvalidStoreConfigError(
                    name, shown, f"is required with security_protocol {self.security_protocol}"
                )
            if not sasl and value is not None:
                raise InvalidStoreConfigError(
                    name, shown, f"needs a SASL security_protocol, not {self.security_protocol}"
                )
        if self.security_protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
            tls = {
                "ssl_ca_location": self.ssl_ca_location,
                "ssl_certificate_location": self.ssl_certificate_location,
                "ssl_key_location": self.ssl_key_location,
                "ssl_key_password": self.ssl_key_password,
            }
            for name, value in tls.items():
                if value is not None:
                    shown = "<hidden>" if name == "ssl_key_password" else value
                    raise InvalidStoreConfigError(
                        name, shown, f"needs SSL or SASL_SSL, not {self.security_protocol}"
                    )

    def client_settings(self) -> dict[str, str]:
        """The librdkafka properties, Kafka's names; empty for ``PLAINTEXT`` (the default).

        The result holds the secrets in clear: pass it to a client, never log it.
        """
        if self.security_protocol == "PLAINTEXT":
            return {}
        settings: dict[str, str] = {"security.protocol": self.security_protocol}
        if self.sasl_mechanism is not None:
            settings["sasl.mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            settings["sasl.username"] = self.sasl_username
        if self.sasl_password is not None:
            settings["sasl.password"] = self.sasl_password
        if self.security_protocol in ("SSL", "SASL_SSL"):
            settings["ssl.endpoint.identification.algorithm"] = (
                self.ssl_endpoint_identification_algorithm
            )
            optional = {
                "ssl.ca.location": self.ssl_ca_location,
                "ssl.certificate.location": self.ssl_certificate_location,
                "ssl.key.location": self.ssl_key_location,
                "ssl.key.password": self.ssl_key_password,
            }
            settings.update({key: value for key, value in optional.items() if value is not None})
        return settings


_REFUSED_CODES: Final = frozenset({"_SSL", "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"})
_TLS_ALERTS: Final = ("ssl/tls alert", "ssl alert number")
"""In a ``_TRANSPORT`` reason (lower case): the broker ended the TLS handshake with an alert
(it refused our certificate, or wanted one and got none): OpenSSL 3 says ``ssl/tls alert
certificate unknown: SSL alert number 46``, OpenSSL 1.1 ``sslv3 alert bad certificate: SSL
alert number 42``."""
_SLICE_S: Final = 1.0


class ConnectionErrors:
    """librdkafka's client-level errors (pass the instance as ``error_cb``): keeps the first
    that means this client will never get in.

    Refused: ``_SSL`` (our side of the TLS handshake failed: the broker's
    certificate is not trusted or not its host's), ``_AUTHENTICATION`` /
    ``SASL_AUTHENTICATION_FAILED`` (wrong mechanism, user or password), and a
    ``_TRANSPORT`` error whose reason is a TLS alert from the broker (our client
    certificate refused or missing).  Everything else (a broker down, a timeout)
    may heal and is ignored.

    Thread-safety: librdkafka calls it on the thread that polls the client;
    :attr:`refused` is read after that poll, on the same thread.
    """

    def __init__(self) -> None:
        self.refused: tuple[str, str] | None = None
        """``(librdkafka error name, reason)`` of the first refusal seen, or ``None``."""

    def __call__(self, error: Any) -> None:
        """librdkafka's ``error_cb``: ``error`` is a ``KafkaError``."""
        if self.refused is not None:
            return
        name, reason = str(error.name()), str(error.str())
        alert = name == "_TRANSPORT" and any(text in reason.lower() for text in _TLS_ALERTS)
        if name in _REFUSED_CODES or alert:
            self.refused = (name, reason)


def await_cluster(clients: Any, settings: Mapping[str, Any], *, timeout_s: float = 30) -> None:
    """Return once an admin client with ``settings`` gets the cluster's metadata.

    The probe is its own admin client (from ``clients``, a
    :class:`~statestore.kafka.clients.KafkaClients`) with ``error_cb`` set to a
    :class:`ConnectionErrors`, dropped afterwards: the runtime's long-lived
    clients keep librdkafka's default of logging errors, so no error event
    waits in a queue nobody polls.  Asks in slices of a second; after a failed
    slice it serves the probe's callbacks (``poll(0)``) and raises
    :class:`KafkaClientError` (operation ``connect``, ``code`` the librdkafka
    error name) at once if a refusal was seen, or the last failure after
    ``timeout_s``.
    """
    errors = ConnectionErrors()
    admin = clients.admin({**settings, "error_cb": errors})
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.001, min(_SLICE_S, remaining)))
        except Exception as exc:
            admin.poll(0)
            if errors.refused is not None:
                code, reason = errors.refused
                raise KafkaClientError("connect", code, reason) from exc
            if time.monotonic() >= deadline:
                error: Any = exc.args[0] if exc.args else None
                if hasattr(error, "name") and hasattr(error, "str"):  # a librdkafka KafkaError
                    raise client_error("connect", error.name(), error.str()) from exc
                raise KafkaClientError("connect", type(exc).__name__, str(exc)) from exc
        else:
            return
