"""Several regions as real processes for geo-replication tests, on the session's one ZooKeeper server.

``start_regions(["us-east", "eu-west"], base_dir, zk_server)`` gives every region its own ZooKeeper chroot
(its local metadata: brokers, bookies, ownership, ledgers, cursors), one more chroot for the global
configuration store they share, then starts every region's bookies (all regions together) and brokers (all
regions together) and returns once every process serves. No extra ZooKeeper JVM is started: chroots are
enough to keep the regions' metadata apart.

Brokers are configured with ``cluster = <region>``, ``configuration_store = <global chroot>`` and, since the
kit picks every port before a process starts, ``cluster_service_url`` / ``cluster_broker_service_url``
already listing all of the region's brokers (``pulsar://h:p1,h:p2``): the first broker that starts registers
the cluster with every broker's address, so other regions' replicators reach whichever of them is up.

A :class:`Region` restarts its brokers on the same ports and data (``stop_brokers()`` / ``start_brokers()``),
finds a topic's owner, and speaks the admin API; :class:`Regions` creates tenants and replicated namespaces
in the shared global store. ``stop()`` (also registered with pytest when ``request`` is given, and run by
``with``) kills every process group the regions started.
"""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from .bookies import BookieProcess
from .brokers import BrokerHandle
from .wait import wait_for
from .zookeeper import ZooKeeperServer

_REDIRECTS = (301, 302, 303, 307, 308)


class AdminError(AssertionError):
    """An admin call answered with an unexpected status (the message carries the broker's reason)."""

    def __init__(self, method: str, url: str, status: int, reason: str) -> None:
        super().__init__(f"{method} {url} -> {status}: {reason}")
        self.status = status
        self.reason = reason


def http_json(method: str, url: str, body: Any = None, *, timeout_s: float = 30.0, token: Optional[str] = None) -> Any:
    """One admin REST call; follows the owner's 307 for every method (urllib only does so for GET), presenting
    ``token`` (``Authorization: Bearer``) on every hop when given.

    Returns the decoded JSON answer (None for an empty one); raises :class:`AdminError` otherwise.
    """
    data = None if body is None else json.dumps(body).encode()
    for _ in range(5):
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=timeout_s) as response:
                raw = response.read()
            return json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            if err.code in _REDIRECTS and err.headers.get("Location"):
                url = urllib.parse.urljoin(url, err.headers["Location"])
                continue
            reason = err.read().decode(errors="replace")
            raise AdminError(method, url, err.code, reason) from None
    raise AdminError(method, url, 310, "too many redirects")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D401 (urllib's signature)
        return None


def topic_path(topic: str) -> str:
    """``persistent://t/ns/x`` → ``persistent/t/ns/x`` (the admin and lookup paths)."""
    domain, _, rest = topic.partition("://")
    if not rest:
        domain, rest = "persistent", topic
    return f"{domain}/{rest}"


@dataclass
class Region:
    """One region: its ZooKeeper chroot, bookies and brokers (processes under test control)."""

    name: str
    zk_connect: str
    base_dir: pathlib.Path
    bookies: list[BookieProcess] = field(default_factory=list)
    brokers: list[BrokerHandle] = field(default_factory=list)
    admin_token: Optional[str] = None  # presented by admin() to brokers with authentication on

    # -- addresses -------------------------------------------------------------------------------------

    @property
    def pulsar_url(self) -> str:
        """Every broker of the region: ``pulsar://h:p1,h:p2`` (pulsar-client tries them in turn)."""
        return "pulsar://" + ",".join(b.pulsar_url.removeprefix("pulsar://") for b in self.brokers)

    @property
    def http_service_url(self) -> str:
        return "http://" + ",".join(b.http_url.removeprefix("http://") for b in self.brokers)

    @property
    def http_url(self) -> str:
        """The admin URL of a live broker of the region (the first one when none is alive)."""
        for broker in self.brokers:
            if broker.process.alive:
                return broker.http_url
        return self.brokers[0].http_url

    # -- admin -----------------------------------------------------------------------------------------

    def admin(self, method: str, path: str, body: Any = None, *, timeout_s: float = 30.0) -> Any:
        """``admin("GET", "/admin/v2/clusters")`` against a live broker of this region."""
        return http_json(method, self.http_url + path, body, timeout_s=timeout_s, token=self.admin_token)

    def lookup(self, topic: str) -> dict:
        return self.admin("GET", f"/lookup/v2/topic/{topic_path(topic)}")

    def owner_of(self, topic: str) -> BrokerHandle:
        """The broker that owns ``topic`` now (asked through the lookup REST API)."""
        url = self.lookup(topic)["brokerUrl"]
        for broker in self.brokers:
            if broker.pulsar_url == url:
                return broker
        raise AssertionError(f"{self.name}: the owner of {topic} is {url}, not a broker of this region")

    def topic_stats(self, topic: str) -> dict:
        return self.admin("GET", f"/admin/v2/{topic_path(topic)}/stats")

    def partitioned_stats(self, topic: str) -> dict:
        return self.admin("GET", f"/admin/v2/{topic_path(topic)}/partitioned-stats")

    def replication_stats(self, topic: str, remote: str) -> Optional[dict]:
        """The ``replication[remote]`` section of the topic's stats here (None while there is none)."""
        return self.topic_stats(topic).get("replication", {}).get(remote)

    # -- lifecycle -------------------------------------------------------------------------------------

    def processes(self) -> list[Any]:
        return [*self.bookies, *self.brokers]

    def stop_brokers(self, *, kill: bool = True) -> None:
        """SIGKILL (or SIGTERM with ``kill=False``) every broker of the region; ports and data stay."""
        for broker in self.brokers:
            if kill:
                broker.kill()
            else:
                broker.terminate()

    def start_brokers(self, *, timeout_s: float = 60.0) -> None:
        """Starts every broker that is not running, on its old ports and data, and waits until all serve."""
        stopped = [b for b in self.brokers if not b.process.alive]
        for broker in stopped:
            broker.start(wait=False)
        for broker in stopped:
            broker.wait_healthy(timeout_s=timeout_s)

    def restart_brokers(self, *, kill: bool = True, timeout_s: float = 60.0) -> None:
        self.stop_brokers(kill=kill)
        self.start_brokers(timeout_s=timeout_s)

    def stop(self) -> None:
        """Kills every process of the region (brokers first, by process group)."""
        for proc in [*self.brokers, *self.bookies]:
            proc.process.cleanup()

    def log_tails(self, n_bytes: int = 3000) -> str:
        return "\n".join(f"----- {p.process.name} ({p.process.log_path}) -----\n{p.process.log_tail(n_bytes)}"
                         for p in self.processes())

    def __repr__(self) -> str:
        return f"Region({self.name}: {len(self.bookies)} bookies, brokers {self.pulsar_url})"


class Regions(Mapping[str, Region]):
    """The regions of one deployment (by name) and the global configuration store they share."""

    def __init__(self, regions: Sequence[Region], global_connect: str) -> None:
        self._regions = {r.name: r for r in regions}
        self.global_connect = global_connect
        self._stopped = False

    def __getitem__(self, name: str) -> Region:
        return self._regions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._regions)

    def __len__(self) -> int:
        return len(self._regions)

    @property
    def names(self) -> list[str]:
        return list(self._regions)

    def any(self) -> Region:
        return next(iter(self._regions.values()))

    # -- the global configuration store ------------------------------------------------------------------

    def create_tenant(self, tenant: str, clusters: Optional[Iterable[str]] = None) -> None:
        """Creates ``tenant`` (or widens its allowed clusters) allowing ``clusters`` (default: every region)."""
        allowed = list(clusters) if clusters is not None else self.names
        region = self.any()
        try:
            region.admin("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": allowed, "adminRoles": []})
        except AdminError as err:
            if err.status != 409:
                raise
            current = region.admin("GET", f"/admin/v2/tenants/{tenant}")
            merged = sorted(set(current.get("allowedClusters", [])) | set(allowed))
            region.admin("POST", f"/admin/v2/tenants/{tenant}", {"allowedClusters": merged,
                                                                  "adminRoles": current.get("adminRoles", [])})

    def create_replicated_namespace(self, tenant: str, namespace: str, clusters: Sequence[str],
                                    **policies: Any) -> str:
        """Creates ``tenant/namespace`` replicated to ``clusters`` (the tenant is created or widened to allow
        them); ``policies`` are more fields of the namespace's Policies body (``deduplicationEnabled``...).
        Waits until every region's brokers read the same replication clusters. Returns ``tenant/namespace``."""
        self.create_tenant(tenant, clusters)
        body = {"replication_clusters": list(clusters), **policies}
        self.any().admin("PUT", f"/admin/v2/namespaces/{tenant}/{namespace}", body)
        self.wait_replication_clusters(f"{tenant}/{namespace}", clusters)
        return f"{tenant}/{namespace}"

    def set_replication_clusters(self, namespace: str, clusters: Sequence[str]) -> None:
        """``POST /admin/v2/namespaces/<ns>/replication`` (the tenant must allow them), then waits until every
        region reads it back."""
        self.any().admin("POST", f"/admin/v2/namespaces/{namespace}/replication", list(clusters))
        self.wait_replication_clusters(namespace, clusters)

    def wait_replication_clusters(self, namespace: str, clusters: Sequence[str], *, timeout_s: float = 30.0) -> None:
        for region in self._regions.values():
            if not any(b.process.alive for b in region.brokers):
                continue
            wait_for(lambda: sorted(region.admin("GET", f"/admin/v2/namespaces/{namespace}/replication"))
                     == sorted(clusters), timeout_s, what=f"{region.name} reads {namespace} -> {sorted(clusters)}")

    # -- lifecycle -------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kills every process of every region (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        for region in self._regions.values():
            region.stop()

    def log_tails(self, n_bytes: int = 3000) -> str:
        return "\n".join(r.log_tails(n_bytes) for r in self._regions.values())

    def __enter__(self) -> "Regions":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Regions({', '.join(repr(r) for r in self._regions.values())})"


def write_topology(regions: Mapping[str, Region], names: Sequence[str], path: pathlib.Path) -> pathlib.Path:
    """Regions ``names`` of a deployment as ``magnetar up`` describes them in topology.json (what the audit reads)."""
    doc = {"regions": {name: {"zookeeper": {"connect": regions[name].zk_connect},
                              "brokers": [{"http": b.http_url, "pulsar": b.pulsar_url} for b in regions[name].brokers]}
                       for name in names}}
    path.write_text(json.dumps(doc))
    return path


def start_regions(
    names: Sequence[str], base_dir: pathlib.Path, zk_server: ZooKeeperServer, *,
    bookies: int | Mapping[str, int] = 3, brokers: int | Mapping[str, int] = 2, request: Any = None,
    timeout_s: float = 90.0, bookie_overrides: Optional[Mapping[str, Any]] = None, admin_token: Optional[str] = None,
    **broker_overrides: Any,
) -> Regions:
    """Starts ``names`` as regions sharing one global configuration store; returns once every process serves.

    Args:
        names: region (cluster) names, e.g. ``["us-east", "eu-west"]``.
        base_dir: ``<base_dir>/<region>/{bookies,brokers}/...`` hold configs, data and logs.
        zk_server: the session's ZooKeeper; every region and the global store get a chroot of it.
        bookies, brokers: processes per region: one count for all, or a count by region name
            (``brokers={"us-east": 2, "eu-west": 1}``).
        request: a pytest ``request``: when given, ``stop()`` is registered as its finalizer.
        timeout_s: how long every process may take to serve.
        bookie_overrides: any :class:`bookie.config.BookieConfig` setting for every bookie.
        admin_token: a token the regions' admin calls present (brokers with authentication on).
        broker_overrides: any :class:`broker.config.BrokerConfig` setting for every broker; a callable value
            is called with the broker's name for a setting of its own (``tls_port=lambda name: free_port()``).
    """
    if len(set(names)) != len(names):
        raise ValueError(f"region names repeat: {names}")
    bookie_counts = {n: bookies if isinstance(bookies, int) else bookies[n] for n in names}
    broker_counts = {n: brokers if isinstance(brokers, int) else brokers[n] for n in names}
    base_dir = pathlib.Path(base_dir)
    global_connect = zk_server.new_chroot("global")
    regions: list[Region] = []
    for name in names:
        regions.append(Region(name=name, zk_connect=zk_server.new_chroot(f"region-{name}"),
                              base_dir=base_dir / name, admin_token=admin_token))
    deployment = Regions(regions, global_connect)
    if request is not None:
        request.addfinalizer(deployment.stop)
    try:
        for region in regions:
            region.bookies = [
                BookieProcess(f"{region.name}-bookie-{i}", region.base_dir / "bookies", region.zk_connect,
                              **dict(bookie_overrides or {}))
                for i in range(1, bookie_counts[region.name] + 1)
            ]
        all_bookies = [b for r in regions for b in r.bookies]
        for bookie in all_bookies:
            bookie.start(wait=False)
        for bookie in all_bookies:
            bookie.wait_healthy(timeout_s=timeout_s)

        for region in regions:
            settings = {"cluster": region.name, "configuration_store": global_connect, "bootstrap": True,
                        **broker_overrides}
            names_of = [f"{region.name}-broker-{i}" for i in range(1, broker_counts[region.name] + 1)]
            region.brokers = [BrokerHandle(broker_name, region.base_dir / "brokers", region.zk_connect,
                                           **{k: v(broker_name) if callable(v) else v for k, v in settings.items()})
                              for broker_name in names_of]
            # Every port is known before anything starts: the cluster is registered with all of them
            # (unless the caller gave the URLs).
            urls = {"cluster_service_url": region.http_service_url, "cluster_broker_service_url": region.pulsar_url}
            urls = {k: v for k, v in urls.items() if k not in broker_overrides}
            for broker in region.brokers:
                broker.write_config(**urls)
        all_brokers = [b for r in regions for b in r.brokers]
        for broker in all_brokers:
            broker.start(wait=False)
        for broker in all_brokers:
            broker.wait_healthy(timeout_s=timeout_s)
        # Each region registered itself; every region must see every other before a namespace names them.
        for region in regions:
            wait_for(lambda: set(names) <= set(region.admin("GET", "/admin/v2/clusters")), 30,
                     what=f"{region.name} sees clusters {list(names)}")
    except BaseException:
        deployment.stop()
        raise
    return deployment
