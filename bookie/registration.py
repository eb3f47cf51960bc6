"""The bookie's presence in its region's ZooKeeper (``/bookies/available/<id>`` or ``/bookies/readonly/<id>``).

A thin lifecycle around ``config_store``: the ephemeral node is kept alive by the store across session
losses (it re-creates it on the new session), moved between available/ and readonly/ on disk-threshold
transitions, and removed on a clean shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

import magnetar

log = logging.getLogger("bookie.registration")

_UNREGISTER_TIMEOUT_S = 2.0


class Registration:
    """Registers one bookie. ``on_session(session_text)`` is told "hexid:hexpassword" of every new session
    (the process writes it to endpoints.json so that tests can expire the session from outside)."""

    def __init__(
        self,
        connect: str,
        *,
        bookie_id: str,
        address: str,
        http_address: str,
        add_address: str = "",
        session_timeout_ms: int,
        on_session: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.connect = connect
        self.bookie_id = bookie_id
        self.address = address
        self.http_address = http_address
        self.add_address = add_address
        self.session_timeout_ms = session_timeout_ms
        self.on_session = on_session
        self._store = None
        self._region = None
        self._registered = False

    async def start(self, *, read_only: bool) -> None:
        from config_store import BookieRegistration, KazooMetadataStore, RegionStore

        self._store = KazooMetadataStore(self.connect, session_timeout_ms=self.session_timeout_ms)
        self._store.add_session_listener(self._on_session_event)
        await self._store.start()
        self._report_session()
        self._region = RegionStore(self._store)
        await self._region.register_bookie(
            BookieRegistration(
                bookie_id=self.bookie_id, address=self.address, http_address=self.http_address,
                version=magnetar.__version__, add_address=self.add_address,
            ),
            read_only=read_only,
        )
        self._registered = True
        log.info("registered in ZooKeeper %s as %s (%s)", self.connect, self.bookie_id,
                 "read-only" if read_only else "available")

    async def set_read_only(self, read_only: bool) -> None:
        if self._region is not None and self._registered:
            await self._region.set_bookie_read_only(self.bookie_id, read_only)
            log.info("registration moved to %s", "readonly/" if read_only else "available/")

    async def close(self) -> None:
        """Unregisters (best effort, never waiting for ZooKeeper) and closes the session. Idempotent.

        The node is ephemeral: it goes with the session anyway, so a shutdown does not wait for a ZooKeeper that
        is away (the store would wait for a connection up to its operation deadline, and a supervisor's grace
        would run out first); removing it is only what lets a clean stop be seen at once rather than after the
        session timeout.
        """
        if self._region is not None and self._registered:
            self._registered = False
            if not self._store.connected:
                log.warning("not connected to ZooKeeper: not unregistering; the session's end removes the node")
            else:
                try:
                    async with asyncio.timeout(_UNREGISTER_TIMEOUT_S):
                        await self._region.unregister_bookie(self.bookie_id)
                    log.info("unregistered from ZooKeeper")
                except Exception as err:  # noqa: BLE001 - the session's end removes the node
                    log.warning("unregister failed (%s); the session's end removes the node",
                                err or type(err).__name__)
        if self._store is not None:
            store, self._store = self._store, None
            await store.close()

    def _on_session_event(self, event) -> None:
        from config_store import SessionEvent

        if event is SessionEvent.CONNECTED:
            self._report_session()

    def _report_session(self) -> None:
        text = self.session_text()
        if text and self.on_session is not None:
            self.on_session(text)

    def session_text(self) -> str:
        """``"<session id hex>:<password hex>"`` of the current ZooKeeper session, "" when there is none."""
        client_id = getattr(self._store, "session_credentials", None)
        if not client_id:
            return ""
        session_id, password = client_id
        return f"{session_id:x}:{password.hex()}"
