"""Lookups answered by the proxy itself, by asking the region's brokers (Pulsar's ``LookupProxyHandler``).

A LOOKUP is asked of a registered broker (round robin) and its Redirect answers are followed, at most
``max_lookup_redirects`` times and only to registered brokers, until one answers Connect; the client then gets
that broker's URL with ``proxy_through_service_url`` (:func:`proxy.handshake.lookup_connect`). PARTITIONED_METADATA,
GET_TOPICS_OF_NAMESPACE and GET_SCHEMA are asked of any registered broker and its answer is passed on under
the client's request id. A broker's failure answer keeps its code and message; a broker that cannot be reached
or does not answer in time is ServiceNotReady, which pulsar-client retries. With authorization on, the client's
role is checked first (:mod:`proxy.authorization`) and a refusal is the command's AuthorizationError answer.

The proxy talks to brokers with Magnetar's protocol client (``magnetar.protocol.client``). Its connections are
pooled per client role: each announces that role as ``original_principal``, so a broker authorizes every lookup
for the client it is really for, and connections are shared by every client connection of one role.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Optional

from magnetar.protocol import encode_command, pb
from magnetar.protocol.client import ClientError, ConnectionPool, ServerError
from magnetar.protocol.client.errors import InvalidServiceUrlError

from config_store import MetadataError

from .authorization import LookupAuthorizer
from .broker_client import BrokerClient
from .directory import BrokerDirectory
from .errors import ProxyError
from .handshake import lookup_connect, lookup_failure
from .metrics import ProxyStats

__all__ = ["LookupProxy"]

log = logging.getLogger("proxy.lookups")

T = pb.BaseCommand
_LookupType = pb.CommandLookupTopicResponse
_MAX_POOLS = 10_000  # distinct client roles with live lookup connections


class LookupProxy:
    """Answers the four lookup commands (see the module docstring). ``await close()`` closes its connections.

    Args:
        directory: the region's brokers.
        broker_client: the proxy's credentials and TLS towards brokers.
        timeout_s: how long one broker may take to answer.
        connect_timeout_s: TCP, TLS and CONNECT towards a broker.
        max_redirects: Redirect answers followed for one LOOKUP.
        stats: where refusals are counted.
        authorizer: checks the client's role first (None: authorization is off).
    """

    def __init__(self, *, directory: BrokerDirectory, broker_client: BrokerClient, timeout_s: float,
                 connect_timeout_s: float, max_redirects: int, stats: ProxyStats,
                 authorizer: Optional[LookupAuthorizer] = None) -> None:
        self.directory = directory
        self.stats = stats
        self.authorizer = authorizer
        self.broker_client = broker_client
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_redirects = max_redirects
        self._pools: dict[Optional[str], ConnectionPool] = {}
        self._closed = False

    def _pool(self, role: Optional[str]) -> ConnectionPool:
        pool = self._pools.get(role)
        if pool is None:
            if len(self._pools) >= _MAX_POOLS:
                self._evict_idle()
            pool = ConnectionPool(ssl_context=self.broker_client.ssl_context, auth=self.broker_client.auth,
                                  connect_timeout_s=self.connect_timeout_s, operation_timeout_s=self.timeout_s,
                                  original_principal=role)
            self._pools[role] = pool
        return pool

    def _evict_idle(self) -> None:
        """Drops the pools without live connections (roles seen once, long ago)."""
        for role in [r for r, p in self._pools.items() if len(p) == 0]:
            del self._pools[role]

    async def close(self) -> None:
        self._closed = True
        pools, self._pools = list(self._pools.values()), {}
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)

    # -- answering -----------------------------------------------------------------------------------------

    async def answer(self, cmd: pb.BaseCommand, *, role: Optional[str]) -> bytes:
        """The frame answering lookup command ``cmd`` (never raises: failures are failure answers)."""
        request_id = _request_id(cmd)
        try:
            if self.authorizer is not None and not await self._authorized(cmd, role):
                self.stats.authorization_failures[_OPERATIONS[cmd.type]] += 1
                what = _subject(cmd)
                log.info("role %r may not look up %s", role, what)
                return lookup_failure(cmd.type, request_id, pb.AuthorizationError,
                                      f"Client with role {role!r} is not authorized to look up {what}")
            if cmd.type == T.LOOKUP:
                return await self._lookup(cmd.lookupTopic, role)
            return await self._forward(cmd, role)
        except ServerError as e:
            return lookup_failure(cmd.type, request_id, e.code, _server_message(e))
        except InvalidServiceUrlError as e:
            return lookup_failure(cmd.type, request_id, pb.MetadataError, f"a broker answered a bad URL: {e}")
        except (ClientError, ProxyError) as e:
            return lookup_failure(cmd.type, request_id, pb.ServiceNotReady, str(e))
        except MetadataError as e:  # the configuration store, asked for permissions
            return lookup_failure(cmd.type, request_id, pb.ServiceNotReady, f"cannot read permissions: {e}")

    async def _authorized(self, cmd: pb.BaseCommand, role: Optional[str]) -> bool:
        assert self.authorizer is not None
        if cmd.type == T.GET_TOPICS_OF_NAMESPACE:
            return await self.authorizer.can_list_namespace(role, cmd.getTopicsOfNamespace.namespace)
        return await self.authorizer.can_lookup_topic(role, _subject(cmd))

    async def _lookup(self, cmd: pb.CommandLookupTopic, role: Optional[str]) -> bytes:
        url = self.directory.next_binary_url()
        authoritative = False
        for _ in range(self.max_redirects + 1):
            conn = await self._pool(role).get(url)
            request = pb.CommandLookupTopic(topic=cmd.topic, authoritative=authoritative)
            answer = (await conn.request(request, timeout_s=self.timeout_s)).lookupTopicResponse
            if answer.response == _LookupType.Failed:
                return lookup_failure(T.LOOKUP, cmd.request_id, answer.error, answer.message)
            found = answer.brokerServiceUrlTls if self.directory.tls else answer.brokerServiceUrl
            if not found:
                kind = "TLS URL" if self.directory.tls else "pulsar:// URL"
                return lookup_failure(T.LOOKUP, cmd.request_id, pb.ServiceNotReady,
                                      f"broker {url} answered the lookup of {cmd.topic} without a {kind}")
            if answer.response == _LookupType.Connect:
                return lookup_connect(cmd.request_id, found)
            await self.directory.check_binary_url(found)  # redirects lead only to this region's brokers
            url, authoritative = found, answer.authoritative
            log.debug("lookup of %s redirected to %s", cmd.topic, url)
        return lookup_failure(T.LOOKUP, cmd.request_id, pb.ServiceNotReady, "Reached max number of redirections")

    async def _forward(self, cmd: pb.BaseCommand, role: Optional[str]) -> bytes:
        """Asks any broker the same question and returns its answer under the client's request id."""
        inner = _body(cmd)
        copy = type(inner)()
        copy.CopyFrom(inner)
        conn = await self._pool(role).get(self.directory.next_binary_url())
        response = await conn.request(copy, timeout_s=self.timeout_s)
        _body(response).request_id = inner.request_id
        return encode_command(response)


_BODIES = {T.LOOKUP: "lookupTopic", T.PARTITIONED_METADATA: "partitionMetadata",
           T.GET_TOPICS_OF_NAMESPACE: "getTopicsOfNamespace", T.GET_SCHEMA: "getSchema",
           T.LOOKUP_RESPONSE: "lookupTopicResponse", T.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
           T.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
           T.GET_SCHEMA_RESPONSE: "getSchemaResponse"}


def _body(cmd: pb.BaseCommand):
    return getattr(cmd, _BODIES[cmd.type])


_OPERATIONS = {T.LOOKUP: "lookup", T.PARTITIONED_METADATA: "partitions_metadata",
               T.GET_TOPICS_OF_NAMESPACE: "get_topics_of_namespace", T.GET_SCHEMA: "get_schema"}


def _subject(cmd: pb.BaseCommand) -> str:
    """The topic (or, for GET_TOPICS_OF_NAMESPACE, the namespace) a lookup command is about."""
    if cmd.type == T.GET_TOPICS_OF_NAMESPACE:
        return cmd.getTopicsOfNamespace.namespace
    return _body(cmd).topic


def _request_id(cmd: pb.BaseCommand) -> int:
    return _body(cmd).request_id


def _server_message(err: ServerError) -> str:
    """The broker's own text, without the ``Code:`` prefix the client error adds."""
    text = str(err)
    prefix = f"{err.code_name}: "
    return text[len(prefix):] if text.startswith(prefix) else text
