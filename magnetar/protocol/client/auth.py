"""The credentials a client presents to a broker: in CONNECT, and again in answer to AUTH_CHALLENGE."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Auth"]


@dataclass(frozen=True)
class Auth:
    """Credentials sent in CONNECT (and again on AUTH_CHALLENGE).

    Attributes:
        method_name: ``"token"`` for a JWT, ``"tls"`` for a client certificate (the certificate itself
            travels in the TLS handshake: put it in the ``ssl_context``), ...
        data: the credential bytes, or a function returning them (called on every (re)connection and
            challenge, so a refreshed token is picked up).
    """

    method_name: str
    data: bytes | Callable[[], bytes] = b""

    @classmethod
    def token(cls, token: str | Callable[[], str]) -> Auth:
        if callable(token):
            return cls("token", lambda: token().encode())
        return cls("token", token.encode())

    @classmethod
    def tls(cls) -> Auth:
        return cls("tls", b"")

    def get_data(self) -> bytes:
        return self.data() if callable(self.data) else self.data

