"""The kazoo implementation of :class:`~config_store.store.MetadataStore` (see store.py's theory of operation).

kazoo runs its connection, completion and watcher callbacks on its own threads. Nothing here blocks the event
loop on ZooKeeper: requests go out through kazoo's ``*_async`` methods and their completions come back as
asyncio futures settled with ``loop.call_soon_threadsafe``; kazoo's state listener and one-shot watchers are
bridged the same way. kazoo exceptions are mapped to :mod:`config_store.errors` here and never escape.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from typing import Any, Callable

from kazoo import exceptions as kex
from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry

from .errors import (BadVersionError, InvalidMetadataError, MetadataError, MetadataUnavailableError,
                     NodeExistsError, NotEmptyError, NotFoundError, SessionLostError, StoreClosedError)
from .models import Versioned
from .store import MetadataStore, NodeRead, SessionEvent

log = logging.getLogger("config_store")


def _map_kazoo_error(exc: BaseException, op: str, path: str, hosts: str) -> MetadataError:
    where = f"{op} {path}"
    if isinstance(exc, kex.NoNodeError):
        return NotFoundError(f"{where}: no such node")
    if isinstance(exc, kex.NodeExistsError):
        return NodeExistsError(f"{where}: node already exists")
    if isinstance(exc, kex.BadVersionError):
        return BadVersionError(f"{where}: version changed (lost a compare-and-set race); re-read and retry")
    if isinstance(exc, kex.NotEmptyError):
        return NotEmptyError(f"{where}: node has children")
    if isinstance(exc, kex.ConnectionClosedError):
        return StoreClosedError(f"{where}: the ZooKeeper client is closed")
    if isinstance(exc, kex.SessionExpiredError):
        return SessionLostError(f"{where}: ZooKeeper session expired (ZooKeeper {hosts})")
    if isinstance(exc, (kex.ConnectionLoss, kex.OperationTimeoutError, kex.ConnectionDropped,
                        kex.RequestTimeoutError, kex.SessionMovedError)):
        return MetadataUnavailableError(f"{where}: lost the connection to ZooKeeper {hosts} ({type(exc).__name__})")
    if isinstance(exc, (kex.NoAuthError, kex.AuthFailedError)):
        return MetadataError(f"{where}: not authorized by ZooKeeper {hosts}")
    if isinstance(exc, kex.NoChildrenForEphemeralsError):
        return InvalidMetadataError(f"{where}: an ephemeral node cannot have children")
    if isinstance(exc, (ValueError, TypeError)):
        return InvalidMetadataError(f"{where}: {exc}")
    return MetadataError(f"{where}: ZooKeeper error {type(exc).__name__}: {exc}")


class KazooMetadataStore(MetadataStore):
    """:class:`MetadataStore` on a real ZooKeeper ensemble through kazoo.

    Args:
        hosts: ``host:port[,host:port...][/chroot]``.
        session_timeout_ms: the ZooKeeper session timeout asked for.
        connect_timeout_ms: how long ``start()`` waits for the first session.
        operation_timeout_ms: how long one call may wait for a connection and an answer, retries included.
        read_retry: the retry policy for reads and idempotent writes (its ``deadline`` defaults to
            ``operation_timeout_ms``).
    """

    def __init__(self, hosts: str, *, session_timeout_ms: int = 10_000, connect_timeout_ms: int = 15_000,
                 operation_timeout_ms: int = 30_000, read_retry: KazooRetry | None = None) -> None:
        super().__init__(name=f"zk {hosts}", ephemeral_conflict_timeout_s=1.5 * session_timeout_ms / 1000)
        self.hosts = hosts
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._operation_timeout_s = operation_timeout_ms / 1000
        self._retry = read_retry or KazooRetry(max_tries=50, delay=0.05, backoff=2, max_jitter=0.4,
                                               max_delay=1.0, deadline=self._operation_timeout_s)
        self._last_session_id: int | None = None
        self._in_flight: set[asyncio.Future] = set()  # bridged requests not answered yet
        self._lost_reported = False
        self._client = KazooClient(
            hosts=hosts, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_jitter=0.4, max_delay=2.0),
            logger=logging.getLogger("config_store.kazoo"))

    # ------------------------------------------------------------------------------------------ lifecycle

    async def _open(self) -> None:
        self._client.add_listener(self._on_kazoo_state)
        self._client.start_async()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await self._connected.wait()
        except TimeoutError:
            raise MetadataUnavailableError(
                f"could not connect to ZooKeeper {self.hosts} within {self._connect_timeout_s:g}s") from None

    async def _shutdown(self) -> None:
        def stop() -> None:
            try:
                self._client.stop()
            finally:
                self._client.close()
                self._client.remove_listener(self._on_kazoo_state)

        # kazoo's stop() joins its threads: run it on a short-lived thread of its own (not the loop's
        # executor, whose idle workers would outlive the store).
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def run() -> None:
            try:
                stop()
                result: BaseException | None = None
            except BaseException as e:  # reported on the loop
                result = e
            self._post(_settle, done, None, result)

        thread = threading.Thread(target=run, name=f"config-store-close {self.hosts}", daemon=True)
        thread.start()
        try:
            await done
        except Exception as e:
            log.warning("[%s] error while stopping the ZooKeeper client: %s", self.name, e)

    def _on_kazoo_state(self, state: str) -> None:
        """kazoo's state listener: runs on kazoo's connection thread, so it only hands over to the loop."""
        client_id = self._client.client_id
        self._post(self._on_state, state, client_id[0] if client_id else None)

    def _on_state(self, state: str, session_id: int | None) -> None:
        if state == KazooState.CONNECTED:
            new_session = session_id != self._last_session_id
            if new_session and self._last_session_id is not None and not self._lost_reported:
                # A new session without a LOST in between: count the loss anyway, never ignore it.
                self._session_event(SessionEvent.LOST)
            self._last_session_id, self._lost_reported = session_id, False
            self._session_event(SessionEvent.CONNECTED if new_session else SessionEvent.RECONNECTED)
        elif state == KazooState.SUSPENDED:
            self._session_event(SessionEvent.SUSPENDED)
        elif state == KazooState.LOST:
            self._lost_reported = True
            self._session_event(SessionEvent.LOST)

    def _session_id(self) -> int | None:
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """``(session id, password)`` of the current ZooKeeper session, None when not connected.

        Operators and the test kit use it to find (or deliberately expire) this process's session.
        """
        client_id = self._client.client_id
        return (client_id[0], client_id[1]) if client_id else None

    # ------------------------------------------------------------------------------------------ bridging

    def _abandon_in_flight(self) -> None:
        # kazoo keeps a request sent while reconnecting until a connection answers it: stop waiting for it.
        for fut in list(self._in_flight):
            if not fut.done():
                fut.set_exception(TimeoutError())

    def _bridge(self, async_result: Any) -> asyncio.Future:
        """An asyncio future settled (on the loop) when kazoo's IAsyncResult completes (on kazoo's thread)."""
        fut = asyncio.get_running_loop().create_future()
        self._in_flight.add(fut)
        fut.add_done_callback(self._in_flight.discard)

        def completed(result: Any) -> None:
            try:
                value, error = result.get(block=False), None
            except BaseException as e:
                value, error = None, e
            self._post(_settle, fut, value, error)

        async_result.rawlink(completed)
        return fut

    async def _call(self, op: str, path: str, start: Callable[[], Any], *, retry: bool) -> Any:
        """Sends one request (and, if ``retry``, re-sends it on retriable failures under the retry policy)."""
        loop = asyncio.get_running_loop()
        policy = self._retry
        deadline = loop.time() + (policy.deadline or self._operation_timeout_s)
        delay_s, attempts = policy.delay, 0
        while True:
            self._check_open()
            try:
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation that
                # arrives together with the answer, which would keep a cancelled watch task alive.
                async with asyncio.timeout_at(deadline):
                    await self._wait_connected()
                    return await self._bridge(start())
            except TimeoutError:
                error: MetadataError = MetadataUnavailableError(
                    f"{op} {path}: no connection to ZooKeeper {self.hosts} within the operation deadline")
                cause: BaseException | None = None
            except Exception as e:
                error, cause = _map_kazoo_error(e, op, path, self.hosts), e
            attempts += 1
            sleep_s = delay_s * random.uniform(1 - policy.max_jitter, 1 + policy.max_jitter)
            if (not retry or not error.retriable or attempts == policy.max_tries
                    or loop.time() + sleep_s >= deadline or self._giving_up()):
                raise error from cause
            await asyncio.sleep(sleep_s)
            delay_s = min(sleep_s * policy.backoff, policy.max_delay)

    # ------------------------------------------------------------------------------------------ primitives

    async def _get(self, path: str) -> NodeRead | None:
        try:
            data, stat = await self._call("get", path, lambda: self._client.get_async(path), retry=True)
        except NotFoundError:
            return None
        return NodeRead(Versioned(data or b"", stat.version), stat.mzxid, stat.ephemeralOwner)

    async def _exists(self, path: str) -> int | None:
        stat = await self._call("exists", path, lambda: self._client.exists_async(path), retry=True)
        return stat.version if stat is not None else None

    async def _create(self, path: str, data: bytes, *, ephemeral: bool, sequential: bool,
                      make_parents: bool) -> str:
        return await self._call("create", path, lambda: self._client.create_async(
            path, data, ephemeral=ephemeral, sequence=sequential, makepath=make_parents), retry=False)

    async def _set(self, path: str, data: bytes, expected_version: int) -> int:
        stat = await self._call("set", path, lambda: self._client.set_async(path, data, version=expected_version),
                                retry=expected_version == -1)
        return stat.version

    async def _delete_one(self, path: str, expected_version: int) -> None:
        await self._call("delete", path, lambda: self._client.delete_async(path, version=expected_version),
                         retry=expected_version == -1)

    async def _children(self, path: str) -> list[str] | None:
        try:
            return list(await self._call("children", path, lambda: self._client.get_children_async(path),
                                         retry=True))
        except NotFoundError:
            return None

    async def _read_watch(self, kind: str, path: str, trigger: Callable[..., None]) -> tuple[Any, Any]:
        client = self._client
        for _ in range(10):
            try:
                if kind == "data":
                    data, stat = await self._call("get", path, lambda: client.get_async(path, watch=trigger),
                                                  retry=True)
                    return Versioned(data or b"", stat.version), stat.mzxid
                kids = await self._call("children", path, lambda: client.get_children_async(path, watch=trigger),
                                        retry=True)
                return sorted(kids), tuple(sorted(kids))
            except NotFoundError:
                pass
            # Missing: an exists-watch tells us when it appears. If it appeared meanwhile, read again.
            if await self._call("exists", path, lambda: client.exists_async(path, watch=trigger), retry=True) is None:
                return (None, None) if kind == "data" else ([], ())
        raise MetadataUnavailableError(f"watch {path}: node keeps appearing and vanishing")


def _settle(fut: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if fut.done():
        return  # the waiter timed out or was cancelled
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)
