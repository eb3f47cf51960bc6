"""The tail cache: entries just appended, kept in memory for cursors that are caught up (pure).

Entries are inserted in position order as their adds are confirmed. Two evictions keep it bounded:
:meth:`EntryCache.evict_before` drops what every cursor has already read (called with the slowest cursor's
read position), and :meth:`EntryCache.put` drops the oldest entries once ``max_bytes`` is exceeded. A miss
is never wrong, only slower: the reader goes to the bookies.
"""

from __future__ import annotations

import collections
from typing import Optional

from .api import Position


class EntryCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[Position, bytes] = collections.OrderedDict()
        self.size_bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, position: Position, data: bytes) -> None:
        if len(data) > self.max_bytes or position in self._entries:
            return
        self._entries[position] = data
        self.size_bytes += len(data)
        while self.size_bytes > self.max_bytes:
            self._pop_oldest()

    def get(self, position: Position) -> Optional[bytes]:
        data = self._entries.get(position)
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def evict_before(self, position: Position) -> None:
        """Drops every entry at a position ``< position``."""
        while self._entries and next(iter(self._entries)) < position:
            self._pop_oldest()

    def clear(self) -> None:
        self._entries.clear()
        self.size_bytes = 0

    def _pop_oldest(self) -> None:
        _, data = self._entries.popitem(last=False)
        self.size_bytes -= len(data)
