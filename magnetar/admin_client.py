"""A blocking JSON client of a broker's admin REST API (what ``magnetar admin`` and scripts call).

Requests go to one broker's HTTP port and follow the 307 redirects brokers answer for topics they do not
own, keeping the method, the body and the credentials (every broker of a region is a peer). An error answer
becomes :class:`AdminError` with the broker's ``reason``.

Credentials, for brokers with authentication on: a token (``Authorization: Bearer``) and, for ``https://``
URLs, the CA to trust and a client certificate (mTLS). :func:`credentials_from_environment` reads them from
``MAGNETAR_AUTH_TOKEN`` (or ``MAGNETAR_AUTH_TOKEN_FILE``), ``MAGNETAR_TLS_TRUST_CERTS_FILE``,
``MAGNETAR_TLS_CERT_FILE`` and ``MAGNETAR_TLS_KEY_FILE``.

Standard library HTTP only (urllib): the command stays light and needs nothing the broker room has.
"""

from __future__ import annotations

import json
import os
import pathlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Optional

from magnetar.errors import MagnetarError

__all__ = ["DEFAULT_URL", "AdminClient", "AdminCredentials", "AdminError", "credentials_from_environment",
           "default_url", "deployment_credentials"]

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


@dataclass(frozen=True)
class AdminCredentials:
    """What the client presents (all optional).

    Attributes:
        token: a JWT sent as ``Authorization: Bearer``.
        tls_trust_certs_file: the CA (PEM) a broker's ``https://`` certificate must chain to ("": the system's).
        tls_cert_file, tls_key_file: a client certificate (PEM) for ``https://`` (its CN is the role).
    """

    token: str = ""
    tls_trust_certs_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""

    def ssl_context(self) -> ssl.SSLContext:
        """The context for ``https://``: the server's chain and host name verified, the certificate presented.

        Raises:
            AdminError: a file that cannot be read.
        """
        try:
            ctx = ssl.create_default_context(cafile=self.tls_trust_certs_file or None)
            if self.tls_cert_file or self.tls_key_file:
                ctx.load_cert_chain(self.tls_cert_file, self.tls_key_file or None)
        except (OSError, ssl.SSLError) as e:
            raise AdminError(0, f"cannot use the TLS files: {e}") from None
        return ctx


def credentials_from_environment() -> AdminCredentials:
    """Credentials from ``MAGNETAR_AUTH_TOKEN`` / ``MAGNETAR_AUTH_TOKEN_FILE`` and ``MAGNETAR_TLS_*``."""
    token = os.environ.get("MAGNETAR_AUTH_TOKEN", "")
    token_file = os.environ.get("MAGNETAR_AUTH_TOKEN_FILE", "")
    if not token and token_file:
        token = read_token_file(token_file)
    return AdminCredentials(token=token.strip(),
                            tls_trust_certs_file=os.environ.get("MAGNETAR_TLS_TRUST_CERTS_FILE", ""),
                            tls_cert_file=os.environ.get("MAGNETAR_TLS_CERT_FILE", ""),
                            tls_key_file=os.environ.get("MAGNETAR_TLS_KEY_FILE", ""))


def read_token_file(path: str) -> str:
    """A token file's content (``file://`` prefix allowed), stripped; AdminError when unreadable."""
    path = path[len("file://"):] if path.startswith("file://") else path
    try:
        return pathlib.Path(path).expanduser().read_text().strip()
    except OSError as e:
        raise AdminError(0, f"cannot read the token file {path}: {e.strerror or e}") from None


class AdminClient:
    """Blocking JSON client of a broker's admin API.

    Args:
        base_url: ``http://host:port`` or ``https://host:port`` of a broker.
        timeout_s: per request.
        credentials: what to present (default: :func:`credentials_from_environment`, so scripts work against
            secured brokers with ``MAGNETAR_AUTH_TOKEN`` set).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 30.0,
                 credentials: Optional[AdminCredentials] = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.credentials = credentials if credentials is not None else credentials_from_environment()
        handlers: list[Any] = [_NoRedirect]
        if self.base_url.startswith("https://") or self.credentials.tls_trust_certs_file or \
                self.credentials.tls_cert_file:
            handlers.append(urllib.request.HTTPSHandler(context=self.credentials.ssl_context()))
        self._opener = urllib.request.build_opener(*handlers)

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
            if self.credentials.token:
                req.add_header("Authorization", f"Bearer {self.credentials.token}")
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


def deployment_credentials(data_dir: pathlib.Path) -> Optional[AdminCredentials]:
    """The admin role's token and the CA of a ``magnetar up`` deployment with security material (the
    ``security`` entry of ``data_dir/topology.json``); None when it has none."""
    path = pathlib.Path(data_dir) / "topology.json"
    try:
        security = json.loads(path.read_text()).get("security")
    except (OSError, ValueError) as e:
        raise AdminError(0, f"cannot read {path}: {e}") from None
    if not security:
        return None
    admin = (security.get("superuser_roles") or ["admin"])[0]
    token_file = ((security.get("roles") or {}).get(admin) or {}).get("token_file")
    if not token_file:
        raise AdminError(0, f"{path} names no token of the {admin} role")
    return AdminCredentials(token=read_token_file(token_file), tls_trust_certs_file=security.get("ca_file", ""))


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
