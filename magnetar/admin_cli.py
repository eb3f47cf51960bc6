"""``magnetar admin``: the admin REST API from the command line (a small pulsar-admin).

Every command talks to one broker's HTTP port (``--url``; default: the first broker of ``--data-dir``'s
``topology.json``, else ``$MAGNETAR_ADMIN_URL``, else ``http://127.0.0.1:8080``) and follows the 307
redirects brokers answer for topics they do not own. Output is a table (rich) unless ``--json``.
Errors print the broker's ``reason`` and exit 1.

Brokers with authentication on take ``magnetar admin --auth-token <jwt> ...`` (or ``--auth-token-file``, or
``$MAGNETAR_AUTH_TOKEN``); ``https://`` URLs take ``--tls-trust-certs-file`` and, for a client certificate,
``--tls-cert-file`` / ``--tls-key-file`` (or ``$MAGNETAR_TLS_*``).

Each group of commands is one Typer app; the topics group lives in :mod:`magnetar.admin_topics_cli`,
what they share in :mod:`magnetar.admin_cli_common`, the HTTP client in :mod:`magnetar.admin_client`.
"""

from __future__ import annotations

import pathlib
from typing import Any, Optional

import typer

from magnetar import admin_cli_common
from magnetar.admin_cli_common import (ClustersOpt, DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path,
                                       quote_segment, split_csv)
from magnetar.admin_client import AdminCredentials, AdminError, read_token_file
from magnetar.admin_bookies_cli import bookies_app
from magnetar.admin_namespace_policies_cli import add_namespace_policy_commands
from magnetar.admin_permissions_cli import add_namespace_permission_commands, add_topic_permission_commands
from magnetar.admin_rate_limits_cli import add_rate_limit_commands, add_topic_rate_limit_commands
from magnetar.admin_schemas_cli import schemas_app
from magnetar.admin_topic_policies_cli import add_topic_policy_commands
from magnetar.admin_topics_cli import topics_app

admin_app = typer.Typer(help="Administer tenants, namespaces, topics and clusters over the admin REST API.",
                        no_args_is_help=True)
clusters_app = typer.Typer(help="Clusters (regions) in the configuration store.", no_args_is_help=True)
tenants_app = typer.Typer(help="Tenants.", no_args_is_help=True)
namespaces_app = typer.Typer(help="Namespaces and their policies.", no_args_is_help=True)
brokers_app = typer.Typer(help="Live brokers.", no_args_is_help=True)
for _sub, _name in ((clusters_app, "clusters"), (tenants_app, "tenants"), (namespaces_app, "namespaces"),
                    (topics_app, "topics"), (brokers_app, "brokers"), (schemas_app, "schemas"),
                    (bookies_app, "bookies")):
    admin_app.add_typer(_sub, name=_name)
add_rate_limit_commands(namespaces_app)
add_topic_rate_limit_commands(topics_app)
add_namespace_policy_commands(namespaces_app)
add_topic_policy_commands(topics_app)
add_namespace_permission_commands(namespaces_app)
add_topic_permission_commands(topics_app)


@admin_app.callback()
def credentials(
    auth_token: str = typer.Option("", "--auth-token", envvar="MAGNETAR_AUTH_TOKEN",
                                   help="A token (JWT) sent as 'Authorization: Bearer'."),
    auth_token_file: str = typer.Option("", "--auth-token-file", envvar="MAGNETAR_AUTH_TOKEN_FILE",
                                        help="A file holding the token (file:///path or a path)."),
    tls_trust_certs_file: str = typer.Option("", "--tls-trust-certs-file", envvar="MAGNETAR_TLS_TRUST_CERTS_FILE",
                                             help="The CA (PEM) an https:// broker's certificate chains to."),
    tls_cert_file: str = typer.Option("", "--tls-cert-file", envvar="MAGNETAR_TLS_CERT_FILE",
                                      help="A client certificate (PEM) for https:// (its CN is the role)."),
    tls_key_file: str = typer.Option("", "--tls-key-file", envvar="MAGNETAR_TLS_KEY_FILE",
                                     help="The client certificate's private key (PEM)."),
) -> None:
    """Credentials every command of this invocation presents (brokers with authentication on)."""
    token = auth_token
    if not token and auth_token_file:
        try:
            token = read_token_file(auth_token_file)
        except AdminError as e:
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2) from None
    if bool(tls_cert_file) != bool(tls_key_file):
        typer.secho("error: --tls-cert-file and --tls-key-file go together", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    admin_cli_common.CREDENTIALS = AdminCredentials(token=token.strip(), tls_trust_certs_file=tls_trust_certs_file,
                                                    tls_cert_file=tls_cert_file, tls_key_file=tls_key_file)


# ---------------------------------------------------------------------------------------------- clusters


@clusters_app.command("list")
def clusters_list(url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                  as_json: bool = JsonOpt) -> None:
    """List the clusters."""
    emit(call(url, data_dir, "GET", "/admin/v2/clusters"), as_json, column="cluster")


@clusters_app.command("get")
def clusters_get(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """Show a cluster's URLs."""
    emit(call(url, data_dir, "GET", f"/admin/v2/clusters/{quote_segment(name)}"), as_json, title=name)


@clusters_app.command("create")
def clusters_create(
    name: str,
    service_url: str = typer.Option("", "--service-url", help="HTTP URL of the cluster's brokers."),
    broker_service_url: str = typer.Option("", "--broker-service-url", help="pulsar:// URL of the cluster."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Register a cluster."""
    call(url, data_dir, "PUT", f"/admin/v2/clusters/{quote_segment(name)}",
         {"serviceUrl": service_url, "brokerServiceUrl": broker_service_url})
    done(f"created cluster {name}")


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
    call(url, data_dir, "POST", f"/admin/v2/clusters/{quote_segment(name)}", body)
    done(f"updated cluster {name}")


@clusters_app.command("delete")
def clusters_delete(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Remove a cluster from the configuration store (not the one the broker asked serves)."""
    call(url, data_dir, "DELETE", f"/admin/v2/clusters/{quote_segment(name)}")
    done(f"deleted cluster {name}")


# ---------------------------------------------------------------------------------------------- tenants


@tenants_app.command("list")
def tenants_list(url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """List the tenants."""
    emit(call(url, data_dir, "GET", "/admin/v2/tenants"), as_json, column="tenant")


@tenants_app.command("get")
def tenants_get(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                as_json: bool = JsonOpt) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    emit(call(url, data_dir, "GET", f"/admin/v2/tenants/{quote_segment(name)}"), as_json, title=name)


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
        body["adminRoles"] = split_csv(admin_roles)
    if allowed_clusters is not None:
        body["allowedClusters"] = split_csv(allowed_clusters)
    call(url, data_dir, "PUT", f"/admin/v2/tenants/{quote_segment(name)}", body)
    done(f"created tenant {name}")


@tenants_app.command("delete")
def tenants_delete(name: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Delete a tenant without namespaces."""
    call(url, data_dir, "DELETE", f"/admin/v2/tenants/{quote_segment(name)}")
    done(f"deleted tenant {name}")


# ---------------------------------------------------------------------------------------------- namespaces


@namespaces_app.command("list")
def namespaces_list(tenant: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                    as_json: bool = JsonOpt) -> None:
    """List a tenant's namespaces."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{quote_segment(tenant)}"), as_json, column="namespace")


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
        body["replication_clusters"] = split_csv(clusters)
    call(url, data_dir, "PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}", body or None)
    done(f"created namespace {namespace}")


@namespaces_app.command("delete")
def namespaces_delete(namespace: str, url: Optional[str] = UrlOpt,
                      data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Delete a namespace without topics."""
    call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}")
    done(f"deleted namespace {namespace}")


@namespaces_app.command("policies")
def namespaces_policies(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                        as_json: bool = JsonOpt) -> None:
    """Show a namespace's policies."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}"), as_json, title=namespace)


@namespaces_app.command("set-deduplication")
def namespaces_set_deduplication(
    namespace: str,
    enable: bool = typer.Option(..., "--enable/--disable", help="Turn deduplication on or off."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Turn message deduplication on or off for a namespace."""
    call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/deduplication", enable)
    done(f"deduplication {'enabled' if enable else 'disabled'} on {namespace}")


@namespaces_app.command("set-retention")
def namespaces_set_retention(
    namespace: str,
    time_minutes: int = typer.Option(..., "--time-minutes", help="Retention time (-1: unlimited)."),
    size_mb: int = typer.Option(..., "--size-mb", help="Retention size (-1: unlimited)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Set how long and how much acknowledged data a namespace keeps."""
    call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/retention",
         {"retentionTimeInMinutes": time_minutes, "retentionSizeInMB": size_mb})
    done(f"retention of {namespace}: {time_minutes} min, {size_mb} MB")


@namespaces_app.command("set-message-ttl")
def namespaces_set_message_ttl(namespace: str, seconds: int, url: Optional[str] = UrlOpt,
                               data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Set the message TTL of a namespace (seconds)."""
    call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/messageTTL", seconds)
    done(f"message TTL of {namespace}: {seconds} s")


@namespaces_app.command("set-clusters")
def namespaces_set_clusters(namespace: str, clusters: str = ClustersOpt, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Set the clusters a namespace's topics are replicated to (each must be allowed for the tenant)."""
    names = split_csv(clusters)
    call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/replication", names)
    done(f"replication clusters of {namespace}: {', '.join(names)}")


@namespaces_app.command("get-clusters")
def namespaces_get_clusters(namespace: str, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Show the clusters a namespace's topics are replicated to."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/replication"), as_json,
         column="cluster")


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
_QUOTA_TYPES = ("destination_storage", "message_age")


def _with_unit(text: str, units: dict[str, int], what: str) -> int:
    """``-1``, ``512``, ``10M`` / ``2h`` (pulsar-admin's forms) as a number of bytes / seconds; exits 2 if not."""
    text = text.strip()
    if text == "-1":
        return -1
    number, unit = text.rstrip("kKmMgGtTsShHdDwW"), text[len(text.rstrip("kKmMgGtTsShHdDwW")):].lower()
    if not number.isdigit() or unit not in units:
        typer.secho(f"error: {what} must be -1 or a number with an optional unit ({', '.join(u for u in units if u)}),"
                    f" got {text!r}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    return int(number) * units[unit]


def _choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        typer.secho(f"error: {what} must be one of {', '.join(choices)}, got {value!r}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    return value


@namespaces_app.command("set-backlog-quota")
def namespaces_set_backlog_quota(
    namespace: str,
    limit: str = typer.Option("-1", "--limit", "-l", help="Size limit in bytes, or with K/M/G/T (-1: none); "
                                                          "what a destination_storage quota is judged by."),
    limit_time: str = typer.Option("-1", "--limit-time", "-lt",
                                   help="Age limit in seconds, or with s/m/h/d/w (-1: none); what a message_age "
                                        "quota is judged by."),
    policy: str = typer.Option(..., "--policy", "-p", help=f"What happens over quota: {', '.join(_QUOTA_POLICIES)}."),
    quota_type: str = typer.Option("destination_storage", "--type", "-t", help=f"{' or '.join(_QUOTA_TYPES)}."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Set a namespace's backlog quota of one type (size of, or age in, its topics' slowest subscription)."""
    body = {"limitSize": _with_unit(limit, _SIZE_UNITS, "--limit"),
            "limitTime": _with_unit(limit_time, _TIME_UNITS, "--limit-time"),
            "policy": _choice(policy, _QUOTA_POLICIES, "--policy")}
    _choice(quota_type, _QUOTA_TYPES, "--type")
    call(url, data_dir, "POST",
         f"/admin/v2/namespaces/{namespace_path(namespace)}/backlogQuota?backlogQuotaType={quota_type}", body)
    done(f"{quota_type} backlog quota of {namespace}: size {body['limitSize']} bytes, time {body['limitTime']} s, "
         f"{policy}")


@namespaces_app.command("get-backlog-quotas")
def namespaces_get_backlog_quotas(namespace: str, url: Optional[str] = UrlOpt,
                                  data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Show a namespace's backlog quotas by type (none set: the broker's defaults apply)."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/backlogQuotaMap"), as_json,
         title=namespace)


@namespaces_app.command("remove-backlog-quota")
def namespaces_remove_backlog_quota(
    namespace: str,
    quota_type: str = typer.Option("destination_storage", "--type", "-t", help=f"{' or '.join(_QUOTA_TYPES)}."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Remove a namespace's backlog quota of one type."""
    _choice(quota_type, _QUOTA_TYPES, "--type")
    call(url, data_dir, "DELETE",
         f"/admin/v2/namespaces/{namespace_path(namespace)}/backlogQuota?backlogQuotaType={quota_type}")
    done(f"removed the {quota_type} backlog quota of {namespace}")


_SCHEMA_STRATEGIES = ("UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                      "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")


@namespaces_app.command("set-schema-compatibility-strategy")
def namespaces_set_schema_strategy(namespace: str, strategy: str, url: Optional[str] = UrlOpt,
                                   data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Set how new schema versions are checked (UNDEFINED: the broker's default, FULL)."""
    value = _choice(strategy.upper(), _SCHEMA_STRATEGIES, "the strategy")
    call(url, data_dir, "PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}/schemaCompatibilityStrategy", value)
    done(f"schema compatibility strategy of {namespace} is {value}")


@namespaces_app.command("get-schema-compatibility-strategy")
def namespaces_get_schema_strategy(namespace: str, url: Optional[str] = UrlOpt,
                                   data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Show a namespace's schema compatibility strategy."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/schemaCompatibilityStrategy"),
         as_json)


@namespaces_app.command("unload")
def namespaces_unload(namespace: str, url: Optional[str] = UrlOpt,
                      data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Unload every bundle of a namespace (its topics move to whichever broker the next lookup picks)."""
    call(url, data_dir, "PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}/unload")
    done(f"unloaded {namespace}")


@namespaces_app.command("bundles")
def namespaces_bundles(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                       as_json: bool = JsonOpt) -> None:
    """Show a namespace's bundle boundaries."""
    emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/bundles"), as_json,
         title=namespace)


@namespaces_app.command("split-bundle")
def namespaces_split_bundle(
    namespace: str,
    bundle: str = typer.Option(..., "--bundle", "-b", help="The bundle, e.g. 0x00000000_0x40000000."),
    unload: bool = typer.Option(False, "--unload", "-u", help="Unload both halves after the split, so lookups "
                                                              "may place them on other brokers."),
    algorithm: str = typer.Option("range_equally_divide", "--split-algorithm-name", "-san",
                                  help="range_equally_divide or topic_count_equally_divide."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Split a namespace bundle in two (at its owner; up to load_balancer_namespace_maximum_bundles)."""
    _choice(algorithm, ("range_equally_divide", "topic_count_equally_divide"), "--split-algorithm-name")
    call(url, data_dir, "PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}/{quote_segment(bundle)}/split"
         f"?unload={'true' if unload else 'false'}&splitAlgorithmName={algorithm}")
    done(f"split bundle {bundle} of {namespace}" + (" and unloaded both halves" if unload else ""))


# ---------------------------------------------------------------------------------------------- brokers


@brokers_app.command("list")
def brokers_list(
    cluster: Optional[str] = typer.Argument(None, help="Cluster (default: the only one there is)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt,
) -> None:
    """List the live brokers of a cluster."""
    if cluster is None:
        clusters = call(url, data_dir, "GET", "/admin/v2/clusters")
        if len(clusters) != 1:
            typer.secho(f"error: name the cluster, one of {clusters}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        cluster = clusters[0]
    emit(call(url, data_dir, "GET", f"/admin/v2/brokers/{quote_segment(cluster)}"), as_json, column="broker")


@brokers_app.command("load-report")
def brokers_load_report(url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                        as_json: bool = JsonOpt) -> None:
    """Show the load report of the broker asked (rates, throughput, per-bundle stats)."""
    emit(call(url, data_dir, "GET", "/admin/v2/broker-stats/load-report"), as_json, title="load report")
