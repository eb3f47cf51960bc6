"""``magnetar admin namespaces {set,get,remove}-{publish-rate,dispatch-rate,subscription-dispatch-rate}``:
a namespace's rate limits, with pulsar-admin's options (``-1`` or ``0``: no limit). The broker answered
keeps them for its own cluster, as Pulsar does.
"""

from __future__ import annotations

import pathlib
from typing import Optional

import typer

from magnetar.admin_cli_common import DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path


def add_rate_limit_commands(namespaces_app: typer.Typer) -> None:
    """Adds the rate-limit commands to the ``namespaces`` group."""

    @namespaces_app.command("set-publish-rate")
    def set_publish_rate(
        namespace: str,
        msg_rate: int = typer.Option(-1, "--msg-publish-rate", "-m", help="Messages per second per topic (-1: none)."),
        byte_rate: int = typer.Option(-1, "--byte-publish-rate", "-b", help="Bytes per second per topic (-1: none)."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set the publish rate limit of each topic of a namespace (producers are slowed, never refused)."""
        body = {"publishThrottlingRateInMsg": msg_rate, "publishThrottlingRateInByte": byte_rate}
        call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/publishRate", body)
        done(f"publish rate of {namespace}: {msg_rate} msg/s, {byte_rate} bytes/s")

    @namespaces_app.command("get-publish-rate")
    def get_publish_rate(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                         as_json: bool = JsonOpt) -> None:
        """Show a namespace's publish rate limit."""
        emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/publishRate"), as_json,
             title=namespace)

    @namespaces_app.command("remove-publish-rate")
    def remove_publish_rate(namespace: str, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a namespace's publish rate limit."""
        call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}/publishRate")
        done(f"removed the publish rate of {namespace}")

    _dispatch_commands(namespaces_app, "dispatch-rate", "dispatchRate", "each topic (all its subscriptions together)")
    _dispatch_commands(namespaces_app, "subscription-dispatch-rate", "subscriptionDispatchRate", "each subscription")


def _dispatch_commands(app: typer.Typer, name: str, resource: str, scope: str) -> None:
    @app.command(f"set-{name}", help=f"Set the dispatch rate limit of {scope} in a namespace.")
    def set_rate(
        namespace: str,
        msg_rate: int = typer.Option(-1, "--msg-dispatch-rate", "-md", help="Messages per period (-1: none)."),
        byte_rate: int = typer.Option(-1, "--byte-dispatch-rate", "-bd", help="Bytes per period (-1: none)."),
        period_s: int = typer.Option(1, "--dispatch-rate-period", "-dt", help="The period in seconds."),
        relative: bool = typer.Option(False, "--relative-to-publish-rate", "-rp",
                                      help="Add the topic's publish rate to the limits."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        body = {"dispatchThrottlingRateInMsg": msg_rate, "dispatchThrottlingRateInByte": byte_rate,
                "ratePeriodInSecond": period_s, "relativeToPublishRate": relative}
        call(url, data_dir, "POST", f"/admin/v2/namespaces/{namespace_path(namespace)}/{resource}", body)
        done(f"{name} of {namespace}: {msg_rate} msg, {byte_rate} bytes per {period_s} s"
             + (" on top of the publish rate" if relative else ""))

    @app.command(f"get-{name}", help=f"Show the dispatch rate limit of {scope} in a namespace.")
    def get_rate(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                 as_json: bool = JsonOpt) -> None:
        emit(call(url, data_dir, "GET", f"/admin/v2/namespaces/{namespace_path(namespace)}/{resource}"), as_json,
             title=namespace)

    @app.command(f"remove-{name}", help=f"Remove the dispatch rate limit of {scope} in a namespace.")
    def remove_rate(namespace: str, url: Optional[str] = UrlOpt,
                    data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        call(url, data_dir, "DELETE", f"/admin/v2/namespaces/{namespace_path(namespace)}/{resource}")
        done(f"removed the {name} of {namespace}")
