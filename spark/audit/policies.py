"""What the audit asks the regions' admin APIs: which topics to read, and where their messages belong.

* Topics: the persistent topics of a namespace in every region (``GET /admin/v2/persistent/{t}/{ns}``; a
  partitioned topic's partitions are topics of their own there), united: a topic that exists in one region
  only is still audited (its messages are then missing elsewhere).
* How far each replicator got: the mark-delete position of the cursor ``pulsar.repl.<remote>`` on each topic
  in each region (``internalStats``). Read before the input, it tells a copy still in flight (beyond it) from
  one missing for good.
* Expected regions of a topic: the topic's own replication clusters if it has an override, else its
  namespace's (``GET /admin/v2/{domain}/{t}/{ns}/{topic}/replication?applied=true``, which answers the
  namespace's ``replication_clusters`` when the topic has none; a partition asks for its partitioned topic).
  Policies live in the global configuration store, so one region answers for all; the first that answers
  does.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from magnetar.admin_client import AdminClient, AdminCredentials, AdminError
from magnetar.topic_name import TopicName

from .errors import AuditError, AuditInputError
from .topology import Topology

__all__ = ["REPLICATOR_CURSOR_PREFIX", "admin_clients", "expected_regions", "namespace_topics", "parse_topics",
           "replicated_up_to"]

REPLICATOR_CURSOR_PREFIX = "pulsar.repl."


def admin_clients(topology: Topology, *, timeout_s: float = 30.0) -> dict[str, AdminClient]:
    """One admin client per region, presenting the topology's credentials."""
    credentials = AdminCredentials(token=topology.token, tls_trust_certs_file=topology.tls_trust_certs_file)
    return {name: AdminClient(r.admin_url, timeout_s=timeout_s, credentials=credentials)
            for name, r in topology.regions.items()}


def parse_topics(names: Iterable[str]) -> list[str]:
    """Complete, validated topic names (``t/ns/x`` becomes ``persistent://t/ns/x``).

    Raises:
        AuditInputError: a malformed name or a non-persistent topic (it keeps nothing to audit).
    """
    found = []
    for name in names:
        try:
            topic = TopicName.parse(name)
        except Exception as e:
            raise AuditInputError(f"bad topic name {name!r}: {e}") from None
        if not topic.persistent:
            raise AuditInputError(f"{topic} is not persistent: it stores nothing to audit")
        found.append(str(topic))
    return found


def namespace_topics(clients: dict[str, AdminClient], namespace: str) -> list[str]:
    """Every persistent topic (partition) of ``namespace`` in any region.

    Raises:
        AuditInputError: the namespace is not ``tenant/namespace``, or no region knows it.
        AuditError: a region could not be asked.
    """
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise AuditInputError(f"a namespace is tenant/namespace, not {namespace!r}")
    found: set[str] = set()
    known = False
    for region, client in clients.items():
        try:
            found.update(client.get(f"/admin/v2/persistent/{namespace}") or [])
            known = True
        except AdminError as e:
            if e.status == 404:
                continue
            raise AuditError(f"{region}: listing the topics of {namespace} failed: {e}") from None
    if not known:
        raise AuditInputError(f"no region knows the namespace {namespace}")
    return sorted(found)


def expected_regions(clients: dict[str, AdminClient], topics: Sequence[str]) -> dict[str, list[str]]:
    """Topic -> the replication clusters its messages belong in (partitions asked once, by their topic).

    Raises:
        AuditError: no region answered for a topic.
    """
    answers: dict[str, list[str]] = {}
    for topic in topics:
        base = TopicName.parse(topic).base
        key = str(base)
        if key not in answers:
            answers[key] = _replication_clusters(clients, base)
    return {t: answers[str(TopicName.parse(t).base)] for t in topics}


def _replication_clusters(clients: dict[str, AdminClient], topic: TopicName) -> list[str]:
    last: Optional[AdminError] = None
    for client in clients.values():
        try:
            clusters = client.get(f"/admin/v2/{topic.rest_path}/replication?applied=true")
        except AdminError as e:
            last = e
            continue
        if clusters is None:  # no override, and the namespace names none: the topic lives where it is
            return []
        return sorted(set(clusters))
    raise AuditError(f"no region answered the replication clusters of {topic}: {last}")


def replicated_up_to(clients: dict[str, AdminClient], topics: Sequence[str]) -> dict[tuple[str, str, str], int]:
    """(topic, origin region, remote region) -> the packed mark-delete position of the origin's replicator
    cursor towards the remote (see :func:`spark.audit.checks.pack`); topics a region does not have are skipped.

    Raises:
        AuditError: a region could not be asked.
    """
    from .checks import pack

    found: dict[tuple[str, str, str], int] = {}
    for region, client in clients.items():
        for topic in topics:
            try:
                stats = client.get(f"/admin/v2/{TopicName.parse(topic).rest_path}/internalStats")
            except AdminError as e:
                if e.status == 404:
                    continue
                raise AuditError(f"{region}: reading the internal stats of {topic} failed: {e}") from None
            for name, cursor in ((stats or {}).get("cursors") or {}).items():
                if not name.startswith(REPLICATOR_CURSOR_PREFIX):
                    continue
                ledger, _, entry = str(cursor.get("markDeletePosition", "")).partition(":")
                try:
                    found[(topic, region, name[len(REPLICATOR_CURSOR_PREFIX):])] = pack(int(ledger), int(entry))
                except ValueError:
                    continue
    return found
