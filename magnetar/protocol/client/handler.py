"""What producers and consumers share: the state machine of being attached to a topic's broker.

(pulsar-client-go's ``connectionHandler``, Java's ``ConnectionHandler``.)

::

    INIT --start()--> CONNECTING --ok--> READY --connection lost / CLOSE_* from broker--> RECONNECTING
                          |                ^                                                |
                          |                +-------------------- ok ------------------------+
                          +--final error or deadline--> CLOSED      final error --> FAILED
    any --close()--> CLOSING --> CLOSED

:meth:`start` retries retriable errors for up to ``operation_timeout_s`` and raises the rest. Once READY,
a lost attachment starts one reconnection task that retries with jittered exponential backoff until it
succeeds, the handler is closed (the task is cancelled and awaited), or a final error moves the handler to
FAILED. An attempt is *spoiled* when its connection closes, or the broker closes the handler, before the
attempt finished (both can be dispatched before the awaiting coroutine resumes): it then counts as a
retriable failure instead of leaving the handler READY on something already gone.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable

from magnetar.topic_name import TopicName

from .backoff import Backoff
from .connection import Connection
from .errors import AlreadyClosedError, ClientError, ConnectionClosedError, ConsumerBusyError, ProducerBusyError
from .lookup import LookupResult, LookupService
from .urls import parse_service_url

__all__ = ["HandlerState", "TopicHandler"]

log = logging.getLogger(__name__)


class HandlerState(enum.Enum):
    INIT = "init"
    CONNECTING = "connecting"
    READY = "ready"
    RECONNECTING = "reconnecting"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


class TopicHandler:
    """Base of :class:`Producer` and :class:`Consumer` (see the module docstring).

    Subclasses implement :meth:`_attach` (one attempt on a given connection) and may override
    :meth:`_detached` (called when READY is lost) and :meth:`_failed` (final failure).
    """

    kind = "handler"

    def __init__(
        self,
        lookup: LookupService,
        topic: str,
        *,
        operation_timeout_s: float,
        backoff: Backoff | None,
    ) -> None:
        name = TopicName.parse(topic)
        self.topic = str(name)
        self.partition = name.partition_index
        self.operation_timeout_s = operation_timeout_s
        self.state = HandlerState.INIT
        self.failure: BaseException | None = None
        self.reconnections = 0
        self._lookup = lookup
        self._backoff = backoff or Backoff()
        self._conn: Connection | None = None
        self._attempt_conn: Connection | None = None
        self._attempt_spoiled = False
        self._assigned_url: str | None = None
        self._last_lookup: LookupResult | None = None
        self._reconnect_task: asyncio.Task | None = None
        self._closed = asyncio.Event()
        self._close_callbacks: list[Callable[[TopicHandler], None]] = []

    @property
    def _prefix(self) -> str:
        return f"[{self.topic}]"

    @property
    def connection(self) -> Connection | None:
        """The connection the handler is attached through (None while reconnecting)."""
        return self._conn

    @property
    def is_connected(self) -> bool:
        return self.state is HandlerState.READY

    def on_close(self, callback: Callable[[TopicHandler], None]) -> None:
        """Calls ``callback(handler)`` once :meth:`close` has finished."""
        self._close_callbacks.append(callback)

    def _closed_now(self) -> None:
        self._closed.set()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            try:
                callback(self)
            except Exception:  # noqa: BLE001
                log.exception("%s close callback failed", self._prefix)

    # -- subclass hooks ------------------------------------------------------------------------------------

    async def _attach(self, conn: Connection) -> None:
        """Registers on ``conn`` and creates the producer/consumer there; raises on refusal."""
        raise NotImplementedError

    def _detached(self, conn: Connection) -> None:
        """READY was just lost (``conn`` is the connection it was on)."""

    def _failed(self, exc: BaseException) -> None:
        """A final error: fail whatever waits."""

    def _unregister(self, conn: Connection) -> None:
        raise NotImplementedError

    def _abandon(self, conn: Connection) -> None:
        """Undoes a successful :meth:`_attach` that is not kept (closed meanwhile): close it on the broker."""

    # -- attaching -----------------------------------------------------------------------------------------

    async def start(self) -> TopicHandler:
        """Attaches for the first time (idempotent); see the module docstring.

        Raises:
            ServerError: a final refusal, or the last retriable error once ``operation_timeout_s`` passed.
            AlreadyClosedError: closed or failed before.
        """
        if self.state in (HandlerState.READY, HandlerState.RECONNECTING):
            return self
        if self.state is not HandlerState.INIT:
            raise AlreadyClosedError(f"{self._prefix} {self.kind} is {self.state.value}") from self.failure
        self.state = HandlerState.CONNECTING
        deadline = time.monotonic() + self.operation_timeout_s
        try:
            while True:
                try:
                    await self._connect_once()
                    self._backoff.reset()
                    return self
                except ClientError as exc:
                    delay = self._backoff.next_delay_s()
                    if not exc.retriable or time.monotonic() + delay > deadline:
                        raise
                    if self.state is not HandlerState.CONNECTING:
                        raise AlreadyClosedError(f"{self._prefix} {self.kind} closed while connecting") from exc
                    log.info("%s creating the %s failed (%s); retrying in %.2f s", self._prefix, self.kind, exc, delay)
                    await asyncio.sleep(delay)
        except BaseException as exc:
            if self.state is HandlerState.CONNECTING:
                self.state = HandlerState.CLOSED
                self.failure = exc
                self._closed_now()
            raise

    async def _target(self) -> LookupResult:
        assigned, self._assigned_url = self._assigned_url, None
        if assigned is None:
            return await self._lookup.lookup(self.topic)
        logical = parse_service_url(assigned)
        last = self._last_lookup
        proxied = last is not None and last.physical_url != last.logical_url
        return LookupResult(logical, self._lookup.service_url if proxied else logical)

    async def _connect_once(self) -> None:
        target = await self._target()
        self._last_lookup = target
        conn = await self._lookup.pool.get(target.logical_url, target.physical_url)
        self._attempt_conn, self._attempt_spoiled = conn, False
        attached = False
        try:
            await self._attach(conn)
            attached = True
            if self._attempt_spoiled or not conn.is_ready:
                raise ConnectionClosedError(f"{self._prefix} detached again while the {self.kind} was being created")
            if self.state not in (HandlerState.CONNECTING, HandlerState.RECONNECTING):
                raise AlreadyClosedError(f"{self._prefix} {self.kind} closed while connecting")
        except BaseException:
            self._unregister(conn)
            if attached and conn.is_ready:
                self._abandon(conn)
            raise
        finally:
            self._attempt_conn = None
        self._conn = conn
        self.state = HandlerState.READY
        self._attached(conn)

    def _attached(self, conn: Connection) -> None:
        """READY was just reached on ``conn`` (re-send, re-grant permits...)."""

    # -- losing the attachment -----------------------------------------------------------------------------

    def _reconnect(self, conn: Connection, reason: str, *, assigned_url: str | None = None) -> None:
        if conn is not self._conn or self.state is not HandlerState.READY:
            return
        self._unregister(conn)
        self._conn = None
        self.state = HandlerState.RECONNECTING
        self._assigned_url = assigned_url
        self.reconnections += 1
        log.info("%s %s reconnecting: %s", self._prefix, self.kind, reason)
        self._detached(conn)
        if self._reconnect_task is None or self._reconnect_task.done():
            self._reconnect_task = asyncio.get_running_loop().create_task(
                self._reconnect_loop(), name=f"{self.kind}-reconnect {self.topic}"
            )
            self._reconnect_task.add_done_callback(self._reconnect_done)

    async def _reconnect_loop(self) -> None:
        while self.state is HandlerState.RECONNECTING:
            await asyncio.sleep(self._backoff.next_delay_s())
            if self.state is not HandlerState.RECONNECTING:
                return
            try:
                await self._connect_once()
                self._backoff.reset()
                return
            except ClientError as exc:
                # Busy: the broker may not have noticed yet that our previous connection is gone.
                if exc.retriable or isinstance(exc, (ProducerBusyError, ConsumerBusyError)):
                    log.info("%s reconnection failed (%s); retrying", self._prefix, exc)
                    continue
                if self.state is HandlerState.RECONNECTING:
                    log.error("%s cannot reconnect the %s: %s", self._prefix, self.kind, exc)
                    self._fail(exc)
                return

    def _reconnect_done(self, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s reconnection task died", self._prefix, exc_info=exc)
            self._fail(ConnectionClosedError(f"{self._prefix} reconnection failed: {exc!r}"))

    def _handle_connection_closed(self, conn: Connection, exc: BaseException | None) -> None:
        if conn is self._attempt_conn:
            self._attempt_spoiled = True
        self._reconnect(conn, f"connection closed ({exc})" if exc else "connection closed")

    def _handle_broker_close(self, conn: Connection, assigned_url: str | None) -> None:
        if conn is self._attempt_conn:
            self._attempt_spoiled = True
            return
        where = f" (assigned to {assigned_url})" if assigned_url else ""
        self._reconnect(conn, f"the broker closed the {self.kind}{where}", assigned_url=assigned_url)

    def _fail(self, exc: BaseException) -> None:
        if self.state in (HandlerState.CLOSED, HandlerState.FAILED, HandlerState.CLOSING):
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            self._unregister(conn)
        self.state = HandlerState.FAILED
        self.failure = exc
        self._failed(exc)

    async def _stop_reconnecting(self) -> None:
        task, self._reconnect_task = self._reconnect_task, None
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _check_open(self) -> None:
        if self.state in (HandlerState.READY, HandlerState.RECONNECTING):
            return
        if self.state in (HandlerState.INIT, HandlerState.CONNECTING):
            raise ClientError(f"{self._prefix} {self.kind} is not started")
        if self.state is HandlerState.FAILED:
            raise AlreadyClosedError(f"{self._prefix} {self.kind} failed: {self.failure}") from self.failure
        raise AlreadyClosedError(f"{self._prefix} {self.kind} is {self.state.value}")
