"""The gateway proxy of a region (``magnetar proxy --config proxy.toml``), as Apache Pulsar's proxy works.

Clients reach a region's brokers only through its proxy: over ``pulsar+ssl://`` (and, for development,
``pulsar://``) the proxy answers lookups itself by asking the region's brokers and forwards a client that names
a registered broker (CONNECT's ``proxy_to_broker_url``) to it, byte for byte; over HTTP(S) it forwards the admin
REST API and the HTTP lookup to the brokers and serves its own ``/metrics``.

* :class:`ProxyConfig` — the settings (``proxy.toml``); :class:`ProxyProcess` — a running proxy;
  :func:`run` — the process entry point.
"""

from .config import ProxyConfig
from .errors import BrokerUnavailableError, ProxyError, ProxyStartError, TargetDeniedError
from .process import ProxyProcess, run

__all__ = ["BrokerUnavailableError", "ProxyConfig", "ProxyError", "ProxyProcess", "ProxyStartError",
           "TargetDeniedError", "run"]
