"""Real proxy processes for tests: ``magnetar proxy --config proxy.toml`` on free ports, with a TLS certificate
from a test CA (:mod:`tests.kit.certs`).

``start_proxy(tmp_path, zk_connect, ca)`` starts one and returns once it serves: ``endpoints.json`` written by
this very process, ``/health`` 200 and the TLS port accepting connections. ``handle.metrics()`` reads its
``/metrics`` as ``{"name{labels}": value}``.
"""

from __future__ import annotations

import pathlib
import urllib.request
from typing import Any, Optional

from magnetar.net import free_port

from .certs import TestCa
from .server import HOST, ServerProcess


class ProxyHandle(ServerProcess):
    """One proxy process under test control.

    Args:
        name: its folder under ``base_dir`` and log name.
        zk_connect: the region's ZooKeeper (with chroot).
        ca: issues the proxy's server certificate (for 127.0.0.1 and localhost); None: no TLS port.
        plain: serve ``pulsar://`` on a free port too (else ``port = 0``: not served).
        overrides: any :class:`proxy.config.ProxyConfig` setting.
    """

    port_keys = ()  # chosen here: which ports a proxy serves depends on ``plain`` and ``ca``
    http_port_key = "web_port"

    def __init__(self, name: str, base_dir: pathlib.Path, zk_connect: str, *, ca: Optional[TestCa],
                 plain: bool = True, **overrides: Any) -> None:
        self.ca = ca
        settings: dict[str, Any] = {"cluster": "test", "zookeeper": zk_connect,
                                    "port": free_port(HOST) if plain else 0, "web_port": free_port(HOST),
                                    "tls_port": 0, "keep_alive_interval_ms": 30_000}
        if ca is not None:
            cert = ca.server(f"{name}-server")
            settings.update(tls_port=free_port(HOST), tls_cert_file=str(cert.cert), tls_key_file=str(cert.key),
                            tls_trust_certs_file=str(ca.ca_file))
        super().__init__("proxy", None, name, base_dir, settings, overrides)

    # -- addresses -------------------------------------------------------------------------------------

    @property
    def tls_port(self) -> int:
        return int(self.settings["tls_port"])

    @property
    def web_port(self) -> int:
        return self.http_port

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://{HOST}:{self.port}"

    @property
    def pulsar_ssl_url(self) -> str:
        return f"pulsar+ssl://{HOST}:{self.tls_port}"

    # -- state -----------------------------------------------------------------------------------------

    def healthy(self) -> bool:
        return self.answers_health()  # endpoints.json is written once every listener is bound

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics``: ``{"name{label=\"v\"}": value}`` (no labels: just the name)."""
        with urllib.request.urlopen(f"{self.http_url}/metrics", timeout=5) as response:
            text = response.read().decode()
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def __repr__(self) -> str:
        return f"ProxyHandle({self.name} tls={self.tls_port} plain={self.port} web={self.web_port})"


def start_proxy(base_dir: pathlib.Path, zk_connect: str, ca: Optional[TestCa], *, name: str = "proxy",
                timeout_s: float = 30.0, **overrides: Any) -> ProxyHandle:
    """Starts a proxy under ``base_dir/proxies`` and waits until it serves."""
    return ProxyHandle(name, pathlib.Path(base_dir) / "proxies", zk_connect, ca=ca, **overrides).start(
        timeout_s=timeout_s)
