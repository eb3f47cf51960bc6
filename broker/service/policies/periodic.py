"""A broker-wide check that runs every ``interval_s`` in one task (backlog quotas, inactive topics).

Stopping never cancels a pass midway (a cursor or metadata write cut short can fence what it wrote): it
sets an event the loop waits on, lets the running pass finish (``timeout_s``, then cancel), and a pass can
look at :attr:`stopping` between topics. ``checks`` counts completed passes (tests wait on it).
"""

from __future__ import annotations

import asyncio
import enum
from typing import Optional


class MonitorState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    CLOSED = "closed"


class PeriodicCheck:
    """Subclasses implement :meth:`check_all`, one pass, and count it in ``checks``."""

    def __init__(self, *, interval_s: float, name: str) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, not {interval_s}")
        self.interval_s = interval_s
        self.name = name
        self.state = MonitorState.NEW
        self.checks = 0
        self._task: Optional[asyncio.Task] = None
        self._stopping = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    async def start(self) -> None:
        if self.state is not MonitorState.NEW:
            return
        self.state = MonitorState.RUNNING
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def close(self, *, timeout_s: float = 30.0) -> None:
        if self.state is MonitorState.CLOSED:
            return
        self.state = MonitorState.CLOSED
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
            except TimeoutError:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)
                return
            except TimeoutError:
                pass
            await self.check_all()

    async def check_all(self) -> object:
        raise NotImplementedError
