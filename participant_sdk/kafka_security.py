"""TLS and SASL for every Kafka client sagaflow makes, from ``SAGAFLOW_KAFKA_*`` variables.

Managed Kafka speaks ``SASL_SSL`` (SCRAM or PLAIN over TLS) or mutual TLS. The same variables
serve the coordinator, the relay and participants: each process runs with its own environment,
so each can carry its own credentials.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["KafkaSecurity"]


class KafkaSecurity(BaseSettings):
    """How a Kafka client authenticates and encrypts; the default is plain TCP."""

    model_config = SettingsConfigDict(env_prefix="SAGAFLOW_KAFKA_", extra="ignore", frozen=True)

    #: ``PLAINTEXT``, ``SSL`` (TLS, optionally with a client certificate), ``SASL_PLAINTEXT``
    #: or ``SASL_SSL`` (SASL over TLS: what managed Kafka services expect).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    #: SASL mechanism with a ``SASL_*`` protocol: ``SCRAM-SHA-512``, ``SCRAM-SHA-256`` or
    #: ``PLAIN``.
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    #: SASL user name and password.
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    #: CA certificates (PEM) that verify the brokers; unset: the system's trust store.
    ssl_cafile: Path | None = None
    #: Client certificate and key (PEM) for mutual TLS.
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    #: Check that the broker's certificate names the host connected to.
    ssl_check_hostname: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        sasl = self.security_protocol.startswith("SASL_")
        if sasl and (self.sasl_mechanism is None or not self.sasl_username
                     or self.sasl_password is None):
            raise ValueError(f"security protocol {self.security_protocol} needs "
                             "SAGAFLOW_KAFKA_SASL_MECHANISM, SAGAFLOW_KAFKA_SASL_USERNAME and "
                             "SAGAFLOW_KAFKA_SASL_PASSWORD")
        if not sasl and self.sasl_mechanism is not None:
            raise ValueError("SAGAFLOW_KAFKA_SASL_MECHANISM needs SAGAFLOW_KAFKA_SECURITY_PROTOCOL"
                             " SASL_SSL or SASL_PLAINTEXT")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("SAGAFLOW_KAFKA_SSL_CERTFILE and SAGAFLOW_KAFKA_SSL_KEYFILE go "
                             "together")
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.security_protocol.endswith("SSL"):
            return None
        from aiokafka.helpers import create_ssl_context  # aiokafka only when a client is built

        context: ssl.SSLContext = create_ssl_context(
            cafile=str(self.ssl_cafile) if self.ssl_cafile else None,
            certfile=str(self.ssl_certfile) if self.ssl_certfile else None,
            keyfile=str(self.ssl_keyfile) if self.ssl_keyfile else None,
        )
        context.check_hostname = self.ssl_check_hostname
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client; empty for plain TCP."""
        if self.security_protocol == "PLAINTEXT":
            return {}
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        context = self.ssl_context()
        if context is not None:
            out["ssl_context"] = context
        if self.sasl_mechanism is not None:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = (self.sasl_password.get_secret_value()
                                          if self.sasl_password else None)
        return out
