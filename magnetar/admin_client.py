"""A blocking JSON client of a broker's admin REST API (what ``magnetar admin`` and scripts call).

Requests go to one broker's HTTP port and follow the 307 redirects brokers answer for topics they do not
own, keeping the method and the body. An error answer becomes :class:`AdminError` with the broker's
``reason``.

Standard library HTTP only (urllib): the command stays light and needs nothing the broker room has.
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

from magnetar.errors import MagnetarError

__all__ = ["DEFAULT_URL", "AdminClient", "AdminError", "default_url"]

DEFAULT_URL = "http://127.0.0.1:8080"
_REDIRECTS_MAX = 8


class AdminError(MagnetarError):
    """The broker answered an error (``status`` and its ``reason``), or could not be reached (status 0)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # redirects are followed by AdminClient, keeping the method and the body


class AdminClient:
    """Blocking JSON client of a broker's admin API."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirect)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Sends ``body`` (JSON, unless None) and returns the decoded JSON answer: None for an empty body, so a
        204 No Content (what a topic-level policy GET answers when nothing is set) reads like JSON ``null``."""
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        for _ in range(_REDIRECTS_MAX):
            req = urllib.request.Request(url, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            req.add_header("Accept", "application/json")
            try:
                with self._opener.open(req, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as e:
                if e.code in (301, 302, 307, 308) and e.headers.get("Location"):
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    continue
                raise AdminError(e.code, _reason(e.read())) from None
            except urllib.error.URLError as e:
                raise AdminError(0, f"cannot reach {url}: {e.reason}") from None
            except OSError as e:
                raise AdminError(0, f"cannot reach {url}: {e}") from None
            if not raw.strip():
                return None
            try:
                return json.loads(raw)
            except ValueError:
                return raw.decode(errors="replace")
        raise AdminError(0, f"too many redirects for {method} {path}")

    def get(self, path: str) -> Any:
        return self.request("GET", path)


def _reason(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        if isinstance(doc, dict) and "reason" in doc:
            return str(doc["reason"])
    except ValueError:
        pass
    return raw.decode(errors="replace").strip() or "(no reason given)"


def default_url(data_dir: Optional[pathlib.Path]) -> str:
    """The first broker's HTTP URL in ``data_dir/topology.json``, else $MAGNETAR_ADMIN_URL, else the default."""
    if data_dir is not None:
        path = pathlib.Path(data_dir) / "topology.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise AdminError(0, f"cannot read {path}: {e}") from None
        for region in (doc.get("regions") or {}).values():
            for broker in region.get("brokers") or []:
                if broker.get("http"):
                    return broker["http"]
        raise AdminError(0, f"{path} lists no broker")
    return os.environ.get("MAGNETAR_ADMIN_URL") or DEFAULT_URL
