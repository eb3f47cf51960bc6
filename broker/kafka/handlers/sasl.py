"""SaslHandshake (17) v0..1 and SaslAuthenticate (36) v0..1: SASL/PLAIN whose password is a token.

On a ``SASL_PLAINTEXT`` listener a connection must authenticate before anything but ApiVersions and these two
(anything else closes it, as Kafka does). The PLAIN message is ``authzid NUL username NUL password``; the
password is a JWT (``token:<jwt>`` is accepted too, as Kafka-on-Pulsar clients send it) checked by the
broker's token authentication (``broker/security.py``), and the token's role becomes the connection's
principal (the username is not trusted). With authentication off, the username is taken as the principal.
A refused token answers SASL_AUTHENTICATION_FAILED and closes the connection. Only the SaslAuthenticate flow
(handshake v1) is served, not v0's raw SASL frames.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import Credentials

from ..codec import ErrorCode
from ..structs import as_dict, make

log = logging.getLogger("broker.kafka.handlers.sasl")

MECHANISMS = ["PLAIN"]
UNAUTHENTICATED_KEYS = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


async def sasl_handshake(server: Any, request: Any, ctx: Any) -> Any:
    conn = ctx.extra["connection"]
    mechanism = as_dict(request)["mechanism"]
    if mechanism not in MECHANISMS:
        return make(request.RESPONSE_TYPE, {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                            "enabled_mechanisms": MECHANISMS})
    conn.sasl_mechanism = mechanism
    return make(request.RESPONSE_TYPE, {"error_code": ErrorCode.NONE, "enabled_mechanisms": MECHANISMS})


def parse_plain(data: bytes) -> tuple[str, str]:
    """(username, password) of a SASL/PLAIN message; ValueError when it is not one."""
    parts = data.split(b"\x00")
    if len(parts) != 3 or not parts[1] or not parts[2]:
        raise ValueError("not a SASL/PLAIN message (authzid NUL username NUL password)")
    return parts[1].decode("utf-8"), parts[2].decode("utf-8")


async def sasl_authenticate(server: Any, request: Any, ctx: Any) -> Any:
    conn = ctx.extra["connection"]

    def answer(code: int, message: str | None = None, lifetime_ms: int = 0) -> Any:
        return make(request.RESPONSE_TYPE, {"error_code": code, "error_message": message, "sasl_auth_bytes": b"",
                                            "session_lifetime_ms": lifetime_ms})

    if conn.sasl_mechanism != "PLAIN" or conn.principal is not None:
        ctx.extra["close_after"] = True
        return answer(ErrorCode.ILLEGAL_SASL_STATE, "SaslHandshake (PLAIN) must come first, and only once")
    try:
        username, password = parse_plain(as_dict(request)["sasl_auth_bytes"] or b"")
    except (ValueError, UnicodeDecodeError) as exc:
        ctx.extra["close_after"] = True
        return answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    token = password[len("token:"):] if password.startswith("token:") else password
    security = server.service.security
    lifetime_ms = 0
    if security.authentication is None:
        principal = username
    else:
        try:
            authenticated = security.authentication.authenticate(Credentials(method="token", data=token.encode()))
        except AuthenticationError as exc:
            security.count_failure(exc.reason)
            log.info("[%s] Kafka SASL/PLAIN refused for %r: %s", conn.peer, username[:64], exc)
            ctx.extra["close_after"] = True
            return answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
        principal = authenticated.role
        if authenticated.expires_at_s is not None:
            lifetime_ms = max(1, int((authenticated.expires_at_s - time.time()) * 1000))
    conn.principal = principal
    log.info("[%s] Kafka client authenticated as %s", conn.peer, principal)
    return answer(ErrorCode.NONE, lifetime_ms=lifetime_ms)


HANDLERS = {17: (0, 1, sasl_handshake), 36: (0, 1, sasl_authenticate)}
