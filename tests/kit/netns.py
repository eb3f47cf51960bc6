"""Regions that are really apart: one Linux network namespace per region, a "wan" namespace between them.

Theory of operation. ``Wan.create(["us-east", "eu-west"])`` (root only) builds::

    root ns ──veth── wan ns ──veth── region ns "r1"   (10.100.1.1/24, lo also 10.101.1.1/32)
    10.100.0.1       10.100.0.2      region ns "r2"   (10.100.2.1/24, lo also 10.101.2.1/32)
                     ip_forward=1
                     lo: 10.101.1.1/32, 10.101.2.1/32  ← the relay (tests/kit/wan_relay.py) listens here

Each region has two addresses. ``10.100.i.1`` (its *direct* address) is on its veth; the test process in the
root namespace reaches it through the wan namespace, which forwards packets (its own ``ip_forward``, not the
host's) without delay: health probes and admin calls use it. ``10.101.i.1`` (its *public* address) is what its
brokers advertise and register as the cluster's service URL. Inside region i the public address is on its own
``lo``, so region-local clients reach their brokers directly; from any other namespace the address routes to
the wan namespace, where the same address is local too and the relay accepts the connection, holds every chunk
for 40 ms ± 5 ms (or refuses and cuts it while the link is "down") and forwards it to the direct address.

Why a relay and not ``tc netem``: this kernel has no ``sch_netem`` and cannot load modules, and there is no
iptables/nft for a transparent proxy; a userspace TCP relay on addresses routed to it gives the same delay per
direction (ordered, since TCP cannot reorder) and lets a test cut and heal one pair of regions.

Servers bind ``0.0.0.0`` *inside* their region's namespace (only that namespace's addresses) or one of the
namespace addresses above; nothing listens in the root namespace. ``close()`` deletes every namespace (their
veths go with them) and is idempotent; the root end of the wan veth and its routes vanish with it.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Sequence

# The addresses above are those of the first deployment; each deployment of a test run takes the next free pair
# of second octets (10.100/10.101, 10.102/10.103, ...), so two can live at once (a module's and a test's).


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def available() -> str:
    """"" when network namespaces can be made here; else why not (for ``pytest.skip``)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"mgprobe{uuid.uuid4().hex[:6]}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if result.returncode != 0:
        return f"ip netns add failed: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


@dataclass
class RegionNet:
    """One region's namespace and addresses."""

    name: str
    index: int
    netns: str
    octet: int  # the second octet of direct addresses (public ones: octet + 1)

    @property
    def direct_address(self) -> str:
        return f"10.{self.octet}.{self.index}.1"

    @property
    def public_address(self) -> str:
        return f"10.{self.octet + 1}.{self.index}.1"

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]


@dataclass
class Wan:
    """The namespaces of one test (see the module docstring)."""

    tag: str
    netns: str
    octet: int
    regions: dict[str, RegionNet] = field(default_factory=dict)
    _closed: bool = False

    @classmethod
    def create(cls, names: Sequence[str]) -> "Wan":
        if len(names) > 200:
            raise ValueError("at most 200 regions")
        tag = uuid.uuid4().hex[:6]
        routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
        octet = next((o for o in range(100, 200, 2) if f"10.{o}.0.0/16" not in routes), None)
        if octet is None:
            raise RuntimeError("no free 10.x address pair for another wan")
        wan = cls(tag=tag, netns=f"mgw{tag}", octet=octet)
        try:
            wan._build(names)
        except BaseException:
            wan.close()
            raise
        return wan

    @property
    def root_address(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def address(self) -> str:
        """The wan namespace's own address (the configuration store binds it)."""
        return f"10.{self.octet}.0.2"

    def _build(self, names: Sequence[str]) -> None:
        tag, d, p = self.tag, self.octet, self.octet + 1
        _ip("netns", "add", self.netns)
        _ip("link", "set", "lo", "up", netns=self.netns)
        subprocess.run(["ip", "netns", "exec", self.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
        # root <-> wan
        root_if, wan_if = f"mgr{tag}", f"mgw{tag}0"
        _ip("link", "add", root_if, "type", "veth", "peer", "name", wan_if)
        _ip("link", "set", wan_if, "netns", self.netns)
        _ip("addr", "add", f"{self.root_address}/24", "dev", root_if)
        _ip("link", "set", root_if, "up")
        _ip("addr", "add", f"{self.address}/24", "dev", wan_if, netns=self.netns)
        _ip("link", "set", wan_if, "up", netns=self.netns)
        _ip("route", "add", f"10.{d}.0.0/16", "via", self.address)
        _ip("route", "add", f"10.{p}.0.0/16", "via", self.address)
        for index, name in enumerate(names, start=1):
            region = RegionNet(name=name, index=index, netns=f"mgn{tag}{index}", octet=d)
            self.regions[name] = region
            _ip("netns", "add", region.netns)
            _ip("link", "set", "lo", "up", netns=region.netns)
            _ip("addr", "add", f"{region.public_address}/32", "dev", "lo", netns=region.netns)
            w_if, r_if = f"mgw{tag}{index}", f"mgn{tag}{index}"
            _ip("link", "add", w_if, "type", "veth", "peer", "name", r_if)
            _ip("link", "set", w_if, "netns", self.netns)
            _ip("link", "set", r_if, "netns", region.netns)
            _ip("addr", "add", f"10.{d}.{index}.2/24", "dev", w_if, netns=self.netns)
            _ip("link", "set", w_if, "up", netns=self.netns)
            _ip("addr", "add", f"{region.direct_address}/24", "dev", r_if, netns=region.netns)
            _ip("link", "set", r_if, "up", netns=region.netns)
            _ip("route", "add", "default", "via", f"10.{d}.{index}.2", netns=region.netns)
            _ip("addr", "add", f"{region.public_address}/32", "dev", "lo", netns=self.netns)

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.netns]

    def close(self) -> None:
        """Deletes every namespace of this test (idempotent); their veths and the root's routes go with them."""
        if self._closed:
            return
        self._closed = True
        for region in self.regions.values():
            _ip("netns", "del", region.netns, check=False)
        _ip("netns", "del", self.netns, check=False)
        _ip("link", "del", f"mgr{self.tag}", check=False)

    def __enter__(self) -> "Wan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def leftover_namespaces() -> list[str]:
    """Namespaces of this kit still present (a test asserts there are none after cleanup)."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(("mgw", "mgn"))]
