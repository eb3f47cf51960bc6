"""Errors of authentication and authorization.

``AuthenticationError.reason`` is a small closed set of labels, so processes can count refusals per reason
(``magnetar_*_auth_failures_total{reason}``) without the label taking the client's text; ``str(exc)`` is for
the person on the other side (it says what to fix) and never carries the secret material itself.
"""

from __future__ import annotations

from typing import Optional

from magnetar.errors import MagnetarError

REASONS = (
    "no_credentials",   # nothing offered (auth method "none"/empty, empty token, no Authorization header)
    "unknown_method",   # a method this server does not run (or an HTTP scheme other than Bearer)
    "malformed",        # not a JWT, bad JSON, bad claim types, undecodable bytes
    "bad_signature",    # signed with another key, or an algorithm this key does not verify (incl. "none")
    "expired",          # past ``exp`` or before ``nbf``
    "wrong_audience",   # the configured audience is not in the token's audience claim
    "no_role",          # verified, but no usable role (role claim missing/empty, certificate without CN)
    "no_client_cert",   # "tls" without a verified client certificate
    "untrusted_cert",   # a client certificate the trusted CA did not sign (TLS handshake refused)
)


class AuthenticationError(MagnetarError):
    """Refused credentials. ``str(exc)`` tells a person what to fix; ``reason`` is one of ``REASONS``."""

    def __init__(self, message: str, *, reason: str) -> None:
        if reason not in REASONS:
            raise ValueError(f"unknown authentication failure reason {reason!r}")
        super().__init__(message)
        self.reason = reason


class AuthorizationError(MagnetarError):
    """Authenticated, but the role is not allowed to do what it asked."""

    def __init__(self, message: str, *, role: Optional[str] = None, action: Optional[str] = None) -> None:
        super().__init__(message)
        self.role = role
        self.action = action
