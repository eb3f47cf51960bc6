"""Authentication providers, as Apache Pulsar's ``tls`` and ``token`` providers decide.

A process (proxy, broker, admin API) hands a provider the ``Credentials`` a connection or request carried and
gets back the ``Authenticated`` role, or an ``AuthenticationError`` with a reason label. The providers are pure
decisions: the TLS handshake (done by ``magnetar.auth.tls`` contexts) has already verified the client
certificate chain, and the provider only reads what the verified certificate says.

What arrives, from pulsar-client (C++ core of the Python package):

* ``AuthenticationToken``: CONNECT ``auth_method_name="token"``, ``auth_data`` = the token bytes (the token
  supplier's value, possibly read from a file, so surrounding whitespace is ignored); HTTP requests carry
  ``Authorization: Bearer <token>``.
* ``AuthenticationTLS``: CONNECT ``auth_method_name="tls"`` and no ``auth_data``: the identity is the client
  certificate presented in the TLS handshake. The role is the CN of the certificate's subject (Pulsar takes the
  first ``CN=`` of the RFC 2253 form, that is the most specific one).
* no authentication: ``auth_method_name`` empty or ``"none"``.
"""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

from magnetar.auth import tokens
from magnetar.auth.errors import AuthenticationError
from magnetar.auth.settings import PROVIDER_NAMES
from magnetar.errors import ConfigError

NO_METHOD = ("", "none")


@dataclass(frozen=True)
class Credentials:
    """What a client offered.

    Attributes:
        method: CONNECT ``auth_method_name``: "tls", "token", or "" / "none".
        data: CONNECT ``auth_data`` (a token), or the Bearer token of an HTTP request.
        peer_certificate: ``getpeercert()`` of a client certificate the TLS handshake verified; None (or {})
            when the client presented none.
    """

    method: str
    data: bytes = b""
    peer_certificate: Optional[dict] = None


@dataclass(frozen=True)
class Authenticated:
    """An authenticated client.

    Attributes:
        role: the principal authorization decisions are about.
        method: the provider that authenticated it ("tls" or "token").
        expires_at_s: when the credentials stop being valid (epoch seconds: a token's ``exp``, a certificate's
            notAfter); None when they do not expire. A connection past it must refresh or be closed.
    """

    role: str
    method: str
    expires_at_s: Optional[float] = None


class AuthenticationProvider(Protocol):
    """One authentication method."""

    method: str

    def authenticate(self, credentials: Credentials) -> Authenticated:
        """The role of ``credentials``; raises ``AuthenticationError``."""
        ...


def common_name(peer_certificate: dict) -> Optional[str]:
    """The most specific CN of a ``getpeercert()`` subject (the first one of its RFC 2253 string, as Pulsar
    reads it), or None."""
    found = None
    subject = peer_certificate.get("subject") or ()
    try:
        for rdn in subject:
            for name, value in rdn:
                if name == "commonName" and isinstance(value, str) and value:
                    found = value  # DER order is least specific first; RFC 2253 reverses it
    except (TypeError, ValueError):
        return None
    return found


class TlsAuthenticationProvider:
    """Method "tls": the role is the CN of the verified client certificate's subject."""

    method = "tls"

    def authenticate(self, credentials: Credentials) -> Authenticated:
        cert = credentials.peer_certificate
        if not cert:
            raise AuthenticationError("no client certificate: connect with TLS and a client certificate signed "
                                      "by the trusted CA (pulsar-client: AuthenticationTLS(cert, key))",
                                      reason="no_client_cert")
        role = common_name(cert)
        if role is None:
            raise AuthenticationError("the client certificate's subject has no CN, so it names no role",
                                      reason="no_role")
        return Authenticated(role=role, method=self.method, expires_at_s=_not_after_s(cert))


def _not_after_s(cert: dict) -> Optional[float]:
    try:
        return float(ssl.cert_time_to_seconds(cert["notAfter"]))
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TokenSettings:
    """Token authentication settings (Pulsar's ``tokenSecretKey``, ``tokenPublicKey``, ``tokenAuthClaim``,
    ``tokenAudienceClaim``, ``tokenAudience``).

    Attributes:
        secret_key: HS256 key as ``data:;base64,<b64>`` or ``file:///path`` (raw bytes); wins over public_key.
        public_key: RS256/ES256 public key (PEM or DER) as ``data:;base64,...`` or ``file:///path``.
        role_claim: the claim holding the role ("" means "sub").
        audience_claim: the claim holding the audience ("" means "aud").
        audience: when set, the token's audience claim must contain it.
    """

    secret_key: str = ""
    public_key: str = ""
    role_claim: str = "sub"
    audience_claim: str = "aud"
    audience: str = ""


class TokenAuthenticationProvider:
    """Method "token": a JWT verified with the configured key; the role is its role claim.

    Raises at construction:
        ConfigError: no key, or a key that cannot be read or used.
    """

    method = "token"

    def __init__(self, settings: TokenSettings, *, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self._key = tokens.VerificationKey.from_settings(secret_key=settings.secret_key,
                                                         public_key=settings.public_key)
        self._role_claim = settings.role_claim or "sub"
        self._audience_claim = settings.audience_claim or "aud"
        self._clock = clock

    def authenticate(self, credentials: Credentials) -> Authenticated:
        claims = tokens.verify_token(credentials.data, self._key, audience_claim=self._audience_claim,
                                     audience=self.settings.audience, now_s=self._clock())
        role = tokens.role_of(claims, self._role_claim)
        if role is None:
            raise AuthenticationError(f"the token has no role: claim {self._role_claim!r} is missing or empty",
                                      reason="no_role")
        return Authenticated(role=role, method=self.method, expires_at_s=tokens.expires_at_s(claims))


class AuthenticationService:
    """The configured providers, chosen by the method a client names (Pulsar's ``AuthenticationService``)."""

    def __init__(self, providers: Sequence[AuthenticationProvider]) -> None:
        self._providers = {p.method: p for p in providers}

    @classmethod
    def from_settings(cls, providers: Sequence[str], *, token: TokenSettings) -> "AuthenticationService":
        """Providers by name (``authentication_providers``: "tls", "token").

        Raises:
            ConfigError: an unknown or missing provider name, or token settings without a usable key.
        """
        built: list[AuthenticationProvider] = []
        for name in providers:
            if name == "tls":
                built.append(TlsAuthenticationProvider())
            elif name == "token":
                built.append(TokenAuthenticationProvider(token))
            else:
                raise ConfigError(f"unknown authentication provider {name!r}; known: {', '.join(PROVIDER_NAMES)}")
        if not built:
            raise ConfigError("authentication is enabled but authentication_providers is empty; name "
                              "\"tls\", \"token\" or both")
        return cls(built)

    @property
    def methods(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def authenticate(self, credentials: Credentials) -> Authenticated:
        """The role of a binary-protocol client (CONNECT or AUTH_RESPONSE credentials)."""
        method = credentials.method
        if method in NO_METHOD:
            raise AuthenticationError(f"authentication required: connect with {self._offer()}",
                                      reason="no_credentials")
        provider = self._providers.get(method)
        if provider is None:
            raise AuthenticationError(f"authentication method {method[:40]!r} is not enabled here; use "
                                      f"{self._offer()}", reason="unknown_method")
        return provider.authenticate(credentials)

    def authenticate_http(self, authorization_header: Optional[str],
                          peer_certificate: Optional[dict]) -> Authenticated:
        """The role of an HTTP request: its ``Authorization: Bearer`` token when the header is present (a
        credential the client chose to send is the one judged), else its verified client certificate."""
        if authorization_header is not None and authorization_header.strip():
            scheme, _, value = authorization_header.strip().partition(" ")
            if scheme.lower() != "bearer":
                raise AuthenticationError(f"Authorization scheme {scheme[:20]!r} is not supported; send "
                                          f"'Authorization: Bearer <token>'", reason="unknown_method")
            return self.authenticate(Credentials(method="token", data=value.strip().encode("utf-8", "replace"),
                                                 peer_certificate=peer_certificate))
        if peer_certificate and "tls" in self._providers:
            return self.authenticate(Credentials(method="tls", peer_certificate=peer_certificate))
        raise AuthenticationError(f"authentication required: send {self._offer(http=True)}",
                                  reason="no_credentials")

    def _offer(self, *, http: bool = False) -> str:
        ways = []
        if "token" in self._providers:
            ways.append("'Authorization: Bearer <token>'" if http else "a token (AuthenticationToken)")
        if "tls" in self._providers:
            ways.append("a client certificate" if http else "a client certificate (AuthenticationTLS)")
        return " or ".join(ways) or "credentials"
