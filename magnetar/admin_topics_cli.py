"""``magnetar admin topics``: topics, partitioned topics, their subscriptions and replication clusters."""

from __future__ import annotations

import pathlib
from typing import Optional

import typer

from magnetar.admin_cli_common import (ClustersOpt, DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path,
                                       parse_topic, quote_segment, split_csv)
from magnetar.topic_name import TopicName

topics_app = typer.Typer(help="Topics, partitioned topics and subscriptions.", no_args_is_help=True)


@topics_app.command("list")
def topics_list(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                as_json: bool = JsonOpt) -> None:
    """List the persistent topics of a namespace (TENANT/NAMESPACE)."""
    emit(call(url, data_dir, "GET", f"/admin/v2/persistent/{namespace_path(namespace)}"), as_json, column="topic")


@topics_app.command("create")
def topics_create(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Create a non-partitioned topic."""
    name = parse_topic(topic)
    call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}")
    done(f"created {name}")


@topics_app.command("create-partitioned")
def topics_create_partitioned(
    topic: str,
    partitions: int = typer.Option(..., "-p", "--partitions", help="Number of partitions."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a partitioned topic."""
    name = parse_topic(topic)
    call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}/partitions", partitions)
    done(f"created {name} with {partitions} partitions")


@topics_app.command("delete")
def topics_delete(
    topic: str,
    force: bool = typer.Option(False, "--force", help="Close connected producers and consumers first."),
    partitioned: bool = typer.Option(False, "--partitioned", help="The topic is partitioned: delete every partition."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Delete a topic."""
    name = parse_topic(topic)
    suffix = "/partitions" if partitioned else ""
    call(url, data_dir, "DELETE", f"/admin/v2/{name.rest_path}{suffix}{'?force=true' if force else ''}")
    done(f"deleted {name}")


@topics_app.command("stats")
def topics_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
    """Show a topic's stats (rates, backlog, producers, subscriptions)."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/stats"), as_json, title=str(name))


@topics_app.command("partitioned-stats")
def topics_partitioned_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                             as_json: bool = JsonOpt) -> None:
    """Show a partitioned topic's stats, summed over its partitions."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/partitioned-stats"), as_json, title=str(name))


@topics_app.command("internal-stats")
def topics_internal_stats(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                          as_json: bool = JsonOpt) -> None:
    """Show a topic's storage (ledgers, cursors)."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/internalStats"), as_json, title=str(name))


@topics_app.command("unload")
def topics_unload(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Unload a topic from its broker (clients reconnect)."""
    name = parse_topic(topic)
    call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}/unload")
    done(f"unloaded {name}")


@topics_app.command("subscriptions")
def topics_subscriptions(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                         as_json: bool = JsonOpt) -> None:
    """List a topic's subscriptions."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/subscriptions"), as_json, column="subscription")


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
    name = parse_topic(topic)
    return name, f"/admin/v2/{name.rest_path}/subscription/{quote_segment(subscription)}"


@topics_app.command("create-subscription")
def topics_create_subscription(
    topic: str, subscription: str,
    position: str = typer.Option("latest", "--position", help="earliest, latest or LEDGER:ENTRY."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Create a durable subscription at a position."""
    name, path = _sub_path(topic, subscription)
    call(url, data_dir, "PUT", path, _message_id_body(position))
    done(f"created subscription {subscription} on {name}")


@topics_app.command("delete-subscription")
def topics_delete_subscription(
    topic: str, subscription: str,
    force: bool = typer.Option(False, "--force", help="Disconnect its consumers first."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Delete a subscription (refused while it has consumers, unless --force)."""
    name, path = _sub_path(topic, subscription)
    call(url, data_dir, "DELETE", path + ("?force=true" if force else ""))
    done(f"deleted subscription {subscription} on {name}")


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
        call(url, data_dir, "POST", f"{path}/resetcursor/{timestamp_ms}")
    else:
        call(url, data_dir, "POST", f"{path}/resetcursor", _message_id_body(message_id))
    done(f"reset subscription {subscription} on {name}")


@topics_app.command("skip")
def topics_skip(
    topic: str, subscription: str, count: int = typer.Argument(..., min=1, help="Messages to skip."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Skip (acknowledge) the next COUNT messages of a subscription."""
    name, path = _sub_path(topic, subscription)
    call(url, data_dir, "POST", f"{path}/skip/{count}")
    done(f"skipped {count} on {subscription} of {name}")


@topics_app.command("clear-backlog")
def topics_clear_backlog(
    topic: str, subscription: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Skip every message of a subscription (on a partitioned topic: of every partition)."""
    name, path = _sub_path(topic, subscription)
    call(url, data_dir, "POST", f"{path}/skip_all")
    done(f"cleared the backlog of {subscription} on {name}")


@topics_app.command("expire")
def topics_expire(
    topic: str, subscription: str, seconds: int = typer.Argument(..., min=0, help="Expire messages older than this."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Acknowledge every message of a subscription published more than SECONDS ago."""
    name, path = _sub_path(topic, subscription)
    call(url, data_dir, "POST", f"{path}/expireMessages/{seconds}")
    done(f"expired messages older than {seconds} s on {subscription} of {name}")


@topics_app.command("terminate")
def topics_terminate(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                     as_json: bool = JsonOpt) -> None:
    """Terminate a topic: no more publishing; consumers are told when they reach its end."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "POST", f"/admin/v2/{name.rest_path}/terminate"), as_json, title=f"last message of {name}")


@topics_app.command("compact")
def topics_compact(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Start a compaction of a topic (the latest message per key); see compaction-status."""
    name = parse_topic(topic)
    call(url, data_dir, "PUT", f"/admin/v2/{name.rest_path}/compaction")
    done(f"compaction of {name} started")


@topics_app.command("compaction-status")
def topics_compaction_status(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                             as_json: bool = JsonOpt) -> None:
    """The status of a topic's last compaction (NOT_RUN, RUNNING, SUCCESS or ERROR)."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/compaction"), as_json,
         title=f"compaction of {name}")


@topics_app.command("terminate-partitioned")
def topics_terminate_partitioned(topic: str, url: Optional[str] = UrlOpt,
                                 data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Terminate every partition of a partitioned topic (the last message id of each)."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "POST", f"/admin/v2/{name.rest_path}/terminate/partitions"), as_json,
         title=f"last message of each partition of {name}")


@topics_app.command("set-replication-clusters")
def topics_set_replication_clusters(topic: str, clusters: str = ClustersOpt, url: Optional[str] = UrlOpt,
                                    data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Replicate one topic to these clusters instead of its namespace's (a partitioned topic: all partitions)."""
    name, names = parse_topic(topic), split_csv(clusters)
    call(url, data_dir, "POST", f"/admin/v2/{name.rest_path}/replication", names)
    done(f"replication clusters of {name}: {', '.join(names)}")


@topics_app.command("get-replication-clusters")
def topics_get_replication_clusters(
    topic: str,
    applied: bool = typer.Option(False, "--applied", help="When the topic has no override, show the namespace's."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt,
) -> None:
    """Show a topic's own replication clusters ("(not set)" / null: its namespace's apply)."""
    name = parse_topic(topic)
    query = "?applied=true" if applied else ""
    emit(call(url, data_dir, "GET", f"/admin/v2/{name.rest_path}/replication{query}"), as_json, column="cluster")


@topics_app.command("remove-replication-clusters")
def topics_remove_replication_clusters(topic: str, url: Optional[str] = UrlOpt,
                                       data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Drop a topic's replication override: its namespace's clusters apply again."""
    name = parse_topic(topic)
    call(url, data_dir, "DELETE", f"/admin/v2/{name.rest_path}/replication")
    done(f"removed the replication clusters of {name}; the namespace's apply")


@topics_app.command("lookup")
def topics_lookup(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                  as_json: bool = JsonOpt) -> None:
    """Show which broker serves a topic (assigning its bundle if nobody does)."""
    name = parse_topic(topic)
    emit(call(url, data_dir, "GET", f"/lookup/v2/topic/{name.rest_path}"), as_json, title=str(name))

