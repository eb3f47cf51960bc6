"""``magnetar admin namespaces {set,get,remove}-delayed-delivery``, ``...-inactive-topic-policies`` and
``...-compaction-threshold``: a namespace's delayed-delivery, inactive-topic and compaction-threshold policies,
with pulsar-admin's options, duration syntax (``10s``, ``5m``, ``1h``, ``3d``, ``1w``; a bare number is
seconds, as pulsar-admin reads it; ``ms`` too) and size syntax (``100``, ``10k``, ``10M``, ``1G``, ``1T``;
powers of 1024).
"""

from __future__ import annotations

import pathlib
import re
from typing import Optional

import typer

from magnetar.admin_cli_common import DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 7 * 86_400_000}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt])?\s*$", re.IGNORECASE)
_UNIT_BYTES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


def parse_duration_ms(text: str, what: str) -> int:
    """``10s`` -> 10000; a bare number is seconds (pulsar-admin's ``TimeUnitToMillisConverter``)."""
    match = _DURATION.match(text)
    if match is None:
        raise typer.BadParameter(f"{what} must be a duration like 500ms, 10s, 5m, 1h, 3d or 1w, not {text!r}")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "s").lower()]


def parse_size_bytes(text: str, what: str) -> int:
    """``10M`` -> 10485760; a bare number is bytes (pulsar-admin's ``validateSizeString``)."""
    match = _SIZE.match(text)
    if match is None:
        raise typer.BadParameter(f"{what} must be a size like 1000, 10k, 10M, 1G or 1T, not {text!r}")
    return int(match.group(1)) * _UNIT_BYTES[(match.group(2) or "").lower()]


def exactly_one(enable: bool, disable: bool, suffix: str) -> bool:
    if enable == disable:
        typer.secho(f"error: give exactly one of --enable{suffix} and --disable{suffix}", fg=typer.colors.RED,
                    err=True)
        raise typer.Exit(code=2)
    return enable


def inactive_policies_body(enable: bool, disable: bool, max_inactive: str, mode: str) -> dict:
    """The ``inactiveTopicPolicies`` body of a set command's options (namespace or topic), checked."""
    on = exactly_one(enable, disable, "-delete-while-inactive")
    if mode not in DELETE_MODES:
        raise typer.BadParameter(f"--delete-mode must be one of {', '.join(DELETE_MODES)}, not {mode!r}")
    seconds = parse_duration_ms(max_inactive, "--max-inactive-duration") // 1000
    return {"deleteWhileInactive": on, "maxInactiveDurationSeconds": seconds, "inactiveTopicDeleteMode": mode}


def add_namespace_policy_commands(namespaces_app: typer.Typer) -> None:
    """Adds the delayed-delivery, inactive-topic and compaction-threshold commands to the ``namespaces``
    group."""

    @namespaces_app.command("set-delayed-delivery")
    def set_delayed_delivery(
        namespace: str,
        enable: bool = typer.Option(False, "--enable", "-e", help="Hold messages until their deliver time."),
        disable: bool = typer.Option(False, "--disable", "-d", help="Deliver messages at once, whatever their time."),
        tick: str = typer.Option("1s", "--time", "-t", help="Tick: the delayed-delivery timer fires at most this "
                                                            "often (e.g. 100ms, 1s)."),
        max_delay: str = typer.Option("0", "--maxDelay", "-md", help="Refuse messages delayed further than this "
                                                                     "(e.g. 1h, 3d; 0: no limit)."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set a namespace's delayed-delivery policy (overrides the broker's settings)."""
        active = exactly_one(enable, disable, "")
        body = {"active": active, "tickTime": parse_duration_ms(tick, "--time"),
                "maxDeliveryDelayInMillis": parse_duration_ms(max_delay, "--maxDelay")}
        call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/delayedDelivery", body)
        done(f"delayed delivery of {namespace}: {'on' if active else 'off'}, tick {body['tickTime']} ms, "
             f"max delay {body['maxDeliveryDelayInMillis'] or 'none'}"
             + (" ms" if body["maxDeliveryDelayInMillis"] else ""))

    @namespaces_app.command("get-delayed-delivery")
    def get_delayed_delivery(namespace: str, url: Optional[str] = UrlOpt,
                             data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a namespace's delayed-delivery policy (null: the broker's settings apply)."""
        emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/delayedDelivery"),
             as_json, title=namespace)

    @namespaces_app.command("remove-delayed-delivery")
    def remove_delayed_delivery(namespace: str, url: Optional[str] = UrlOpt,
                                data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a namespace's delayed-delivery policy: the broker's settings apply again."""
        call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}/delayedDelivery")
        done(f"removed the delayed-delivery policy of {namespace}")

    @namespaces_app.command("set-inactive-topic-policies")
    def set_inactive_topic_policies(
        namespace: str,
        enable: bool = typer.Option(False, "--enable-delete-while-inactive", "-e",
                                    help="Delete topics left inactive."),
        disable: bool = typer.Option(False, "--disable-delete-while-inactive", "-d",
                                     help="Never delete inactive topics."),
        max_inactive: str = typer.Option(..., "--max-inactive-duration", "-t",
                                         help="How long a topic must be inactive (e.g. 1h, 3d)."),
        mode: str = typer.Option(..., "--delete-mode", "-m",
                                 help="delete_when_no_subscriptions or delete_when_subscriptions_caught_up."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set when a namespace's inactive topics are deleted (overrides the broker's settings)."""
        body = inactive_policies_body(enable, disable, max_inactive, mode)
        on, seconds = body["deleteWhileInactive"], body["maxInactiveDurationSeconds"]
        call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/inactiveTopicPolicies", body)
        done(f"inactive topics of {namespace}: {'deleted' if on else 'kept'} after {seconds} s ({mode})")

    @namespaces_app.command("get-inactive-topic-policies")
    def get_inactive_topic_policies(namespace: str, url: Optional[str] = UrlOpt,
                                    data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a namespace's inactive-topic policies (null: the broker's settings apply)."""
        emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/inactiveTopicPolicies"),
             as_json, title=namespace)

    @namespaces_app.command("remove-inactive-topic-policies")
    def remove_inactive_topic_policies(namespace: str, url: Optional[str] = UrlOpt,
                                       data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a namespace's inactive-topic policies: the broker's settings apply again."""
        call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}/inactiveTopicPolicies")
        done(f"removed the inactive-topic policies of {namespace}")

    @namespaces_app.command("set-compaction-threshold")
    def set_compaction_threshold(
        namespace: str,
        threshold: str = typer.Option(..., "--threshold", "-t",
                                      help="Compact a topic once this much is not compacted (e.g. 10M, 1G; "
                                           "0: never)."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set the backlog size above which a namespace's topics are compacted automatically."""
        size = parse_size_bytes(threshold, "--threshold")
        call(url, data_dir, "PUT", f"/admin/v2/namespaces/{namespace_path(namespace)}/compactionThreshold", size)
        done(f"compaction threshold of {namespace}: {size} bytes" + (" (never)" if size == 0 else ""))

    @namespaces_app.command("get-compaction-threshold")
    def get_compaction_threshold(namespace: str, url: Optional[str] = UrlOpt,
                                 data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a namespace's compaction threshold in bytes (not set: no automatic compaction)."""
        emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/compactionThreshold"),
             as_json, title=namespace)

    @namespaces_app.command("remove-compaction-threshold")
    def remove_compaction_threshold(namespace: str, url: Optional[str] = UrlOpt,
                                    data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a namespace's compaction threshold: its topics are compacted only when asked."""
        call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}/compactionThreshold")
        done(f"removed the compaction threshold of {namespace}")
