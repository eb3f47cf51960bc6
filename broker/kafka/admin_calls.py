"""Calls to the region's admin REST API on behalf of Kafka admin requests (delete a topic, grow one).

Deleting a partitioned topic means deleting each partition at its owner, then its policies and metadata; the
admin API already does that (fan-out, redirects to owners), so the Kafka listener calls its own broker's
admin API rather than repeating it. The session presents the broker's own credentials (``broker_client_*``).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Optional

from magnetar.errors import MagnetarError

log = logging.getLogger("broker.kafka.admin_calls")


class AdminCallError(MagnetarError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class AdminCalls:
    def __init__(self, base_url: str, session_factory: Optional[Callable[..., Any]]) -> None:
        self.base_url = base_url.rstrip("/")
        self._factory = session_factory
        self._session: Any = None

    def _get_session(self) -> Any:
        if self._session is None:
            if self._factory is not None:
                self._session = self._factory(timeout_s=60.0)
            else:
                import aiohttp

                self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        return self._session

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` on ``/admin/v2/<path>``; the decoded answer. AdminCallError on a status >= 300."""
        session = self._get_session()
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        async with session.request(method, f"{self.base_url}/admin/v2/{path}", data=data, headers=headers) as rsp:
            text = await rsp.text()
            if rsp.status >= 300:
                try:
                    message = json.loads(text).get("reason", text)
                except (ValueError, AttributeError):
                    message = text
                raise AdminCallError(rsp.status, str(message))
            return json.loads(text) if text else None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
