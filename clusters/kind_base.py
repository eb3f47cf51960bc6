"""What every process kind is: an :class:`Instance` of a topology, and the :class:`ProcessKind` that runs it.

``clusters.kinds`` holds the kinds of Magnetar's own servers and the plan; ``clusters.prometheus`` the kind of the
deployment's Prometheus, which ``clusters.kinds`` lists among the others: both build on this module.
"""

from __future__ import annotations

import abc
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Optional

from .topology import Topology

if TYPE_CHECKING:
    from .kinds import Plan

GLOBAL = None  # the region of deployment-wide processes (the global ZooKeeper)


@dataclass(frozen=True)
class Instance:
    """One process a topology names.

    Attributes:
        name: unique in the deployment; its log is ``logs/<name>.log``, its data ``<data-dir>/<name>/``.
        kind: the :class:`ProcessKind` name.
        region: its region, or None for deployment-wide processes.
        slot: its key in ``topology.json`` (inside ``regions.<region>``, or top-level when region is None).
        many: whether the slot holds a list (bookies) or one object (a ZooKeeper).
        index: 1-based position within its slot.
        host: the address it binds and advertises.
        ports: port name -> port; 0 means "not chosen yet" (the supervisor picks and remembers one).
        settings: the topology table it came from.
    """

    name: str
    kind: str
    region: Optional[str]
    slot: str
    many: bool
    index: int
    host: str
    ports: Mapping[str, int]
    settings: Any


class ProcessKind(abc.ABC):
    """How to run one kind of server. Subclasses are stateless; one object per kind lives in :data:`KINDS`."""

    name: ClassVar[str]
    tier: ClassVar[int]
    shown: ClassVar[tuple[str, ...]]  # endpoint keys worth a column in `magnetar status`
    # With regions apart (clusters.network): a wan-facing kind serves clients and other regions, so it binds
    # every address of its region's namespace, advertises the region's public address, and the wan relay
    # forwards its ports; a kind in the root namespace (Prometheus) stays on the host.
    wan_facing: ClassVar[bool] = False
    in_root_namespace: ClassVar[bool] = False

    @abc.abstractmethod
    def instances(self, topology: Topology) -> list[Instance]:
        """The instances of this kind the topology names, with fixed ports or 0."""

    @abc.abstractmethod
    def command(self, inst: Instance, plan: "Plan") -> list[str]:
        """The command that runs ``inst`` in the foreground; writes its config files first."""

    @abc.abstractmethod
    def is_healthy(self, inst: Instance, plan: "Plan") -> bool:
        """True once ``inst`` serves; must answer within a couple of seconds and never raise."""

    @abc.abstractmethod
    def endpoints(self, inst: Instance, plan: "Plan") -> dict[str, Any]:
        """What clients of ``inst`` need to reach it (addresses, URLs), for ``topology.json``."""


def magnetar_command(*args: str) -> list[str]:
    """``python -m magnetar ARGS`` with this interpreter (the venv the supervisor runs in)."""
    return [sys.executable, "-m", "magnetar", *args]
