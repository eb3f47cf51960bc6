"""Process kinds: for each kind of server, which instances a topology asks for and how to run one.

A :class:`ProcessKind` knows four things about its servers and nothing about supervising them: which
:class:`Instance` s a topology names (with the ports each needs), the command line that runs one (writing
its config file first), its health check, and the endpoints it publishes in ``topology.json``. The
supervisor does the rest (ports, process groups, logs, waiting, stopping) the same way for every kind, so
a new kind (broker, proxy) is one subclass here plus its settings in ``clusters.topology``. The base classes are
in ``clusters.kind_base``; the deployment's Prometheus, a kind of its own module, in ``clusters.prometheus``.

Kinds start by ``tier``: every instance of a lower tier is healthy before any of a higher tier starts, and
stopping goes in reverse. An instance finds what it depends on through the :class:`Plan`, where every
port is already fixed before anything starts (a bookie's config names its region's ZooKeeper before that
ZooKeeper runs).
"""

from __future__ import annotations

import pathlib
import ssl
import urllib.request
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional

from magnetar import zookeeper as zk
from magnetar.errors import ConfigError
from magnetar.net import free_port, is_listening

from . import security
from .kind_base import GLOBAL, Instance, ProcessKind, magnetar_command
from .netns import Layout
from .network import WanRelayKind, layout_for
from .prometheus import PrometheusKind
from .topology import AutoRecoverySettings, BookiesSettings, BrokersSettings, ProxySettings, Topology, ZooKeeperSettings
from .toml_out import dumps_toml

__all__ = ["GLOBAL", "KINDS", "Instance", "Plan", "ProcessKind", "dumps_toml", "magnetar_command", "make_plan"]


class ZooKeeperKind(ProcessKind):
    """A standalone ZooKeeper: each region's local metadata store, and the global configuration store.

    Its ``magnetar zookeeper`` wrapper stays the JVM's parent and serves ZooKeeper's numbers on ``/metrics``
    (``observability.zookeeper``), on the instance's ``metrics`` port.
    """

    name = "zookeeper"
    tier = 0
    shown = ("connect", "metrics")

    def instances(self, topology: Topology) -> list[Instance]:
        found = []
        if topology.global_zookeeper is not None:
            found.append(self._instance("global-zookeeper", GLOBAL, "global_zookeeper", topology.global_zookeeper))
        for region in topology.regions:
            found.append(self._instance(f"{region.name}-zookeeper", region.name, "zookeeper", region.zookeeper))
        return found

    def _instance(self, name: str, region: Optional[str], slot: str, settings: ZooKeeperSettings) -> Instance:
        return Instance(
            name=name, kind=self.name, region=region, slot=slot, many=False, index=1,
            host=settings.host, ports={"client": settings.port, "metrics": settings.metrics_port}, settings=settings,
        )

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: ZooKeeperSettings = inst.settings
        return magnetar_command(
            "zookeeper",
            "--host", inst.host,
            "--port", str(inst.ports["client"]),
            "--data-dir", str(plan.process_dir(inst)),
            "--tick-time-ms", str(s.tick_time_ms),
            "--heap-mb", str(s.heap_mb),
            "--metrics-port", str(inst.ports["metrics"]),
        )

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        return zk.is_healthy(inst.host, inst.ports["client"]) and is_listening(inst.host, inst.ports["metrics"],
                                                                             timeout_s=1)

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        return {"connect": f"{inst.host}:{inst.ports['client']}", "host": inst.host, "port": inst.ports["client"],
                "metrics": f"http://{inst.host}:{inst.ports['metrics']}/metrics"}


def numbered_instances(topology: Topology, kind: str, slot: str, port_bases: dict[str, str]) -> list[Instance]:
    """``<region>-<kind>-<n>`` for n in 1..count of every region's ``slot`` settings; port ``p`` of instance n
    is ``settings.<port_bases[p]> + n - 1``, or 0 (picked at the first ``up``) when that base is unset."""
    found = []
    for region in topology.regions:
        settings = getattr(region, slot)
        if settings is None:
            continue
        for n in range(1, settings.count + 1):
            ports = {}
            for port, base_attr in port_bases.items():
                base = getattr(settings, base_attr)
                ports[port] = base + n - 1 if base else 0
            found.append(
                Instance(
                    name=f"{region.name}-{kind}-{n}", kind=kind, region=region.name, slot=slot,
                    many=True, index=n, host=settings.host, ports=ports, settings=settings,
                )
            )
    return found


class BookieKind(ProcessKind):
    """A storage node, registered in its region's ZooKeeper; its id is its process name, stable across ups."""

    name = "bookie"
    tier = 10
    shown = ("grpc", "metrics")

    def instances(self, topology: Topology) -> list[Instance]:
        return numbered_instances(topology, self.name, "bookies", {"grpc": "grpc_port_base", "http": "http_port_base"})

    def config_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "bookie.toml"

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: BookiesSettings = inst.settings
        region_zk = plan.one(region=inst.region, slot="zookeeper")
        config = {
            "bookie_id": inst.name,
            "bind_host": inst.host,
            "port": inst.ports["grpc"],
            "http_port": inst.ports["http"],
            "advertised_host": inst.host,
            "data_dir": str(plan.process_dir(inst) / "data"),
            "zookeeper": plan.endpoints(region_zk)["connect"],
            "journal_sync": s.journal_sync,
            **s.extra,
        }
        path = self.config_path(inst, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# Written by the Magnetar supervisor for {inst.name} at every `magnetar up`; edit the topology instead.\n"
            + dumps_toml(config)
        )
        return magnetar_command("bookie", "--config", str(path))

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        import grpc  # lazily: only deployments with bookies pay for it

        from magnetar.proto import bookie_pb2, bookie_pb2_grpc

        try:
            with grpc.insecure_channel(f"{inst.host}:{inst.ports['grpc']}") as channel:
                bookie_pb2_grpc.BookieServiceStub(channel).GetBookieInfo(bookie_pb2.BookieInfoRequest(), timeout=1)
            with urllib.request.urlopen(self._metrics_url(inst), timeout=1) as response:
                return response.status == 200
        except (grpc.RpcError, OSError):
            return False

    def _metrics_url(self, inst: Instance) -> str:
        return f"http://{inst.host}:{inst.ports['http']}/metrics"

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        return {
            "bookie_id": inst.name,
            "grpc": f"{inst.host}:{inst.ports['grpc']}",
            "metrics": self._metrics_url(inst),
            "config": str(self.config_path(inst, plan)),
        }


class AutoRecoveryKind(ProcessKind):
    """A region's auto-recovery process (auditor candidate, replication worker, scrubber), after its bookies."""

    name = "autorecovery"
    tier = 15
    shown = ("metrics",)

    def instances(self, topology: Topology) -> list[Instance]:
        return numbered_instances(topology, self.name, "autorecovery", {"http": "http_port_base"})

    def config_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "autorecovery.toml"

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: AutoRecoverySettings = inst.settings
        region_zk = plan.one(region=inst.region, slot="zookeeper")
        config = {
            "worker_id": inst.name,
            "bind_host": inst.host,
            "http_port": inst.ports["http"],
            "data_dir": str(plan.process_dir(inst) / "data"),
            "zookeeper": plan.endpoints(region_zk)["connect"],
            **s.extra,
        }
        path = self.config_path(inst, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# Written by the Magnetar supervisor for {inst.name} at every `magnetar up`; edit the topology instead.\n"
            + dumps_toml(config)
        )
        return magnetar_command("autorecovery", "--config", str(path))

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        try:
            with urllib.request.urlopen(f"http://{inst.host}:{inst.ports['http']}/health", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        return {"worker_id": inst.name, "metrics": f"http://{inst.host}:{inst.ports['http']}/metrics",
                "config": str(self.config_path(inst, plan))}


class BrokerKind(ProcessKind):
    """A broker of a region (binary protocol + admin/lookup HTTP); its id is its process name.

    It serves its region's ZooKeeper for local metadata and the global ZooKeeper (when the topology has
    one) as configuration store; brokers start once the bookies are healthy.

    In a secured topology (one with a proxy) it also serves ``pulsar+ssl://`` and ``https://`` with the
    deployment's certificate, and authenticates (token or client certificate) and authorizes every client on
    every port: ``admin`` and its own fellow processes' roles (``proxy``, ``replicator``) are superusers,
    ``proxy`` may act for the clients it names (``proxy_roles``). Towards other brokers and regions (admin
    fan-out, replicators) it presents the ``replicator`` token over TLS, to the remote region's registered
    ``pulsar+ssl://`` URL.
    """

    name = "broker"
    tier = 20
    shown = ("pulsar", "pulsar_ssl", "http", "kafka")
    wan_facing = True

    def instances(self, topology: Topology) -> list[Instance]:
        bases = {"pulsar": "port_base", "http": "http_port_base"}
        if topology.secured:  # the Kafka listener has no authentication yet: not in a secured deployment
            bases.update(pulsar_ssl="tls_port_base", https="web_tls_port_base")
        else:
            bases.update(kafka="kafka_port_base")
        return numbered_instances(topology, self.name, "brokers", bases)

    def config_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "broker.toml"

    def _endpoints_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "data" / "endpoints.json"

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: BrokersSettings = inst.settings
        region_zk = plan.endpoints(plan.one(region=inst.region, slot="zookeeper"))["connect"]
        global_zk = (plan.endpoints(plan.one(region=GLOBAL, slot="global_zookeeper"))["connect"]
                     if plan.topology.global_zookeeper is not None else "")
        config: dict[str, Any] = {
            "broker_id": inst.name,
            "cluster": inst.region,
            "bind_host": plan.bind_host(inst),
            "advertised_host": plan.advertised_host(inst),
            "port": inst.ports["pulsar"],
            "http_port": inst.ports["http"],
            "data_dir": str(plan.process_dir(inst) / "data"),
            "zookeeper": region_zk,
            "configuration_store": global_zk,
            **self.region_urls(inst.region, plan),
        }
        if "kafka" in inst.ports:
            config["kafka_listeners"] = f"PLAINTEXT://{plan.bind_host(inst)}:{inst.ports['kafka']}"
        if plan.topology.secured:
            config.update(self.security_config(inst, plan))
        bookies = plan.topology.region(inst.region).bookies
        if bookies is not None:
            ensemble = min(3, bookies.count)
            config["managed_ledger_ensemble_size"] = ensemble
            config["managed_ledger_write_quorum"] = config["managed_ledger_ack_quorum"] = min(2, ensemble)
        config.update(s.extra)
        path = self.config_path(inst, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._endpoints_path(inst, plan).unlink(missing_ok=True)  # health must not trust an earlier run
        path.write_text(
            f"# Written by the Magnetar supervisor for {inst.name} at every `magnetar up`; edit the topology instead.\n"
            + dumps_toml(config)
        )
        return magnetar_command("broker", "--config", str(path))

    def security_config(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        """The ``broker.toml`` keys of a secured topology (see the class docstring)."""
        sec = plan.security
        brokers = [i for i in plan.instances if i.kind == self.name and i.region == inst.region]
        return {
            "tls_port": inst.ports["pulsar_ssl"],
            "web_tls_port": inst.ports["https"],
            "tls_cert_file": str(sec.server.cert_file),
            "tls_key_file": str(sec.server.key_file),
            "tls_trust_certs_file": str(sec.ca_file),
            "authentication_enabled": True,
            "authentication_providers": ["token", "tls"],
            "token_secret_key": sec.token_secret_key_url,
            "authorization_enabled": True,
            "superuser_roles": list(security.BROKER_SUPERUSER_ROLES),
            "proxy_roles": list(security.PROXY_ROLES),
            "broker_client_auth_method": "token",
            "broker_client_auth_params": sec.token_file(security.REPLICATOR_ROLE).as_uri(),
            "broker_client_trust_certs_file": str(sec.ca_file),
            "broker_client_tls_enabled": True,
            **self.cluster_tls_urls(inst.region, brokers, plan),
        }

    @staticmethod
    def cluster_tls_urls(region: Optional[str], brokers: list[Instance], plan: "Plan") -> dict[str, str]:
        """The TLS URLs registered for the cluster in the global store, which other regions' replicators use:
        the region's proxy when it has one (so replication enters a region as every client does, through its
        gateway, authenticated with the replicator's role), else every broker of the region."""
        proxies = [i for i in plan.instances if i.kind == "proxy" and i.region == region]
        if proxies:
            proxy, host = proxies[0], plan.advertised_host(proxies[0])
            return {"cluster_service_url_tls": f"https://{host}:{proxy.ports['https']}",
                    "cluster_broker_service_url_tls": f"pulsar+ssl://{host}:{proxy.ports['pulsar_ssl']}"}
        adv = plan.advertised_host
        return {"cluster_service_url_tls": "https://" + ",".join(f"{adv(i)}:{i.ports['https']}" for i in brokers),
                "cluster_broker_service_url_tls": "pulsar+ssl://" + ",".join(
                    f"{adv(i)}:{i.ports['pulsar_ssl']}" for i in brokers)}

    def region_urls(self, region: Optional[str], plan: "Plan") -> dict[str, str]:
        """``cluster_service_url`` and ``cluster_broker_service_url``: every broker of ``region``, written as
        Pulsar writes a multi-host service URL (one scheme, then ``host:port`` pairs separated by commas),
        so the cluster registered in the global store lets a remote region reach any broker of this one."""
        brokers = [i for i in plan.instances if i.kind == self.name and i.region == region]
        http = ",".join(f"{plan.advertised_host(i)}:{i.ports['http']}" for i in brokers)
        binary = ",".join(f"{plan.advertised_host(i)}:{i.ports['pulsar']}" for i in brokers)
        return {"cluster_service_url": f"http://{http}", "cluster_broker_service_url": f"pulsar://{binary}"}

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        if not self._endpoints_path(inst, plan).exists():
            return False
        try:
            with urllib.request.urlopen(f"http://{inst.host}:{inst.ports['http']}/health", timeout=1) as response:
                if response.status != 200:
                    return False
        except OSError:
            return False
        return all(is_listening(inst.host, inst.ports[p], timeout_s=1)
                   for p in ("pulsar", "pulsar_ssl", "https", "kafka") if p in inst.ports)

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        # What clients use is the advertised address (lookups answer it anyway); metrics are scraped at the
        # address the supervisor reaches the broker at (the same one, unless regions are apart).
        host = plan.advertised_host(inst)
        found = {"broker_id": inst.name, "pulsar": f"pulsar://{host}:{inst.ports['pulsar']}"}
        if "pulsar_ssl" in inst.ports:
            found["pulsar_ssl"] = f"pulsar+ssl://{host}:{inst.ports['pulsar_ssl']}"
        found["http"] = f"http://{host}:{inst.ports['http']}"
        if "https" in inst.ports:
            found["https"] = f"https://{host}:{inst.ports['https']}"
        if "kafka" in inst.ports:
            found["kafka"] = f"{host}:{inst.ports['kafka']}"  # a Kafka client's bootstrap_servers
        return {**found, "metrics": f"http://{inst.host}:{inst.ports['http']}/metrics",
                "config": str(self.config_path(inst, plan))}


class ProxyKind(ProcessKind):
    """A region's gateway proxy (``magnetar proxy``): ``pulsar+ssl://`` and ``https://`` in front of the region's
    brokers, started once they are healthy (it forwards only to brokers registered in the region's ZooKeeper).

    Its certificate, the CA clients are verified against, the token key and its own token towards brokers
    are the deployment's (``clusters.security``); ``admin`` is its superuser. It reaches brokers only at their
    ``pulsar+ssl://`` and ``https://`` endpoints (``tls_enabled_with_broker``), their certificate and host
    name verified against the deployment's CA, as role ``proxy`` naming each client's role.
    """

    name = "proxy"
    tier = 30
    shown = ("pulsar_ssl", "https")
    wan_facing = True

    def instances(self, topology: Topology) -> list[Instance]:
        return [
            Instance(name=f"{region.name}-proxy", kind=self.name, region=region.name, slot="proxy", many=False,
                     index=1, host=region.proxy.host,
                     ports={"pulsar_ssl": region.proxy.tls_port, "https": region.proxy.web_tls_port},
                     settings=region.proxy)
            for region in topology.regions if region.proxy is not None
        ]

    def config_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "proxy.toml"

    def _endpoints_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "data" / "endpoints.json"

    def config(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        """What ``proxy.toml`` says (keys of ``proxy/config.py``)."""
        s: ProxySettings = inst.settings
        sec = plan.security
        global_zk = (plan.endpoints(plan.one(region=GLOBAL, slot="global_zookeeper"))["connect"]
                     if plan.topology.global_zookeeper is not None else "")
        return {
            "cluster": inst.region,
            "zookeeper": plan.endpoints(plan.one(region=inst.region, slot="zookeeper"))["connect"],
            "configuration_store": global_zk,
            "data_dir": str(plan.process_dir(inst) / "data"),
            "bind_host": plan.bind_host(inst),
            "advertised_host": plan.advertised_host(inst),
            "port": 0,
            "tls_port": inst.ports["pulsar_ssl"],
            "web_port": 0,
            "web_tls_port": inst.ports["https"],
            "tls_cert_file": str(sec.server.cert_file),
            "tls_key_file": str(sec.server.key_file),
            "tls_trust_certs_file": str(sec.ca_file),
            "tls_require_trusted_client_cert": s.tls_require_trusted_client_cert,
            "authentication_enabled": s.authentication_enabled,
            "authentication_providers": list(s.authentication_providers),
            "token_secret_key": sec.token_secret_key_url,
            "authorization_enabled": s.authorization_enabled,
            "superuser_roles": list(security.SUPERUSER_ROLES),
            "tls_enabled_with_broker": True,
            "broker_client_trust_certs_file": str(sec.ca_file),
            "broker_client_auth_method": "token",
            "broker_client_auth_params": sec.token_file(security.PROXY_ROLE).as_uri(),
            **s.extra,
        }

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        path = self.config_path(inst, plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._endpoints_path(inst, plan).unlink(missing_ok=True)  # health must not trust an earlier run
        path.write_text(
            f"# Written by the Magnetar supervisor for {inst.name} at every `magnetar up`; edit the topology instead.\n"
            + dumps_toml(self.config(inst, plan))
        )
        return magnetar_command("proxy", "--config", str(path))

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        if not self._endpoints_path(inst, plan).exists():
            return False
        sec = plan.security
        try:
            context = ssl.create_default_context(cafile=str(sec.ca_file))
            admin = sec.client(security.ADMIN_ROLE)  # in case the topology requires client certificates
            context.load_cert_chain(str(admin.cert_file), str(admin.key_file))
            with urllib.request.urlopen(f"https://{inst.host}:{inst.ports['https']}/health", timeout=1,
                                        context=context) as response:
                if response.status != 200:
                    return False
        except (OSError, ssl.SSLError):
            return False
        return is_listening(inst.host, inst.ports["pulsar_ssl"], timeout_s=1)

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        host = plan.advertised_host(inst)
        return {
            "pulsar_ssl": f"pulsar+ssl://{host}:{inst.ports['pulsar_ssl']}",
            "https": f"https://{host}:{inst.ports['https']}",
            "metrics": f"https://{inst.host}:{inst.ports['https']}/metrics",
            "config": str(self.config_path(inst, plan)),
        }


KINDS: dict[str, ProcessKind] = {
    kind.name: kind for kind in (ZooKeeperKind(), WanRelayKind(), BookieKind(), AutoRecoveryKind(), BrokerKind(),
                                 ProxyKind(), PrometheusKind())
}


# -- the plan: every instance with its ports ----------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Every instance of a topology, in start order, with every port chosen.

    Attributes:
        topology: what was asked for.
        data_dir: the deployment's directory (absolute).
        instances: sorted by tier, then in the order the topology names them; ``host`` is where the supervisor
            reaches each (with regions apart: its namespace's direct address).
        network: the namespaces of a deployment whose regions are apart (``clusters.network``), else None.
    """

    topology: Topology
    data_dir: pathlib.Path
    instances: tuple[Instance, ...]
    network: Optional[Layout] = None

    def process_dir(self, inst: Instance) -> pathlib.Path:
        return self.data_dir / inst.name

    @property
    def security(self) -> security.SecurityFiles:
        """The deployment's CA, certificates and tokens (made by the supervisor when the topology is secured)."""
        return security.SecurityFiles(self.data_dir / "security")

    def hosts(self) -> list[str]:
        """Every host a process is reached at: what the deployment's server certificate must name."""
        return list(dict.fromkeys(h for inst in self.instances for h in (inst.host, self.advertised_host(inst))))

    def bind_host(self, inst: Instance) -> str:
        """The address ``inst`` listens on: every address of its namespace when it is wan-facing and regions
        are apart (its direct one for the relay and probes, its public one for clients inside the region)."""
        return "0.0.0.0" if self.network is not None and self.kind(inst).wan_facing else inst.host

    def advertised_host(self, inst: Instance) -> str:
        """The address ``inst`` gives clients and other regions: its region's public one when regions are apart."""
        if self.network is not None and self.kind(inst).wan_facing and inst.region is not None:
            return self.network.public_address(inst.region)
        return inst.host

    def exec_prefix(self, inst: Instance) -> list[str]:
        """What runs ``inst``'s command in its network namespace (nothing when it runs on the host)."""
        if self.network is None or self.kind(inst).in_root_namespace:
            return []
        return self.network.exec_prefix(inst.region)

    def log_path(self, inst: Instance) -> pathlib.Path:
        return self.data_dir / "logs" / f"{inst.name}.log"

    def kind(self, inst: Instance) -> ProcessKind:
        return KINDS[inst.kind]

    def one(self, *, region: Optional[str], slot: str) -> Instance:
        """The instance in ``slot`` of ``region`` (e.g. a region's ZooKeeper)."""
        for inst in self.instances:
            if inst.region == region and inst.slot == slot:
                return inst
        raise LookupError(f"the topology has no {slot} in region {region}")

    def endpoints(self, inst: Instance) -> dict[str, Any]:
        return self.kind(inst).endpoints(inst, self)

    def tiers(self) -> list[list[Instance]]:
        """Instances grouped by tier, lowest first (a tier starts only when the one before is healthy)."""
        grouped: dict[int, list[Instance]] = {}
        for inst in self.instances:
            grouped.setdefault(KINDS[inst.kind].tier, []).append(inst)
        return [grouped[t] for t in sorted(grouped)]


def make_plan(
    topology: Topology,
    data_dir: pathlib.Path,
    *,
    remembered: Mapping[str, Mapping[str, int]] = {},
    pick_port: Callable[[str], int] = free_port,
    network: Optional[Layout] = None,
) -> Plan:
    """Expands the topology and chooses every port.

    A port the topology fixes wins; otherwise the port remembered from an earlier ``up`` on the same data
    dir (so a restarted bookie keeps its address); otherwise ``pick_port(host)``. No two instances get the
    same port; a fixed port given twice is a ConfigError.

    A ``netns`` topology's instances get the addresses of ``network`` (default: the layout
    ``clusters.network.layout_for`` chooses now) instead of the hosts the topology names.
    """
    if topology.netns and network is None:
        network = layout_for(topology, data_dir)
    expanded = [inst for kind in sorted(KINDS.values(), key=lambda k: k.tier) for inst in kind.instances(topology)]
    # One owner per port number: distinct loopback addresses could share a port, but this is never wrong.
    owners: dict[int, str] = {}
    names: set[str] = set()
    for inst in expanded:
        if inst.name in names:
            raise ConfigError(f"{topology.path.name}: two processes would be named {inst.name!r}; rename a region")
        names.add(inst.name)
        for port_name, port in inst.ports.items():
            if port:
                owner = owners.setdefault(port, f"{inst.name} {port_name}")
                if owner != f"{inst.name} {port_name}":
                    raise ConfigError(f"{topology.path.name}: port {port} is given to both {owner} and {inst.name} {port_name}")
    chosen = []
    for inst in expanded:
        ports = dict(inst.ports)
        for port_name, port in ports.items():
            if port:
                continue
            port = remembered.get(inst.name, {}).get(port_name, 0)
            if not port or port in owners:
                for _ in range(100):
                    port = pick_port(inst.host)
                    if port not in owners:
                        break
                else:
                    raise RuntimeError(f"could not find a free port for {inst.name} {port_name}")
            owners[port] = f"{inst.name} {port_name}"
            ports[port_name] = port
        host = inst.host
        if topology.netns and not KINDS[inst.kind].in_root_namespace:
            host = network.direct_address(inst.region)
        chosen.append(replace(inst, ports=ports, host=host))
    return Plan(topology=topology, data_dir=pathlib.Path(data_dir).resolve(), instances=tuple(chosen),
                network=network if topology.netns else None)

