"""``magnetar admin {namespaces,topics} {set,get,remove}-{publish-rate,dispatch-rate,subscription-dispatch-rate}``:
rate limits with pulsar-admin's options (``-1`` or ``0``: no limit).

A namespace's rates are kept for the cluster of the broker answered, as Pulsar does; a topic's are its own (a
partitioned topic's cover its partitions) and override its namespace's. ``get-...`` on a topic prints its own
rate ("(not set)": its namespace's, else the broker's, applies), or with ``--applied`` the one that applies.
"""

from __future__ import annotations

import pathlib
from typing import Callable, Optional

import typer

from magnetar.admin_cli_common import DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path, parse_topic

AppliedOpt = typer.Option(False, "--applied", help="Show the rate that applies (the topic's, else its "
                                                   "namespace's, else the broker's), not only the topic's own.")


def _namespace_path(namespace: str, resource: str) -> str:
    return f"/admin/v2/namespaces/{namespace_path(namespace)}/{resource}"


def _topic_path(topic: str, resource: str, applied: bool = False) -> str:
    return f"/admin/v2/{parse_topic(topic).rest_path}/{resource}" + ("?applied=true" if applied else "")


def add_rate_limit_commands(namespaces_app: typer.Typer) -> None:
    """Adds the rate-limit commands to the ``namespaces`` group."""
    _add_all(namespaces_app, _namespace_path, "namespace", per=" per topic", scopes=(
        "each topic of a namespace", "each topic (all its subscriptions together) in a namespace",
        "each subscription in a namespace"))


def add_topic_rate_limit_commands(topics_app: typer.Typer) -> None:
    """Adds the rate-limit commands to the ``topics`` group."""
    _add_all(topics_app, _topic_path, "topic", per="", scopes=(
        "a topic (overrides its namespace's)", "a topic's subscriptions together (overrides its namespace's)",
        "each subscription of a topic (overrides its namespace's)"))


def _add_all(app: typer.Typer, path: Callable[..., str], target: str, *, per: str,
             scopes: tuple[str, str, str]) -> None:
    publish, dispatch, subscription = scopes
    _publish_commands(app, path, target, per, publish)
    _dispatch_commands(app, path, target, "dispatch-rate", "dispatchRate", dispatch)
    _dispatch_commands(app, path, target, "subscription-dispatch-rate", "subscriptionDispatchRate", subscription)


def _get_command(app: typer.Typer, command: str, help_text: str, path: Callable[..., str], resource: str,
                 target: str) -> None:
    """``get-...``: with ``--applied`` for topics only (Pulsar's namespace calls have no such parameter)."""
    if target == "topic":
        @app.command(command, help=help_text)
        def get_topic_rate(topic: str, applied: bool = AppliedOpt, url: Optional[str] = UrlOpt,
                           data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
            emit(call(url, data_dir, "GET", path(topic, resource, applied)), as_json, title=topic)
    else:
        @app.command(command, help=help_text)
        def get_namespace_rate(namespace: str, url: Optional[str] = UrlOpt,
                               data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
            emit(call(url, data_dir, "GET", path(namespace, resource)), as_json, title=namespace)


def _publish_commands(app: typer.Typer, path: Callable[..., str], target: str, per: str, of: str) -> None:
    @app.command("set-publish-rate", help=f"Set the publish rate limit of {of} (producers are slowed, never "
                                          "refused).")
    def set_publish_rate(
        name: str = typer.Argument(..., metavar=target),
        msg_rate: int = typer.Option(-1, "--msg-publish-rate", "-m", help=f"Messages per second{per} (-1: none)."),
        byte_rate: int = typer.Option(-1, "--byte-publish-rate", "-b", help=f"Bytes per second{per} (-1: none)."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        body = {"publishThrottlingRateInMsg": msg_rate, "publishThrottlingRateInByte": byte_rate}
        call(url, data_dir, "POST", path(name, "publishRate"), body)
        done(f"publish rate of {name}: {msg_rate} msg/s, {byte_rate} bytes/s")

    _get_command(app, "get-publish-rate", f"Show the publish rate limit of {of}.", path, "publishRate", target)

    @app.command("remove-publish-rate", help=f"Remove the publish rate limit of a {target}.")
    def remove_publish_rate(name: str = typer.Argument(..., metavar=target), url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        call(url, data_dir, "DELETE", path(name, "publishRate"))
        done(f"removed the publish rate of {name}")


def _dispatch_commands(app: typer.Typer, path: Callable[..., str], target: str, command: str, resource: str,
                       scope: str) -> None:
    @app.command(f"set-{command}", help=f"Set the dispatch rate limit of {scope}.")
    def set_rate(
        name: str = typer.Argument(..., metavar=target),
        msg_rate: int = typer.Option(-1, "--msg-dispatch-rate", "-md", help="Messages per period (-1: none)."),
        byte_rate: int = typer.Option(-1, "--byte-dispatch-rate", "-bd", help="Bytes per period (-1: none)."),
        period_s: int = typer.Option(1, "--dispatch-rate-period", "-dt", help="The period in seconds."),
        relative: bool = typer.Option(False, "--relative-to-publish-rate", "-rp",
                                      help="Add the topic's publish rate to the limits."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        body = {"dispatchThrottlingRateInMsg": msg_rate, "dispatchThrottlingRateInByte": byte_rate,
                "ratePeriodInSecond": period_s, "relativeToPublishRate": relative}
        call(url, data_dir, "POST", path(name, resource), body)
        done(f"{command} of {name}: {msg_rate} msg, {byte_rate} bytes per {period_s} s"
             + (" on top of the publish rate" if relative else ""))

    _get_command(app, f"get-{command}", f"Show the dispatch rate limit of {scope}.", path, resource, target)

    @app.command(f"remove-{command}", help=f"Remove the dispatch rate limit of {scope}.")
    def remove_rate(name: str = typer.Argument(..., metavar=target), url: Optional[str] = UrlOpt,
                    data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        call(url, data_dir, "DELETE", path(name, resource))
        done(f"removed the {command} of {name}")
