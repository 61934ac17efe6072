"""How the runtime's clients authenticate to a secured cluster: TLS and SASL settings.

:class:`SecurityConfig` holds Kafka's client security settings under Kafka's
names (``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``, ``ssl.*``).  The processor adds :meth:`SecurityConfig.client_settings`
to the settings of every client it makes: the admin client, the transactional
producer, the main consumer and the restore and standby consumers.

Secrets (``sasl_password``, ``ssl_key_password``) are masked in the repr, so
they never reach a log line, a metric label or an error message built from
the configuration.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from statestore.errors import InvalidStoreConfigError

__all__ = ["SaslMechanism", "SecurityConfig", "SecurityProtocol"]

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
