"""Local deployments: topology files and the supervisor behind `magnetar up | down | status`.

Topology files are TOML (schema in ``clusters.topology``); ``standalone.toml`` here is one region with a
ZooKeeper and three bookies. Process kinds (how to run a ZooKeeper, a bookie, ...) live in
``clusters.kinds``; the supervisor and the data-dir files it keeps in ``clusters.supervisor`` and
``clusters.runtime``; the `up`, `down` and `status` commands in ``clusters.commands``; the CA,
certificates and tokens of a topology with proxies in ``clusters.security``; the deployment's Prometheus
(a ``[prometheus]`` table) in ``clusters.prometheus``; regions apart (``[network] mode = "netns"``, ``magnetar up
--netns``) in ``clusters.netns`` (namespaces and addresses), ``clusters.wan_relay`` (the delayed link) and
``clusters.network`` (the relay's process kind, ``magnetar netns``).
"""

import pathlib

from .kinds import KINDS, Instance, Plan, ProcessKind, make_plan
from .runtime import DataDir
from .commands import down, status, up
from .topology import Region, Topology, load, parse

STANDALONE = pathlib.Path(__file__).with_name("standalone.toml")

__all__ = [
    "STANDALONE",
    "DataDir",
    "Instance",
    "KINDS",
    "Plan",
    "ProcessKind",
    "Region",
    "Topology",
    "down",
    "load",
    "make_plan",
    "parse",
    "status",
    "up",
]
