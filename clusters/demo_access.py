"""How the demo reaches a region, and the refusals it shows: through the region's proxy when the topology has one.

A region with a proxy (``[regions.proxy]``) is reached as an application outside the deployment reaches it:
pulsar-client at the proxy's ``pulsar+ssl://`` URL, trusting the deployment's CA with the host name verified,
with a token of the ``demo-app`` role made at the first ``up`` by ``magnetar.auth.tokens``; admin calls at the
proxy's ``https://`` URL with the ``admin`` (superuser) token. ``demo-app`` may do nothing until the demo grants
it ``produce`` and ``consume`` on its namespace (:func:`grant_app`). A region without a proxy is reached at its
first broker: at its ``pulsar+ssl://`` and ``https://`` with the same credentials when the topology is secured
(its brokers enforce them too), else at ``pulsar://`` and ``http://`` without any.

:func:`refusals` shows what the proxy keeps out, each a check: a client without credentials (the proxy answers
its CONNECT with AuthenticationError and closes; pulsar-client retries until its operation timeout) and a role
without a grant (the proxy answers its lookup with AuthorizationError); each refusal is counted in the proxy's
metrics, and nothing is created.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import ssl
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from magnetar.admin_client import AdminClient, AdminCredentials, AdminError

from . import security

UNGRANTED_ROLE = "demo-intruder"  # a role with a valid token and no grant anywhere
_REFUSED_TIMEOUT_S = 3  # pulsar-client's operation timeout for a client the proxy refuses


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class RegionAccess:
    """Where and as whom the demo reaches ``region``.

    Attributes:
        service_url: pulsar-client's service URL (the proxy's ``pulsar+ssl://``, or the first broker's).
        admin_url: the admin REST API (the proxy's ``https://``, or the first broker's ``http://``).
        metrics_url: the proxy's ``/metrics`` ("" without a proxy).
        security_dir: the deployment's CA, certificates and tokens (None: a topology without security).
        through_proxy: whether the URLs are the region's proxy's.
    """

    region: str
    service_url: str
    admin_url: str
    metrics_url: str = ""
    security_dir: Optional[pathlib.Path] = None
    through_proxy: bool = False

    @property
    def secured(self) -> bool:
        return self.security_dir is not None

    @property
    def files(self) -> security.SecurityFiles:
        """The deployment's CA, certificates and tokens."""
        assert self.security_dir is not None, "a region without a proxy has no security material"
        return security.SecurityFiles(self.security_dir)

    def client_settings(self, *, role: Optional[str] = security.APP_ROLE, token: Optional[str] = None) -> dict[str, Any]:
        """pulsar.Client keyword arguments: TLS towards the proxy and a token of ``role`` (or ``token``);
        ``role=None`` and no ``token``: no credentials."""
        if not self.secured:
            return {}
        import pulsar

        settings: dict[str, Any] = {"tls_trust_certs_file_path": str(self.files.ca_file), "tls_validate_hostname": True}
        if token is None and role is not None:
            token = self.files.token(role)
        if token is not None:
            settings["authentication"] = pulsar.AuthenticationToken(token)
        return settings

    def admin(self) -> AdminClient:
        """An admin client, with the admin token when the topology is secured."""
        if not self.secured:
            return AdminClient(self.admin_url)
        return AdminClient(self.admin_url, credentials=AdminCredentials(
            token=self.files.token(security.ADMIN_ROLE), tls_trust_certs_file=str(self.files.ca_file)))

    def proxy_metric(self, name: str) -> float:
        """A sample of the proxy's ``/metrics``: ``name`` with its labels as exposed, or a bare name for the
        sum over its labels; 0 when absent."""
        context = ssl.create_default_context(cafile=str(self.files.ca_file))
        with urllib.request.urlopen(self.metrics_url, timeout=10, context=context) as response:
            text = response.read().decode()
        total = 0.0
        for line in text.splitlines():
            key, _, value = line.rpartition(" ")
            if key == name or ("{" not in name and key.startswith(name + "{")):
                total += float(value)
        return total


def access_of(topo: dict[str, Any], region: str) -> RegionAccess:
    """How to reach ``region`` of a ``topology.json`` document."""
    entry = topo["regions"][region]
    proxy = entry.get("proxy")
    security_dir = pathlib.Path(topo["security"]["dir"]) if topo.get("security") else None
    if proxy is not None and security_dir is not None:
        return RegionAccess(region, proxy["pulsar_ssl"], proxy["https"], proxy["metrics"], security_dir, True)
    broker = entry["brokers"][0]
    if security_dir is not None and "pulsar_ssl" in broker:
        return RegionAccess(region, broker["pulsar_ssl"], broker["https"], security_dir=security_dir)
    return RegionAccess(region, broker["pulsar"], broker["http"])


def pulsar_client(access: RegionAccess, client_log: Optional[pathlib.Path], *, operation_timeout_s: int = 30,
                  **credentials: Any):
    """A pulsar-client of ``access`` (``credentials``: :meth:`RegionAccess.client_settings` arguments)."""
    import pulsar

    logger = (pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(client_log)) if client_log
              else pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    return pulsar.Client(access.service_url, operation_timeout_seconds=operation_timeout_s, logger=logger,
                         **access.client_settings(**credentials))


# ------------------------------------------------------------------------------------------ grants


def grant_app(admin: AdminClient, namespace: str, role: str = security.APP_ROLE) -> None:
    """``role`` may produce and consume on ``namespace`` (Pulsar's namespace permissions)."""
    admin.request("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", ["produce", "consume"])


def wait_granted(access: RegionAccess, topic: str, client_log: Optional[pathlib.Path], timeout_s: float = 20.0) -> None:
    """Until the region lets the app role look ``topic`` up: a grant reaches each proxy and broker by a
    watch on the configuration store, a moment after the admin call returned."""
    import pulsar

    client = pulsar_client(access, client_log, operation_timeout_s=5)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                client.get_topic_partitions(topic)
                return
            except pulsar.AuthorizationError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        client.close()


# ------------------------------------------------------------------------------------------ refusals


def _absent(access: RegionAccess, topic: str) -> bool:
    try:
        access.admin().get("/admin/v2/persistent/" + topic.split("://", 1)[1] + "/stats")
    except AdminError as err:
        return err.status == 404
    return False


def _refused_unauthenticated(access: RegionAccess, topic: str, client_log: Optional[pathlib.Path]) -> Check:
    import pulsar

    metric = 'magnetar_proxy_auth_failures_total{reason="no_credentials"}'
    before = access.proxy_metric(metric)
    client = pulsar_client(access, client_log, operation_timeout_s=_REFUSED_TIMEOUT_S, role=None)
    started = time.monotonic()
    try:
        client.create_producer(topic)
        outcome = None
    except pulsar.PulsarException as exc:
        outcome = f"{type(exc).__name__} after {time.monotonic() - started:.1f} s"
    finally:
        client.close()
    counted = access.proxy_metric(metric) - before
    absent = _absent(access, topic)
    return Check(f"a client without credentials is refused ({access.region} proxy)",
                 outcome is not None and counted > 0 and absent,
                 f"create_producer: {outcome or 'NOT refused'}; {metric} +{counted:g}; "
                 f"{'nothing created' if absent else 'the topic EXISTS'}")


def _refused_ungranted(access: RegionAccess, topic: str, client_log: Optional[pathlib.Path]) -> Check:
    import pulsar

    token = access.files.mint_token(UNGRANTED_ROLE)
    metric = "magnetar_proxy_authorization_failures_total"
    before = access.proxy_metric(metric)
    client = pulsar_client(access, client_log, operation_timeout_s=10, role=None, token=token)
    refused = []
    try:
        for what, attempt in (("create_producer", lambda: client.create_producer(topic)),
                              ("subscribe", lambda: client.subscribe(topic, "intruder"))):
            try:
                attempt()
            except pulsar.AuthorizationError:
                refused.append(what)
    finally:
        client.close()
    after = access.proxy_metric(metric)
    absent = _absent(access, topic)
    return Check(f"a role without permission is refused ({access.region} proxy)",
                 refused == ["create_producer", "subscribe"] and after > before and absent,
                 f"{UNGRANTED_ROLE} (a valid token, no grant): AuthorizationError for {', '.join(refused) or 'nothing'}; "
                 f"{metric} +{after - before:g}; {'nothing created' if absent else 'the topic EXISTS'}")


def refusals(accesses: list[RegionAccess], namespace: str, client_log: Optional[pathlib.Path]) -> list[Check]:
    """Through each proxy: a client without credentials and a role without permission get nothing. The
    regions are tried at once (a refused client costs its operation timeout); checks come in region order."""

    def of_region(access: RegionAccess) -> list[Check]:
        topic = f"persistent://{namespace}/refused-{uuid.uuid4().hex[:8]}"
        found = []
        for check in (_refused_unauthenticated, _refused_ungranted):
            try:
                found.append(check(access, topic, client_log))
            except (AdminError, OSError) as exc:
                found.append(Check(f"{check.__name__.strip('_').replace('_', ' ')} ({access.region})", False,
                                   f"{type(exc).__name__}: {exc}"))
        return found

    proxied = [a for a in accesses if a.through_proxy]
    if not proxied:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(proxied)) as pool:
        return [check for found in pool.map(of_region, proxied) for check in found]


def try_it_lines(topo: dict[str, Any], data_dir: pathlib.Path, namespace: str, topic: str) -> list[str]:
    """Commands to try on the running deployment, as its first two regions are reached."""
    regions = list(topo["regions"])
    first, second = (access_of(topo, r) for r in regions[:2])
    if not first.secured:
        return [
            f"magnetar admin namespaces get-clusters {namespace} --data-dir {data_dir}",
            f"magnetar admin topics stats {topic} --url {first.admin_url} --json   # 'replication'",
            f"magnetar produce {first.service_url} persistent://{namespace}/hello -m 'hi from {regions[0]}' -n 3",
            f"magnetar consume {second.service_url} persistent://{namespace}/hello -s my-sub -n 3   # in {regions[1]}",
        ]
    sec = first.files
    return [
        f"curl --cacert {sec.ca_file} -H \"Authorization: Bearer $(cat {sec.token_file(security.ADMIN_ROLE)})\" "
        f"{first.admin_url}/admin/v2/namespaces/{namespace}/permissions   # {regions[0]}'s admin API",
        f"magnetar tokens create -sk {sec.token_secret_key_url} -s my-app   # a token for another role",
        f"python -c \"import pulsar; c = pulsar.Client('{second.service_url}', tls_trust_certs_file_path="
        f"'{sec.ca_file}', tls_validate_hostname=True, authentication=pulsar.AuthenticationToken("
        f"open('{sec.token_file(security.APP_ROLE)}').read().strip())); p = c.create_producer("
        f"'persistent://{namespace}/hello'); p.send(b'hi from {regions[1]}'); c.close()\"   # in {regions[1]}",
    ]
