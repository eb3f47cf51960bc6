"""Regions that are really apart: one Linux network namespace per region, a "wan" namespace between them.

Theory of operation. :func:`build` (root only) makes, for a :class:`Layout` of prefix ``P`` and octet ``d``::

    root ns ──veth── wan ns "Pw" ──veth── region ns "Pn1"   (10.d.1.1/24, lo also 10.d+1.1.1/32)
    10.d.0.1         10.d.0.2             region ns "Pn2"   (10.d.2.1/24, lo also 10.d+1.2.1/32)
                     ip_forward=1
                     lo: 10.d+1.1.1/32, 10.d+1.2.1/32  ← the wan relay (clusters.wan_relay) listens here

Each region has two addresses. ``10.d.i.1`` (its *direct* address) is on its veth; the root namespace reaches
it through the wan namespace, which forwards packets (its own ``ip_forward``, not the host's) without delay:
health probes, metrics and the region's own ZooKeeper and bookies use it. ``10.d+1.i.1`` (its *public*
address) is what its brokers and proxy advertise and register as the cluster's service URL. Inside region i
the public address is on its own ``lo``, so region-local clients reach their brokers directly; from any other
namespace (another region, the root) the address routes to the wan namespace, where the same address is
local too and the relay accepts the connection, holds every chunk for the link's delay (or refuses and cuts
it while the link is "down") and forwards it to the direct address.

Why a relay and not ``tc netem``: this kernel has no ``sch_netem`` and cannot load modules, and there is no
iptables/nft for a transparent proxy; a userspace TCP relay on addresses routed to it gives the same delay per
direction (ordered, since TCP cannot reorder) and cuts and heals one pair of regions.

Names. Every namespace and interface of a layout starts with its prefix (``mgd`` + 6 hex digits of the data
dir for a ``magnetar up`` deployment, ``mgt`` + 6 random ones for the test kit), so deployments never share
one and :func:`remove` finds them all, also those of a run that crashed half way. Interface names are at most
15 bytes: the prefix is at most 11. Octets: each layout takes the first pair ``d``/``d+1`` (even ``d`` from
100 to 198) that no route or address of the root namespace uses, under a lock, so two can live at once.

``remove()`` deletes every namespace of the prefix (their veths go with them, and the root's routes with the
root veth) and is idempotent. A namespace outlives its name while a process still runs in it: stop the
processes first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

from magnetar.errors import MagnetarError

MAX_REGIONS = 200
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,10}$")
_LOCK_PATH = "/run/lock/magnetar-netns.lock"


class NetnsError(MagnetarError):
    """A namespace, veth, address or route could not be made or removed (the message names the ``ip`` call)."""


class OctetsTakenError(NetnsError):
    """The layout's addresses were taken by another build between choosing them and building (choose again)."""


def _ip(*args: str, netns: Optional[str] = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def available() -> str:
    """"" when network namespaces can be made here; else why not (for an error message or ``pytest.skip``)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"mgprobe{uuid.uuid4().hex[:6]}"
    try:
        result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    except FileNotFoundError:
        return "the ip command (iproute2) is not installed"
    if result.returncode != 0:
        return f"ip netns add failed: {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def namespaces_with_prefix(prefix: str) -> list[str]:
    """Names of the namespaces that exist and start with ``prefix``."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


@dataclass(frozen=True)
class Layout:
    """The names and addresses of one deployment's namespaces (pure data; see the module docstring).

    Attributes:
        prefix: every namespace and interface name starts with it.
        octet: the second octet of the direct addresses (public ones: ``octet + 1``).
        regions: region names; region ``regions[i - 1]`` has index i (the third octet of its addresses).
    """

    prefix: str
    octet: int
    regions: tuple[str, ...]

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise ValueError(f"namespace prefix {self.prefix!r}: 1 to 11 of [a-z0-9], starting with a letter")
        if not 1 <= len(self.regions) <= MAX_REGIONS:
            raise ValueError(f"1 to {MAX_REGIONS} regions, got {len(self.regions)}")
        if not 2 <= self.octet <= 252 or self.octet % 2:
            raise ValueError(f"octet must be even, in [2, 252] (its pair is octet + 1), got {self.octet}")

    @classmethod
    def choose(cls, prefix: str, regions: Sequence[str]) -> "Layout":
        """A layout on the first free pair of octets (checked again, under a lock, by :func:`build`)."""
        return cls(prefix=prefix, octet=_free_octet(), regions=tuple(regions))

    @property
    def wan_netns(self) -> str:
        return f"{self.prefix}w"

    @property
    def root_link(self) -> str:
        """The root namespace's end of the veth to the wan namespace."""
        return f"{self.prefix}r"

    @property
    def root_address(self) -> str:
        return f"10.{self.octet}.0.1"

    @property
    def wan_address(self) -> str:
        """The wan namespace's own address (the configuration store and the relay live there)."""
        return f"10.{self.octet}.0.2"

    def index(self, region: str) -> int:
        try:
            return self.regions.index(region) + 1
        except ValueError:
            raise KeyError(f"no region {region!r} (regions: {', '.join(self.regions)})") from None

    def netns(self, region: Optional[str]) -> str:
        """The namespace of ``region``; None names the wan namespace."""
        return self.wan_netns if region is None else f"{self.prefix}n{self.index(region)}"

    def direct_address(self, region: Optional[str]) -> str:
        """The address servers of ``region`` bind (None: the wan namespace's)."""
        return self.wan_address if region is None else f"10.{self.octet}.{self.index(region)}.1"

    def public_address(self, region: str) -> str:
        """The address a region advertises to clients and other regions (relayed from outside the region)."""
        return f"10.{self.octet + 1}.{self.index(region)}.1"

    def namespaces(self) -> list[str]:
        return [self.wan_netns, *(self.netns(r) for r in self.regions)]

    def exec_prefix(self, region: Optional[str]) -> list[str]:
        """The command prefix that runs a program inside ``region``'s namespace (None: the wan's)."""
        return ["ip", "netns", "exec", self.netns(region)]

    def document(self) -> dict[str, Any]:
        """For ``state.json`` and ``topology.json``; :meth:`from_document` reads it back."""
        return {
            "prefix": self.prefix,
            "octet": self.octet,
            "wan_namespace": self.wan_netns,
            "wan_address": self.wan_address,
            "root_link": self.root_link,
            "regions": {
                name: {"index": self.index(name), "namespace": self.netns(name),
                       "direct_address": self.direct_address(name), "public_address": self.public_address(name)}
                for name in self.regions
            },
        }

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> "Layout":
        regions = sorted(doc["regions"].items(), key=lambda item: item[1]["index"])
        return cls(prefix=doc["prefix"], octet=int(doc["octet"]), regions=tuple(name for name, _ in regions))


# -- octets -------------------------------------------------------------------------------------------------


def _used_prefixes() -> str:
    return _ip("-4", "route", "show", "table", "all", check=False).stdout + _ip("-4", "addr", check=False).stdout


def _octet_in_use(octet: int, used: str) -> bool:
    return any(re.search(rf"(^|\s)10\.{o}\.", used, re.MULTILINE) for o in (octet, octet + 1))


def _free_octet() -> int:
    used = _used_prefixes()
    for octet in range(100, 200, 2):
        if not _octet_in_use(octet, used):
            return octet
    raise NetnsError("no free 10.x.0.0/16 pair left for another set of regions (10.100 to 10.199 are all in use)")


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialises building on this machine, so two layouts never take the same octets at once."""
    os.makedirs(os.path.dirname(_LOCK_PATH), exist_ok=True)
    fd = os.open(_LOCK_PATH, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- building and removing ----------------------------------------------------------------------------------


def build(layout: Layout) -> None:
    """Makes every namespace, veth, address and route of ``layout``; on failure removes what it made.

    Raises NetnsError when a namespace of the prefix already exists (a leftover: :func:`remove` it) or the
    layout's octets are taken meanwhile (choose another layout).
    """
    with _locked():
        left = namespaces_with_prefix(layout.prefix)
        if left:
            raise NetnsError(f"namespaces of prefix {layout.prefix} already exist ({', '.join(left)})")
        if _octet_in_use(layout.octet, _used_prefixes()):
            raise OctetsTakenError(f"10.{layout.octet}.0.0/16 or 10.{layout.octet + 1}.0.0/16 is in use meanwhile")
        try:
            _build(layout)
        except BaseException:
            remove(layout)
            raise


def _build(layout: Layout) -> None:
    p, d, wan = layout.prefix, layout.octet, layout.wan_netns
    _ip("netns", "add", wan)
    _ip("link", "set", "lo", "up", netns=wan)
    _ip("netns", "exec", wan, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    # root <-> wan
    _ip("link", "add", layout.root_link, "type", "veth", "peer", "name", f"{p}w0")
    _ip("link", "set", f"{p}w0", "netns", wan)
    _ip("addr", "add", f"{layout.root_address}/24", "dev", layout.root_link)
    _ip("link", "set", layout.root_link, "up")
    _ip("addr", "add", f"{layout.wan_address}/24", "dev", f"{p}w0", netns=wan)
    _ip("link", "set", f"{p}w0", "up", netns=wan)
    _ip("route", "add", f"10.{d}.0.0/16", "via", layout.wan_address)
    _ip("route", "add", f"10.{d + 1}.0.0/16", "via", layout.wan_address)
    for name in layout.regions:
        i, ns = layout.index(name), layout.netns(name)
        _ip("netns", "add", ns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("addr", "add", f"{layout.public_address(name)}/32", "dev", "lo", netns=ns)
        w_if, r_if = f"{p}w{i}", f"{p}n{i}"
        _ip("link", "add", w_if, "type", "veth", "peer", "name", r_if)
        _ip("link", "set", w_if, "netns", wan)
        _ip("link", "set", r_if, "netns", ns)
        _ip("addr", "add", f"10.{d}.{i}.2/24", "dev", w_if, netns=wan)
        _ip("link", "set", w_if, "up", netns=wan)
        _ip("addr", "add", f"{layout.direct_address(name)}/24", "dev", r_if, netns=ns)
        _ip("link", "set", r_if, "up", netns=ns)
        _ip("route", "add", "default", "via", f"10.{d}.{i}.2", netns=ns)
        _ip("addr", "add", f"{layout.public_address(name)}/32", "dev", "lo", netns=wan)


def remove(layout: Layout) -> list[str]:
    """Deletes every namespace of the layout's prefix and the root veth (idempotent); returns what is left."""
    for name in dict.fromkeys([*layout.namespaces(), *namespaces_with_prefix(layout.prefix)]):
        _ip("netns", "del", name, check=False)
    _ip("link", "del", layout.root_link, check=False)
    return namespaces_with_prefix(layout.prefix)


# -- the test kit's handle ----------------------------------------------------------------------------------


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
    """A built layout as one object to close (the test kit's and benchmarks' handle)."""

    layout: Layout
    regions: dict[str, RegionNet] = field(default_factory=dict)
    _closed: bool = False

    @classmethod
    def create(cls, names: Sequence[str], *, prefix: Optional[str] = None) -> "Wan":
        """Builds namespaces for ``names`` under ``prefix`` (default: ``mgt`` + 6 random hex digits)."""
        prefix = prefix or f"mgt{uuid.uuid4().hex[:6]}"
        for attempt in range(5):  # another build (a parallel test, an `up`) may take the octets first
            layout = Layout.choose(prefix, names)
            try:
                build(layout)
                break
            except OctetsTakenError:
                if attempt == 4:
                    raise
        return cls(layout=layout, regions={
            name: RegionNet(name=name, index=layout.index(name), netns=layout.netns(name), octet=layout.octet)
            for name in names})

    @property
    def netns(self) -> str:
        return self.layout.wan_netns

    @property
    def octet(self) -> int:
        return self.layout.octet

    @property
    def root_address(self) -> str:
        return self.layout.root_address

    @property
    def address(self) -> str:
        """The wan namespace's own address (the configuration store binds it)."""
        return self.layout.wan_address

    def exec_prefix(self) -> list[str]:
        return self.layout.exec_prefix(None)

    def close(self) -> None:
        """Deletes every namespace (idempotent); their veths and the root's routes go with them."""
        if self._closed:
            return
        self._closed = True
        remove(self.layout)

    def __enter__(self) -> "Wan":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
