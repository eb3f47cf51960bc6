"""Ephemeral nodes a store keeps alive across sessions: :class:`EphemeralRegistration`, made by
:meth:`MetadataStore.register_ephemeral <config_store.store.MetadataStore.register_ephemeral>`.

An ephemeral node vanishes with the session that created it. A registration remembers the node's path and
latest content so that the store (its ``_maintain`` task) can re-create it after every (re)connection; the
class docstring says what is guaranteed when another session holds the path. A registration works through
its store's backend primitives (``_get``, ``_create``, ``_set``, ``_delete_one``) and session id.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from .errors import BadVersionError, NodeExistsError, NotFoundError, StoreClosedError
from .store import StoreState, check_data

if TYPE_CHECKING:
    from .store import MetadataStore

__all__ = ["EphemeralRegistration"]

log = logging.getLogger("config_store")


class EphemeralRegistration:
    """An ephemeral node the store keeps alive across sessions.

    Guarantees: while the registration is open and the store connected, the node exists at ``path`` with
    the latest ``data`` and is owned by the store's current session. After a session loss it is re-created
    as soon as a new session is established. If the path is held by another session at re-creation: a node
    with *our* content (a leftover of our previous session, or of a restarted twin) is deleted and
    re-created; a node with different content is waited on (until it vanishes, up to the store's
    ``ephemeral_conflict_timeout_s`` per attempt, logged at WARNING) and never overwritten.
    """

    _ATTEMPTS_MAX = 20

    def __init__(self, store: "MetadataStore", path: str, data: bytes) -> None:
        self.path = path
        self._store = store
        self._data = data
        self._closed = False

    @property
    def data(self) -> bytes:
        return self._data

    @property
    def closed(self) -> bool:
        return self._closed

    async def update(self, data: bytes) -> None:
        """Publishes new content. If the node is not ours right now (session being re-established), the new
        content is what the re-creation will publish."""
        if self._closed:
            raise StoreClosedError(f"{self.path}: registration is closed")
        self._data = check_data(self.path, data)
        store = self._store
        for _ in range(self._ATTEMPTS_MAX):
            cur = await store._get(self.path)
            if cur is None or cur.owner != store._session_id():
                store._resync.set()
                return
            try:
                await store._set(self.path, self._data, cur.versioned.version)
                return
            except (BadVersionError, NotFoundError):
                continue
        raise BadVersionError(f"{self.path}: concurrent writers keep changing the registration")

    async def close(self) -> None:
        """Deletes the node (if our session owns it) and stops re-creating it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        store = self._store
        if store._registrations.get(self.path) is self:
            del store._registrations[self.path]
        if store._state is not StoreState.STARTED:
            return  # the session's end removes the node
        cur = await store._get(self.path)
        if cur is not None and cur.owner == store._session_id():
            try:
                await store._delete_one(self.path, cur.versioned.version)
            except (NotFoundError, BadVersionError):
                pass

    async def _ensure(self, conflict_timeout_s: float) -> None:
        """Makes the node exist, owned by the current session, with our data (see class docstring)."""
        store = self._store
        loop = asyncio.get_running_loop()
        deadline = loop.time() + conflict_timeout_s
        for _ in range(self._ATTEMPTS_MAX):
            if self._closed:
                return
            data = self._data
            try:
                await store._create(self.path, data, ephemeral=True, sequential=False, make_parents=True)
            except NodeExistsError:
                pass
            else:
                if self._closed:  # close() ran while we were creating: do not leave the node behind
                    try:
                        await store._delete_one(self.path, 0)
                    except (NotFoundError, BadVersionError):
                        pass
                return
            cur = await store._get(self.path)
            if cur is None:
                continue
            if cur.owner != 0 and cur.owner == store._session_id():
                if cur.versioned.value != self._data:
                    try:
                        await store._set(self.path, self._data, cur.versioned.version)
                    except (BadVersionError, NotFoundError):
                        continue
                return
            if cur.versioned.value == data:
                log.info("[%s] %s: replacing a node with our content left by session 0x%x",
                         store.name, self.path, cur.owner)
                try:
                    await store._delete_one(self.path, cur.versioned.version)
                except (NotFoundError, BadVersionError):
                    pass
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            log.warning("[%s] %s is held by session 0x%x with other content; waiting up to %.1fs for it to go",
                        store.name, self.path, cur.owner, remaining)
            await store._wait_gone(self.path, remaining)
        raise NodeExistsError(f"{self.path}: held by another session with different content; not overwritten")
