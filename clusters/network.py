"""A deployment whose regions are apart (``[network] mode = "netns"``, ``magnetar up --netns``): the wan relay
as a process kind, and the operator's ``magnetar netns show | cut | heal | delay``.

Theory of operation. In this mode the plan carries a :class:`clusters.netns.Layout` (prefix ``mgd`` + 6 hex
digits of the data dir's path, so two data dirs never share a namespace and a data dir finds its own leftovers).
The supervisor builds the namespaces before the first tier, runs every process of a region inside the region's
namespace (``ip netns exec``, which execs: the recorded pid is the server's), the configuration store and the
relay inside the wan namespace, and Prometheus (if any) on the host; it removes the namespaces after the last
process has stopped. ``state.json`` records the layout before anything is built, so ``magnetar down`` removes
the namespaces also after the supervisor was killed.

Addresses (``clusters.netns``): ZooKeepers, bookies and auto-recovery bind their region's *direct* address;
brokers and proxies (the kinds whose ``wan_facing`` is set) bind every address of their namespace and
advertise the region's *public* address, which the relay serves from outside the region. So a replicator of
one region reaches another region's brokers only through the relay (``latency_ms ± jitter_ms`` each way, cut
by ``magnetar netns cut``); a client on the host reaches every region through it as well (never cut: the
host is no region); metrics and health checks use the direct addresses, undelayed.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys
from typing import TYPE_CHECKING, Any, Optional

from magnetar.errors import ConfigError, MagnetarError

from . import netns
from .kind_base import GLOBAL, Instance, ProcessKind
from .runtime import DataDir
from .topology import NetworkSettings, Topology

if TYPE_CHECKING:
    from .kinds import Plan

_UNIX_PATH_MAX = 107  # sun_path is 108 bytes, one for the terminating NUL


def deployment_prefix(data_dir: pathlib.Path | str) -> str:
    """``mgd`` + 6 hex digits of the data dir's absolute path: the names of its namespaces start with it."""
    root = pathlib.Path(data_dir).expanduser().resolve()
    return "mgd" + hashlib.sha256(str(root).encode()).hexdigest()[:6]


def layout_for(topology: Topology, data_dir: pathlib.Path) -> netns.Layout:
    """The namespaces and addresses a ``netns`` topology gets in ``data_dir`` (octets: the first free pair)."""
    try:
        return netns.Layout.choose(deployment_prefix(data_dir), [r.name for r in topology.regions])
    except ValueError as err:
        raise ConfigError(f"{topology.path.name}: network: {err}") from None


class WanRelayKind(ProcessKind):
    """The link between regions: ``clusters.wan_relay`` in the wan namespace, relaying every port of every
    wan-facing instance from its region's public address to its direct one, with the topology's delay."""

    name = "wan-relay"
    tier = 0
    shown = ("control", "link")

    def instances(self, topology: Topology) -> list[Instance]:
        if not topology.netns:
            return []
        return [Instance(name="wan-relay", kind=self.name, region=GLOBAL, slot="wan_relay", many=False, index=1,
                         host="127.0.0.1", ports={}, settings=topology.network)]

    def control_path(self, inst: Instance, plan: "Plan") -> pathlib.Path:
        return plan.process_dir(inst) / "control.sock"

    def routes(self, plan: "Plan") -> list[str]:
        """``--route public=direct:port,...`` of every region that has wan-facing instances."""
        layout = plan.network
        found = []
        for region in layout.regions:
            ports = sorted({port for i in plan.instances if i.region == region and plan.kind(i).wan_facing
                            for port in i.ports.values()})
            if ports:
                found += ["--route", f"{layout.public_address(region)}={layout.direct_address(region)}:"
                                     + ",".join(map(str, ports))]
        return found

    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        s: NetworkSettings = inst.settings
        control = self.control_path(inst, plan)
        if len(str(control).encode()) > _UNIX_PATH_MAX:
            raise ConfigError(f"the relay's control socket {control} is longer than {_UNIX_PATH_MAX} bytes, the "
                              "limit of a unix socket's path; use a data dir with a shorter path")
        control.parent.mkdir(parents=True, exist_ok=True)
        return [sys.executable, "-m", "clusters.wan_relay", "--control", str(control), "--delay-ms",
                str(s.latency_ms), "--jitter-ms", str(s.jitter_ms), *self.routes(plan)]

    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        from .wan_relay import send_command  # not at import: `python -m clusters.wan_relay` imports this package

        try:
            send_command(str(self.control_path(inst, plan)), "stats", timeout_s=1)
        except (OSError, RuntimeError):
            return False
        return True

    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        s: NetworkSettings = inst.settings
        return {"control": str(self.control_path(inst, plan)), "link": f"{s.latency_ms:g} ± {s.jitter_ms:g} ms",
                "latency_ms": s.latency_ms, "jitter_ms": s.jitter_ms}


def network_document(plan: "Plan") -> Optional[dict[str, Any]]:
    """The ``network`` entry of ``state.json`` and ``topology.json``: None for a deployment on the host."""
    if plan.network is None:
        return None
    s = plan.topology.network
    relay = next(i for i in plan.instances if i.kind == WanRelayKind.name)
    return {"mode": "netns", "latency_ms": s.latency_ms, "jitter_ms": s.jitter_ms,
            "relay_control": str(WanRelayKind().control_path(relay, plan)), **plan.network.document()}


def namespace_at(network: dict[str, Any], host: str) -> Optional[str]:
    """The namespace whose address ``host`` is, in a ``network`` document; None for an address of the host.

    Once that namespace is gone nothing can listen at the address, and a probe must not try: the address
    then routes to the host's default gateway, which may answer for anything."""
    if host == network["wan_address"]:
        return network["wan_namespace"]
    return next((r["namespace"] for r in network["regions"].values() if host == r["direct_address"]), None)


# -- the operator's commands (magnetar netns ...) -----------------------------------------------------------


class LinkError(MagnetarError):
    """A ``magnetar netns`` command cannot act (no such deployment, region or relay); the message says why."""


def _network_of(data_dir: pathlib.Path | str) -> dict[str, Any]:
    ddir = DataDir(data_dir)
    state = ddir.read_state()
    if state is None:
        raise LinkError(f"nothing has run in {ddir.root} (no state.json)")
    network = state.get("network")
    if not network:
        raise LinkError(f"the deployment in {ddir.root} runs on the host, not in network namespaces "
                        "(`magnetar up --netns` makes regions apart)")
    return network


def _relay(network: dict[str, Any], line: str) -> str:
    from .wan_relay import send_command

    try:
        return send_command(network["relay_control"], line)
    except OSError as err:
        raise LinkError(f"the wan relay does not answer at {network['relay_control']} ({err.strerror or err}); "
                        "is the deployment running?") from None
    except RuntimeError as err:
        raise LinkError(str(err)) from None


def _pair(network: dict[str, Any], a: str, b: str) -> tuple[int, int]:
    regions = network["regions"]
    for name in (a, b):
        if name not in regions:
            raise LinkError(f"no region {name!r} in this deployment (regions: {', '.join(regions)})")
    if a == b:
        raise LinkError(f"a link joins two regions; {a!r} was given twice")
    return regions[a]["index"], regions[b]["index"]


_LINK_ACTIONS = {
    "cut": "cut (connections reset, new ones refused)",
    "silence": "silenced (nothing passes, nothing is closed: each end waits for its own timeouts)",
    "heal": "healed",
}


def link(data_dir: pathlib.Path | str, action: str, a: str, b: str) -> str:
    """``cut``, ``silence`` or ``heal`` the link between regions ``a`` and ``b``: a cut resets every connection
    between them and refuses new ones, a silence lets nothing through either way and closes nothing (a
    partition as the ends see it), until healed. Returns what was done, for the operator."""
    if action not in _LINK_ACTIONS:
        raise ValueError(action)
    network = _network_of(data_dir)
    i, j = _pair(network, a, b)
    _relay(network, f"{action} {i} {j}")
    return f"{a} <-> {b}: {_LINK_ACTIONS[action]}"


def set_delay(data_dir: pathlib.Path | str, latency_ms: float, jitter_ms: float) -> str:
    """Changes the delay of every link from now on (until the next ``up``, which takes the topology's)."""
    if not 0 <= jitter_ms <= latency_ms <= 10_000:
        raise LinkError(f"need 0 <= jitter_ms <= latency_ms <= 10000, got {latency_ms} ± {jitter_ms}")
    _relay(_network_of(data_dir), f"delay {latency_ms} {jitter_ms}")
    return f"every link: {latency_ms:g} ± {jitter_ms:g} ms each way"


def show(data_dir: pathlib.Path | str) -> dict[str, Any]:
    """The layout, the live namespaces and the relay's counters and cut links (``relay`` None if it is down)."""
    network = _network_of(data_dir)
    names = {r["index"]: name for name, r in network["regions"].items()}
    try:
        stats = json.loads(_relay(network, "stats"))
        for kind in ("cut", "silenced"):
            stats[kind] = [sorted(names.get(i, "host") for i in pair) for pair in stats.get(kind, [])]
    except LinkError:
        stats = None
    return {**network, "namespaces_present": netns.namespaces_with_prefix(network["prefix"]), "relay": stats}
