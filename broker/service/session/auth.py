"""Authentication and authorization on the binary protocol, as Apache Pulsar's ``ServerCnx`` does them.

Theory of operation
-------------------
*CONNECT* (:func:`admit`). With authentication on, the credentials CONNECT carries (``auth_method_name``:
``"token"`` with the JWT in ``auth_data``, or ``"tls"`` with the client certificate the TLS handshake verified)
must give a role (``magnetar.auth``), or the client gets ERROR ``AuthenticationError`` and the connection
closes; the refusal is counted by reason. A CONNECT naming an ``original_principal`` (a proxy acting for its
client) is accepted only from a proxy role (or a superuser) and, with authorization on, a proxy role must name
one: otherwise ERROR ``AuthorizationError`` and close, as Pulsar's "Invalid roles.". The role, the original
principal and when the credentials expire are kept in the connection's :class:`ConnectionIdentity`.

*Refresh* (:class:`CredentialRefresher`, :func:`refresh_action`). Every ``authentication_refresh_check_s``
each connection's credentials are looked at: credentials that expire before the next look are challenged
(AUTH_CHALLENGE with Pulsar's ``"refresh"`` data) if the client announced ``supports_auth_refresh``; the
client answers AUTH_RESPONSE with fresh ones (pulsar-client asks its token supplier again), which must name
the same role. A challenge still unanswered when the credentials expire, or a client that cannot refresh,
gets the connection closed; so does a refused or role-changing refresh, or one whose credentials are already
expired (a client certificate past its notAfter). (Pulsar challenges only after the expiry; challenging one
check ahead keeps a refreshing client's connection valid throughout.) A connection from a proxy (with an
original principal) is never challenged: the proxy splices the client's bytes, so the client would answer
with its own credentials; it is closed when the proxy's credentials expire, as Pulsar does when the proxy does
not forward the client's credentials (proxies use long-lived tokens or certificates).

*Commands* (``authorize_*``). With authorization on, PRODUCER needs ``produce``, SUBSCRIBE ``consume`` (and the
subscription's role list), LOOKUP / PARTITIONED_METADATA / GET_SCHEMA a lookup right, GET_TOPICS_OF_NAMESPACE
and WATCH_TOPIC_LIST the namespace's ``produce`` or ``consume``, GET_OR_CREATE_SCHEMA ``produce`` (decisions in
``broker/security.py``). A refusal is the command's own error answer with ``AuthorizationError`` and happens
before anything is created or loaded.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable, Optional

from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import Authenticated, Credentials
from magnetar.protocol import pb

from ..errors import BrokerServiceError, NotAuthorizedError, map_error
from ..topics.dedup import is_replicator

if TYPE_CHECKING:
    from magnetar.protocol import Frame
    from magnetar.topic_name import TopicName

    from .connection import Connection

log = logging.getLogger("broker.service.session.auth")

ServerError = pb.ServerError
_NO_REQUEST = (1 << 64) - 1  # Pulsar answers a refused CONNECT with request id -1
REFRESH_AUTH_DATA = b"refresh"  # Pulsar's AuthData.REFRESH_AUTH_DATA


@dataclass
class ConnectionIdentity:
    """Who is on a connection (set by CONNECT, refreshed by AUTH_RESPONSE).

    Attributes:
        role: the authenticated role; None when authentication is off.
        original_principal: the client a proxy acts for, or None.
        method: the provider that authenticated the role ("token", "tls").
        expires_at_s: when the credentials stop being valid (epoch seconds); None: never.
        supports_refresh: CONNECT announced ``supports_auth_refresh`` (the client answers AUTH_CHALLENGE).
        challenge_pending: an AUTH_CHALLENGE awaits its AUTH_RESPONSE.
    """

    role: Optional[str] = None
    original_principal: Optional[str] = None
    method: str = ""
    expires_at_s: Optional[float] = None
    supports_refresh: bool = False
    challenge_pending: bool = False

    def describe(self) -> str:
        if self.original_principal:
            return f"role {self.original_principal!r} (through proxy role {self.role!r})"
        return f"role {self.role!r}"


# ------------------------------------------------------------------------------------------ CONNECT


def _refuse(conn: "Connection", error: int, message: str) -> None:
    conn.send_command(pb.CommandError(request_id=_NO_REQUEST, error=error, message=message))
    conn.close()


def admit(conn: "Connection", cmd: pb.CommandConnect) -> bool:
    """Authenticates a CONNECT (see the module docstring). True: go on and answer CONNECTED; False: refused
    (the ERROR is written and the connection is closing)."""
    security = conn.service.security
    identity = conn.identity
    identity.supports_refresh = bool(cmd.feature_flags.supports_auth_refresh)
    if security.authentication is None:
        return True
    method = cmd.auth_method_name if cmd.HasField("auth_method_name") else ""
    who = _authenticate(conn, method, bytes(cmd.auth_data), what="CONNECT")
    if who is None:
        return False
    original = cmd.original_principal if cmd.HasField("original_principal") and cmd.original_principal else None
    if (original or security.authorization_enabled) and not security.is_valid_original_principal(who.role, original):
        security.count_denial("original_principal")
        message = _invalid_principal_message(security, who.role, original)
        log.warning("%s: CONNECT refused: %s", conn.remote_address, message)
        _refuse(conn, ServerError.AuthorizationError, message)
        return False
    if original and not _original_credentials_prove(conn, cmd, original):
        return False
    identity.role, identity.original_principal = who.role, original
    identity.method, identity.expires_at_s = who.method, who.expires_at_s
    log.info("%s: authenticated %s using %s", conn.remote_address, identity.describe(), who.method)
    return True


def _authenticate(conn: "Connection", method: str, data: bytes, *, what: str) -> "Optional[Authenticated]":
    """The role ``method`` and ``data`` (and the connection's client certificate) prove; None when they prove
    none: the refusal is counted, logged and written, and the connection is closing."""
    security = conn.service.security
    credentials = Credentials(method=method, data=data, peer_certificate=conn.peer_certificate)
    try:
        return security.authentication.authenticate(credentials)
    except AuthenticationError as exc:
        security.count_failure(exc.reason)
        log.info("%s: %s refused (%s): %s", conn.remote_address, what, exc.reason, exc)
        _refuse(conn, ServerError.AuthenticationError, str(exc))
        return None


def _original_credentials_prove(conn: "Connection", cmd: pb.CommandConnect, original: str) -> bool:
    """With ``authenticate_original_auth_data``, the client credentials a proxy forwarded must prove the role the
    proxy named as ``original_principal`` (Pulsar ``authenticateOriginalAuthData``): True when they do, or when
    the setting is off or nothing was forwarded (the proxy's word is kept, as in Pulsar). A client certificate
    cannot be forwarded (TLS ends at the proxy), so ``tls`` with no data is the proxy's word too. False: the
    refusal is counted and written, and the connection is closing."""
    security = conn.service.security
    method = cmd.original_auth_method if cmd.HasField("original_auth_method") else ""
    data = cmd.original_auth_data.encode() if cmd.HasField("original_auth_data") else b""
    if not getattr(security.settings, "authenticate_original_auth_data", False) or not method or (method == "tls" and not data):
        return True
    try:
        proved = security.authentication.authenticate(Credentials(method=method, data=data))
    except AuthenticationError as exc:
        security.count_failure(exc.reason)
        log.info("%s: forwarded credentials of %r refused (%s): %s", conn.remote_address, original, exc.reason, exc)
        _refuse(conn, ServerError.AuthenticationError, f"the forwarded credentials of {original!r}: {exc}")
        return False
    if proved.role != original:
        security.count_failure("original_principal_mismatch")
        message = f"the forwarded credentials prove role {proved.role!r}, not the original principal {original!r}"
        log.warning("%s: CONNECT refused: %s", conn.remote_address, message)
        _refuse(conn, ServerError.AuthenticationError, message)
        return False
    return True


def _invalid_principal_message(security, role: str, original: Optional[str]) -> str:
    if not security.is_proxy_role(role):
        return (f"role {role!r} may not act for another principal: only proxy_roles may send original_principal")
    if not original:
        return f"proxy role {role!r} must name the client it acts for (original_principal)"
    return f"original principal {original!r} may not be a proxy role"


# ------------------------------------------------------------------------------------------ refresh


def handle_auth_response(conn: "Connection", frame: "Frame") -> None:
    """AUTH_RESPONSE: fresh credentials for the connection's role; anything else closes the connection."""
    security = conn.service.security
    identity = conn.identity
    if security.authentication is None or identity.role is None:
        return  # nothing was asked (authentication is off)
    response = frame.command.authResponse.response
    method = response.auth_method_name or identity.method
    who = _authenticate(conn, method, bytes(response.auth_data), what="refreshed credentials")
    if who is None:
        return
    if who.expires_at_s is not None and who.expires_at_s <= time.time():
        security.count_failure("expired")
        _refuse(conn, ServerError.AuthenticationError, "the refreshed credentials have expired too")
        return
    if who.role != identity.role:
        log.warning("%s: role cannot change in a refresh (%r, now %r); closing", conn.remote_address, identity.role,
                    who.role)
        _refuse(conn, ServerError.AuthenticationError, f"the role cannot change on a connection: authenticated "
                                                       f"as {identity.role!r}, refreshed as {who.role!r}")
        return
    identity.method, identity.expires_at_s, identity.challenge_pending = who.method, who.expires_at_s, False
    log.info("%s: refreshed the credentials of %s", conn.remote_address, identity.describe())


class RefreshAction(enum.Enum):
    KEEP = "keep"
    CHALLENGE = "challenge"
    CLOSE = "close"


def refresh_action(*, expires_at_s: Optional[float], now_s: float, check_interval_s: float, supports_refresh: bool,
                   challenge_pending: bool) -> RefreshAction:
    """What one periodic look does to a connection (pure; see the module docstring)."""
    if expires_at_s is None:
        return RefreshAction.KEEP
    expired = now_s >= expires_at_s
    if challenge_pending:
        return RefreshAction.CLOSE if expired else RefreshAction.KEEP
    if now_s + check_interval_s < expires_at_s:
        return RefreshAction.KEEP
    if supports_refresh:
        return RefreshAction.CHALLENGE
    return RefreshAction.CLOSE if expired else RefreshAction.KEEP


class CredentialRefresher:
    """Looks at every connection's credentials every ``interval_s`` (see :func:`refresh_action`).

    Args:
        connections: the open connections (called at each look).
        interval_s: ``authentication_refresh_check_s``.
        clock: epoch seconds (credentials expire on the wall clock).
    """

    def __init__(self, connections: Callable[[], Iterable["Connection"]], *, interval_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._connections = connections
        self.interval_s = interval_s
        self._clock = clock
        self._task: Optional[asyncio.Task] = None
        self.challenges = 0
        self.closed_expired = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="credential refresh")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.check()
            except Exception:
                log.exception("checking credentials failed")

    def check(self) -> None:
        """One look at every connection."""
        now = self._clock()
        for conn in list(self._connections()):
            identity = conn.identity
            if conn.closed or identity.role is None:
                continue
            action = refresh_action(expires_at_s=identity.expires_at_s, now_s=now, check_interval_s=self.interval_s,
                                    supports_refresh=identity.supports_refresh and not identity.original_principal,
                                    challenge_pending=identity.challenge_pending)
            if action is RefreshAction.CHALLENGE:
                identity.challenge_pending = True
                self.challenges += 1
                conn.send_command(pb.CommandAuthChallenge(
                    server_version=conn.config.server_version, protocol_version=conn.protocol_version,
                    challenge=pb.AuthData(auth_method_name=identity.method, auth_data=REFRESH_AUTH_DATA)))
                log.info("%s: asked %s for fresh credentials", conn.remote_address, identity.describe())
            elif action is RefreshAction.CLOSE:
                self.closed_expired += 1
                conn.service.security.count_failure("expired")
                log.info("%s: the credentials of %s expired without a refresh; closing", conn.remote_address,
                         identity.describe())
                _refuse(conn, ServerError.AuthenticationError, "credentials expired without a refresh")


# ------------------------------------------------------------------------------------------ commands


async def _require(conn: "Connection", action: str, decision: Awaitable[bool], what: str) -> None:
    try:
        allowed = await decision
    except BrokerServiceError:
        raise
    except Exception as exc:  # the grants could not be read: retriable, never a traceback to the client
        raise map_error(exc) from exc
    if not allowed:
        conn.service.security.count_denial(action)
        raise NotAuthorizedError(f"{conn.identity.describe()} is not authorized to {what}")


async def authorize_produce(conn: "Connection", topic: "TopicName") -> None:
    security = conn.service.security
    if security.authorization_enabled:
        identity = conn.identity
        await _require(conn, "produce", security.can_produce(identity.role, identity.original_principal, topic),
                       f"produce on {topic}")


async def authorize_consume(conn: "Connection", topic: "TopicName", subscription: str) -> None:
    security = conn.service.security
    if security.authorization_enabled:
        identity = conn.identity
        await _require(conn, "consume", security.can_consume(identity.role, identity.original_principal, topic,
                                                             subscription),
                       f"consume from {topic} on subscription {subscription!r}")


async def authorize_lookup(conn: "Connection", topic: "TopicName") -> None:
    security = conn.service.security
    if security.authorization_enabled:
        identity = conn.identity
        await _require(conn, "lookup", security.can_lookup(identity.role, identity.original_principal, topic),
                       f"look up {topic}")


async def authorize_namespace(conn: "Connection", tenant: str, namespace: str) -> None:
    security = conn.service.security
    if security.authorization_enabled:
        identity = conn.identity
        await _require(conn, "list_topics", security.can_list_namespace(identity.role, identity.original_principal,
                                                                        tenant, namespace),
                       f"list the topics of namespace {tenant}/{namespace}")


def authorize_replicator_name(conn: "Connection", producer_name: str) -> None:
    """A producer named as a geo-replicator (``pulsar.repl.<cluster>``) may publish markers and claims the origin
    positions that make replication exactly-once, so with authentication on only a superuser role may take such
    a name (the replicators' ``broker_client`` role is one): trust by role, not by name. Without authentication
    (a development broker) the name alone decides, as before."""
    security = conn.service.security
    if security.authentication is None or not is_replicator(producer_name):
        return
    identity = conn.identity
    if identity.role is None:
        return
    principal = identity.original_principal or identity.role
    if not security.is_superuser(principal):
        security.count_denial("produce")
        raise NotAuthorizedError(f"{identity.describe()} may not create the replicator producer {producer_name!r}: "
                                 f"only a superuser role replicates")
