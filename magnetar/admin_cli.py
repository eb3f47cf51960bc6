"""``magnetar admin``: the admin REST API from the command line (a small pulsar-admin).

Every command talks to one broker's HTTP port (``--url``; default: the first broker of ``--data-dir``'s
``topology.json``, else ``$MAGNETAR_ADMIN_URL``, else ``http://127.0.0.1:8080``) and follows the 307
redirects brokers answer for topics they do not own. Output is a table (rich) unless ``--json``.
Errors print the broker's ``reason`` and exit 1.

Standard library HTTP only (urllib): the command stays light and needs nothing the broker room has.
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Optional

import typer

from magnetar.topic_name import InvalidTopicNameError, TopicName

DEFAULT_URL = "http://127.0.0.1:8080"
_REDIRECTS_MAX = 8

admin_app = typer.Typer(help="Administer tenants, namespaces, topics and clusters over the admin REST API.",
                        no_args_is_help=True)
clusters_app = typer.Typer(help="Clusters (regions) in the configuration store.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenants.", no_args_is_help=True)
namespaces_app = typer.Typer(help="Namespaces and their policies.", no_args_is_help=True)
topics_app = typer.Typer(help="Topics, partitioned topics and subscriptions.", no_args_is_help=True)
brokers_app = typer.Typer(help="Live brokers.", no_args_is_help=True)
for _sub, _name in ((clusters_app, "clusters"), (tenants_app, "tenants"), (namespaces_app, "namespaces"),
                    (topics_app, "topics"), (brokers_app, "brokers")):
    admin_app.add_typer(_sub, name=_name)


# ---------------------------------------------------------------------------------------------- client


class AdminError(Exception):
    """The broker answered an error (``status`` and its ``reason``), or could not be reached (status 0)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # redirects are followed by AdminClient, keeping the method and the body


class AdminClient:
    """Blocking JSON client of a broker's admin API."""

    def __init__(self, base_url: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(_NoRedirect)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Sends ``body`` (JSON, unless None) and returns the decoded JSON answer (None when empty)."""
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode()
        for _ in range(_REDIRECTS_MAX):
            req = urllib.request.Request(url, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            req.add_header("Accept", "application/json")
            try:
                with self._opener.open(req, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as e:
                if e.code in (301, 302, 307, 308) and e.headers.get("Location"):
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    continue
                raise AdminError(e.code, _reason(e.read())) from None
            except urllib.error.URLError as e:
                raise AdminError(0, f"cannot reach {url}: {e.reason}") from None
            except OSError as e:
                raise AdminError(0, f"cannot reach {url}: {e}") from None
            if not raw.strip():
                return None
            try:
                return json.loads(raw)
            except ValueError:
                return raw.decode(errors="replace")
        raise AdminError(0, f"too many redirects for {method} {path}")

    def get(self, path: str) -> Any:
        return self.request("GET", path)


def _reason(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
        if isinstance(doc, dict) and "reason" in doc:
            return str(doc["reason"])
    except ValueError:
        pass
    return raw.decode(errors="replace").strip() or "(no reason given)"


def default_url(data_dir: Optional[pathlib.Path]) -> str:
    """The first broker's HTTP URL in ``data_dir/topology.json``, else $MAGNETAR_ADMIN_URL, else the default."""
    if data_dir is not None:
        path = pathlib.Path(data_dir) / "topology.json"
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise AdminError(0, f"cannot read {path}: {e}") from None
        for region in (doc.get("regions") or {}).values():
            for broker in region.get("brokers") or []:
                if broker.get("http"):
                    return broker["http"]
        raise AdminError(0, f"{path} lists no broker")
    return os.environ.get("MAGNETAR_ADMIN_URL") or DEFAULT_URL


# ---------------------------------------------------------------------------------------------- output


def _emit(value: Any, as_json: bool, *, title: str = "", column: str = "name") -> None:
    if as_json:
        typer.echo(json.dumps(value, indent=2, sort_keys=isinstance(value, dict)))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if value is None:
        console.print("(not set)")
        return
    if isinstance(value, list):
        table = Table(title=title or None)
        table.add_column(column)
        for item in value:
            table.add_row(item if isinstance(item, str) else json.dumps(item))
        console.print(table)
        return
    if isinstance(value, dict):
        table = Table(title=title or None)
        table.add_column("key")
        table.add_column("value", overflow="fold")
        for key, item in value.items():
            table.add_row(str(key), item if isinstance(item, str) else json.dumps(item, sort_keys=True))
        console.print(table)
        return
    console.print(str(value), markup=False)


def _done(message: str) -> None:
    typer.echo(message)


# ---------------------------------------------------------------------------------------------- options

UrlOpt = typer.Option(None, "--url", help="A broker's HTTP URL (default: from --data-dir, "
                                          "$MAGNETAR_ADMIN_URL or http://127.0.0.1:8080).")
DataDirOpt = typer.Option(None, "--data-dir", help="A deployment's data dir: use its first broker.")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _call(url: Optional[str], data_dir: Optional[pathlib.Path], method: str, path: str, body: Any = None) -> Any:
    try:
        client = AdminClient(url or default_url(data_dir))
        return client.request(method, path, body)
    except AdminError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from None


def _topic(name: str) -> TopicName:
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None


def _namespace(name: str) -> str:
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        typer.secho(f"error: expected TENANT/NAMESPACE, got {name!r}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def _seg(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def _split(text: Optional[str]) -> Optional[list[str]]:
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


# ---------------------------------------------------------------------------------------------- clusters


@clusters_app.command("list")
def clusters_list(url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                  as_json: bool = JsonOpt) -> None:
    """List the clusters."""
    _emit(_call(url, data_dir, "GET", "/admin/v2/clusters"), as_json, column="cluster")


@clusters_app.command("get")
def clusters_get(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """Show a cluster's URLs."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/clusters/{_seg(name)}"), as_json, title=name)


@clusters_app.command("create")
def clusters_create(
    name: str,
    service_url: str = typer.Option("", "--service-url", help="HTTP URL of the cluster's brokers."),
    broker_service_url: str = typer.Option("", "--broker-service-url", help="pulsar:// URL of the cluster."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Register a cluster."""
    _call(url, data_dir, "PUT", f"/admin/v2/clusters/{_seg(name)}",
          {"serviceUrl": service_url, "brokerServiceUrl": broker_service_url})
    _done(f"created cluster {name}")


@clusters_app.command("update")
def clusters_update(
    name: str,
    service_url: Optional[str] = typer.Option(None, "--service-url",
                                              help="HTTP URL of the cluster's brokers (http://h1:p1,h2:p2)."),
    broker_service_url: Optional[str] = typer.Option(None, "--broker-service-url",
                                                     help="pulsar:// URL of the cluster (pulsar://h1:p1,h2:p2)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Change a cluster's URLs (only those given)."""
    body = {key: value for key, value in (("serviceUrl", service_url), ("brokerServiceUrl", broker_service_url))
            if value is not None}
    if not body:
        typer.secho("error: give --service-url and/or --broker-service-url", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    _call(url, data_dir, "POST", f"/admin/v2/clusters/{_seg(name)}", body)
    _done(f"updated cluster {name}")


@clusters_app.command("delete")
def clusters_delete(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Remove a cluster from the configuration store (not the one the broker asked serves)."""
    _call(url, data_dir, "DELETE", f"/admin/v2/clusters/{_seg(name)}")
    _done(f"deleted cluster {name}")


# ---------------------------------------------------------------------------------------------- tenants


@tenants_app.command("list")
def tenants_list(url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """List the tenants."""
    _emit(_call(url, data_dir, "GET", "/admin/v2/tenants"), as_json, column="tenant")


@tenants_app.command("get")
def tenants_get(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                as_json: bool = JsonOpt) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/tenants/{_seg(name)}"), as_json, title=name)


@tenants_app.command("create")
def tenants_create(
    name: str,
    admin_roles: Optional[str] = typer.Option(None, "--admin-roles", help="Comma-separated roles."),
    allowed_clusters: Optional[str] = typer.Option(None, "--allowed-clusters",
                                                   help="Comma-separated clusters (default: the broker's)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a tenant."""
    body: dict[str, Any] = {}
    if admin_roles is not None:
        body["adminRoles"] = _split(admin_roles)
    if allowed_clusters is not None:
        body["allowedClusters"] = _split(allowed_clusters)
    _call(url, data_dir, "PUT", f"/admin/v2/tenants/{_seg(name)}", body)
    _done(f"created tenant {name}")


@tenants_app.command("delete")
def tenants_delete(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Delete a tenant without namespaces."""
    _call(url, data_dir, "DELETE", f"/admin/v2/tenants/{_seg(name)}")
    _done(f"deleted tenant {name}")


# ---------------------------------------------------------------------------------------------- namespaces


@namespaces_app.command("list")
def namespaces_list(tenant: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                    as_json: bool = JsonOpt) -> None:
    """List a tenant's namespaces."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/namespaces/{_seg(tenant)}"), as_json, column="namespace")


@namespaces_app.command("create")
def namespaces_create(
    namespace: str,
    bundles: Optional[int] = typer.Option(None, "--bundles", help="Number of bundles (default: the broker's)."),
    clusters: Optional[str] = typer.Option(None, "--clusters", help="Comma-separated replication clusters."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a namespace (TENANT/NAMESPACE)."""
    body: dict[str, Any] = {}
    if bundles is not None:
        body["bundles"] = {"numBundles": bundles}
    if clusters is not None:
        body["replication_clusters"] = _split(clusters)
    _call(url, data_dir, "PUT", f"/admin/v2/namespaces/{_namespace(namespace)}", body or None)
    _done(f"created namespace {namespace}")


@namespaces_app.command("delete")
def namespaces_delete(namespace: str, url: Optional[str] = UrlOpt,
                      data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Delete a namespace without topics."""
    _call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{_namespace(namespace)}")
    _done(f"deleted namespace {namespace}")


@namespaces_app.command("policies")
def namespaces_policies(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                        as_json: bool = JsonOpt) -> None:
    """Show a namespace's policies."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/namespaces/{_namespace(namespace)}"), as_json, title=namespace)


@namespaces_app.command("set-deduplication")
def namespaces_set_deduplication(
    namespace: str,
    enable: bool = typer.Option(..., "--enable/--disable", help="Turn deduplication on or off."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Turn message deduplication on or off for a namespace."""
    _call(url, data_dir, "POST", f"/admin/v2/namespaces/{_namespace(namespace)}/deduplication", enable)
    _done(f"deduplication {'enabled' if enable else 'disabled'} on {namespace}")


@namespaces_app.command("set-retention")
def namespaces_set_retention(
    namespace: str,
    time_minutes: int = typer.Option(..., "--time-minutes", help="Retention time (-1: unlimited)."),
    size_mb: int = typer.Option(..., "--size-mb", help="Retention size (-1: unlimited)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Set how long and how much acknowledged data a namespace keeps."""
    _call(url, data_dir, "POST", f"/admin/v2/namespaces/{_namespace(namespace)}/retention",
          {"retentionTimeInMinutes": time_minutes, "retentionSizeInMB": size_mb})
    _done(f"retention of {namespace}: {time_minutes} min, {size_mb} MB")


@namespaces_app.command("set-message-ttl")
def namespaces_set_message_ttl(namespace: str, seconds: int, url: Optional[str] = UrlOpt,
                               data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Set the message TTL of a namespace (seconds)."""
    _call(url, data_dir, "POST", f"/admin/v2/namespaces/{_namespace(namespace)}/messageTTL", seconds)
    _done(f"message TTL of {namespace}: {seconds} s")


ClustersOpt = typer.Option(..., "--clusters", help="Comma-separated cluster names, e.g. us-east,eu-west.")


@namespaces_app.command("set-clusters")
def namespaces_set_clusters(namespace: str, clusters: str = ClustersOpt, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Set the clusters a namespace's topics are replicated to (each must be allowed for the tenant)."""
    names = _split(clusters)
    _call(url, data_dir, "POST", f"/admin/v2/namespaces/{_namespace(namespace)}/replication", names)
    _done(f"replication clusters of {namespace}: {', '.join(names)}")


@namespaces_app.command("get-clusters")
def namespaces_get_clusters(namespace: str, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Show the clusters a namespace's topics are replicated to."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/namespaces/{_namespace(namespace)}/replication"), as_json,
          column="cluster")


# ---------------------------------------------------------------------------------------------- topics


@topics_app.command("list")
def topics_list(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                as_json: bool = JsonOpt) -> None:
    """List the persistent topics of a namespace (TENANT/NAMESPACE)."""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/persistent/{_namespace(namespace)}"), as_json, column="topic")


@topics_app.command("create")
def topics_create(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Create a non-partitioned topic."""
    name = _topic(topic)
    _call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}")
    _done(f"created {name}")


@topics_app.command("create-partitioned")
def topics_create_partitioned(
    topic: str,
    partitions: int = typer.Option(..., "-p", "--partitions", help="Number of partitions."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a partitioned topic."""
    name = _topic(topic)
    _call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}/partitions", partitions)
    _done(f"created {name} with {partitions} partitions")


@topics_app.command("delete")
def topics_delete(
    topic: str,
    force: bool = typer.Option(False, "--force", help="Close connected producers and consumers first."),
    partitioned: bool = typer.Option(False, "--partitioned", help="The topic is partitioned: delete every partition."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Delete a topic."""
    name = _topic(topic)
    suffix = "/partitions" if partitioned else ""
    _call(url, data_dir, "DELETE", f"/admin/v2/{name.rest_path}{suffix}{'?force=true' if force else ''}")
    _done(f"deleted {name}")


@topics_app.command("stats")
def topics_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """Show a topic's stats (rates, backlog, producers, subscriptions)."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/stats"), as_json, title=str(name))


@topics_app.command("partitioned-stats")
def topics_partitioned_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                             as_json: bool = JsonOpt) -> None:
    """Show a partitioned topic's stats, summed over its partitions."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/partitioned-stats"), as_json, title=str(name))


@topics_app.command("internal-stats")
def topics_internal_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                          as_json: bool = JsonOpt) -> None:
    """Show a topic's storage (ledgers, cursors)."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/internalStats"), as_json, title=str(name))


@topics_app.command("unload")
def topics_unload(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Unload a topic from its broker (clients reconnect)."""
    name = _topic(topic)
    _call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}/unload")
    _done(f"unloaded {name}")


@topics_app.command("subscriptions")
def topics_subscriptions(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                         as_json: bool = JsonOpt) -> None:
    """List a topic's subscriptions."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/subscriptions"), as_json, column="subscription")


_LATEST_ID = 2**63 - 1  # pulsar-admin sends MessageId.latest as (Long.MAX_VALUE, Long.MAX_VALUE)


def _message_id_body(text: str) -> dict[str, int]:
    """``earliest``, ``latest`` or ``LEDGER:ENTRY`` as the MessageId JSON the REST API takes."""
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    if text == "latest":
        return {"ledgerId": _LATEST_ID, "entryId": _LATEST_ID}
    try:
        ledger, entry = (int(x) for x in text.split(":"))
    except ValueError:
        typer.secho(f"error: expected earliest, latest or LEDGER:ENTRY, got {text!r}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None
    return {"ledgerId": ledger, "entryId": entry}


def _sub_path(topic: str, subscription: str) -> tuple[TopicName, str]:
    name = _topic(topic)
    return name, f"/admin/v2/{name.rest_path}/subscription/{_seg(subscription)}"


@topics_app.command("create-subscription")
def topics_create_subscription(
    topic: str, subscription: str,
    position: str = typer.Option("latest", "--position", help="earliest, latest or LEDGER:ENTRY."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a durable subscription at a position."""
    name, path = _sub_path(topic, subscription)
    _call(url, data_dir, "PUT", path, _message_id_body(position))
    _done(f"created subscription {subscription} on {name}")


@topics_app.command("delete-subscription")
def topics_delete_subscription(
    topic: str, subscription: str,
    force: bool = typer.Option(False, "--force", help="Disconnect its consumers first."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Delete a subscription (refused while it has consumers, unless --force)."""
    name, path = _sub_path(topic, subscription)
    _call(url, data_dir, "DELETE", path + ("?force=true" if force else ""))
    _done(f"deleted subscription {subscription} on {name}")


@topics_app.command("reset-cursor")
def topics_reset_cursor(
    topic: str, subscription: str,
    timestamp_ms: Optional[int] = typer.Option(None, "--timestamp-ms", help="Publish time to reset to (epoch ms)."),
    message_id: Optional[str] = typer.Option(None, "--message-id", help="earliest, latest or LEDGER:ENTRY."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Move a subscription to a publish time or a message id (exactly one of the two)."""
    if (timestamp_ms is None) == (message_id is None):
        typer.secho("error: give exactly one of --timestamp-ms and --message-id", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    name, path = _sub_path(topic, subscription)
    if timestamp_ms is not None:
        _call(url, data_dir, "POST", f"{path}/resetcursor/{timestamp_ms}")
    else:
        _call(url, data_dir, "POST", f"{path}/resetcursor", _message_id_body(message_id))
    _done(f"reset subscription {subscription} on {name}")


@topics_app.command("skip")
def topics_skip(
    topic: str, subscription: str, count: int = typer.Argument(..., min=1, help="Messages to skip."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Skip (acknowledge) the next COUNT messages of a subscription."""
    name, path = _sub_path(topic, subscription)
    _call(url, data_dir, "POST", f"{path}/skip/{count}")
    _done(f"skipped {count} on {subscription} of {name}")


@topics_app.command("expire")
def topics_expire(
    topic: str, subscription: str, seconds: int = typer.Argument(..., min=0, help="Expire messages older than this."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Acknowledge every message of a subscription published more than SECONDS ago."""
    name, path = _sub_path(topic, subscription)
    _call(url, data_dir, "POST", f"{path}/expireMessages/{seconds}")
    _done(f"expired messages older than {seconds} s on {subscription} of {name}")


@topics_app.command("terminate")
def topics_terminate(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                     as_json: bool = JsonOpt) -> None:
    """Terminate a topic: no more publishing; consumers are told when they reach its end."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "POST", f"/admin/v2/{name.rest_path}/terminate"), as_json, title=f"last message of {name}")


@topics_app.command("set-replication-clusters")
def topics_set_replication_clusters(topic: str, clusters: str = ClustersOpt, url: Optional[str] = UrlOpt,
                                    data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Replicate one topic to these clusters instead of its namespace's (a partitioned topic: all partitions)."""
    name, names = _topic(topic), _split(clusters)
    _call(url, data_dir, "POST", f"/admin/v2/{name.rest_path}/replication", names)
    _done(f"replication clusters of {name}: {', '.join(names)}")


@topics_app.command("get-replication-clusters")
def topics_get_replication_clusters(
    topic: str,
    applied: bool = typer.Option(False, "--applied", help="When the topic has no override, show the namespace's."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt,
) -> None:
    """Show a topic's own replication clusters ("(not set)" / null: its namespace's apply)."""
    name = _topic(topic)
    query = "?applied=true" if applied else ""
    _emit(_call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/replication{query}"), as_json, column="cluster")


@topics_app.command("remove-replication-clusters")
def topics_remove_replication_clusters(topic: str, url: Optional[str] = UrlOpt,
                                       data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Drop a topic's replication override: its namespace's clusters apply again."""
    name = _topic(topic)
    _call(url, data_dir, "DELETE", f"/admin/v2/{name.rest_path}/replication")
    _done(f"removed the replication clusters of {name}; the namespace's apply")


@namespaces_app.command("unload")
def namespaces_unload(namespace: str, url: Optional[str] = UrlOpt,
                      data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Unload every bundle of a namespace (its topics move to whichever broker the next lookup picks)."""
    _call(url, data_dir, "PUT", f"/admin/v2/namespaces/{_namespace(namespace)}/unload")
    _done(f"unloaded {namespace}")


@topics_app.command("lookup")
def topics_lookup(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                  as_json: bool = JsonOpt) -> None:
    """Show which broker serves a topic (assigning its bundle if nobody does)."""
    name = _topic(topic)
    _emit(_call(url, data_dir, "GET", f"/lookup/v2/topic/{name.rest_path}"), as_json, title=str(name))


# ---------------------------------------------------------------------------------------------- brokers


@brokers_app.command("list")
def brokers_list(
    cluster: Optional[str] = typer.Argument(None, help="Cluster (default: the only one there is)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt,
) -> None:
    """List the live brokers of a cluster."""
    if cluster is None:
        clusters = _call(url, data_dir, "GET", "/admin/v2/clusters")
        if len(clusters) != 1:
            typer.secho(f"error: name the cluster, one of {clusters}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        cluster = clusters[0]
    _emit(_call(url, data_dir, "GET", f"/admin/v2/brokers/{_seg(cluster)}"), as_json, column="broker")
