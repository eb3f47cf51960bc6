"""Where the regions are: a deployment's ``topology.json`` (written by ``magnetar up``) read into what the audit
needs of each region: its admin URL, its binary-protocol URL and its ZooKeeper, plus the credentials to present.

A ``topology.json`` names every region under ``regions.<name>`` with ``zookeeper.connect`` and ``brokers[]``
(``http``/``pulsar``, and ``https``/``pulsar_ssl`` when TLS is on); a deployment with security material has a
``security`` entry, whose admin role's token (a superuser) the audit presents.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from .errors import AuditInputError

__all__ = ["RegionEndpoints", "Topology", "read_topology"]


@dataclass(frozen=True)
class RegionEndpoints:
    """How to reach one region.

    Attributes:
        name: the region's cluster name (what ``__region`` and ``replicated_from`` hold).
        admin_url: a broker's (or proxy's) admin HTTP URL.
        service_url: the binary-protocol URL (``pulsar://h:p[,h:p]`` or ``pulsar+ssl://``).
        zk_connect: the region's ZooKeeper (local metadata: ledgers, cursors), "" when unknown.
    """

    name: str
    admin_url: str
    service_url: str
    zk_connect: str = ""


@dataclass(frozen=True)
class Topology:
    """Every region of a deployment, and what to present to it.

    Attributes:
        regions: by name.
        path: the ``topology.json`` it came from (None when built in code).
        token: a superuser's JWT, "" without authentication.
        tls_trust_certs_file: the CA of ``https://`` / ``pulsar+ssl://`` endpoints, "" for none.
    """

    regions: Mapping[str, RegionEndpoints]
    path: Optional[pathlib.Path] = None
    token: str = ""
    tls_trust_certs_file: str = ""

    @property
    def names(self) -> list[str]:
        return list(self.regions)

    def select(self, names: Optional[list[str]]) -> "Topology":
        """Only the regions ``names`` (all when None).

        Raises:
            AuditInputError: a name that is not a region of the deployment.
        """
        if not names:
            return self
        unknown = [n for n in names if n not in self.regions]
        if unknown:
            raise AuditInputError(f"unknown region(s) {', '.join(unknown)}; the deployment has "
                                  f"{', '.join(self.regions)}")
        return Topology({n: self.regions[n] for n in names}, self.path, self.token, self.tls_trust_certs_file)


def _broker_urls(region: str, entry: Mapping[str, Any], secure: bool) -> tuple[str, str]:
    brokers = entry.get("brokers") or []
    if not brokers:
        raise AuditInputError(f"region {region} lists no broker")
    proxy = entry.get("proxy")
    if secure and proxy:
        return proxy["https"], proxy["pulsar_ssl"]
    first = brokers[0]
    if secure and "https" in first:
        admin = first["https"]
        service = "pulsar+ssl://" + ",".join(b["pulsar_ssl"].removeprefix("pulsar+ssl://") for b in brokers)
    else:
        admin = first["http"]
        service = "pulsar://" + ",".join(b["pulsar"].removeprefix("pulsar://") for b in brokers)
    return admin, service


def read_topology(location: Union[str, pathlib.Path]) -> Topology:
    """Reads ``location``: a ``topology.json`` or the data directory holding one.

    Raises:
        AuditInputError: no such file, not JSON, no regions, or a security entry without the admin's token.
    """
    path = pathlib.Path(location).expanduser()
    if path.is_dir():
        path = path / "topology.json"
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise AuditInputError(f"cannot read the topology {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise AuditInputError(f"{path} is not JSON: {e}") from None
    entries = doc.get("regions") if isinstance(doc, dict) else None
    if not entries:
        raise AuditInputError(f"{path} names no region")
    security = doc.get("security") or {}
    token, ca = "", ""
    if security:
        admin_role = (security.get("superuser_roles") or ["admin"])[0]
        token_file = ((security.get("roles") or {}).get(admin_role) or {}).get("token_file")
        if not token_file:
            raise AuditInputError(f"{path} names no token of the {admin_role} role")
        try:
            token = pathlib.Path(token_file).read_text().strip()
        except OSError as e:
            raise AuditInputError(f"cannot read the token file {token_file}: {e.strerror or e}") from None
        ca = security.get("ca_file", "")
    regions = {}
    for name, entry in entries.items():
        admin, service = _broker_urls(name, entry, bool(security))
        zk = (entry.get("zookeeper") or {}).get("connect", "")
        regions[name] = RegionEndpoints(name, admin, service, zk)
    return Topology(regions, path, token, ca)
