"""``magnetar admin namespaces {grant,revoke}-permission | permissions | {grant,revoke}-subscription-permission |
subscription-permissions`` and ``magnetar admin topics {grant,revoke}-permission | permissions``: who may
produce and consume, as pulsar-admin's commands of the same names (``--role``, ``--actions produce,consume``,
``--subscription``, ``--roles a,b``).

Actions and names are checked here before anything is sent (exit 2); the broker checks them again. A grant
replaces what the role had on that namespace or topic; ``permissions`` of a topic shows what applies there
(its namespace's grants, its own and, for a partition, its partitioned topic's).
"""

from __future__ import annotations

import pathlib
from typing import Any, Optional

import typer

from magnetar.admin_cli_common import (DataDirOpt, JsonOpt, UrlOpt, call, done, emit, namespace_path, parse_topic,
                                       quote_segment, split_csv)

RoleOpt = typer.Option(..., "--role", "-r", help="The role (a certificate's CN, a token's subject).")
ActionsOpt = typer.Option(..., "--actions", "-a", help="Comma-separated actions: produce, consume (also "
                                                       "functions, sources, sinks, packages).")
SubscriptionOpt = typer.Option(..., "--subscription", "-s", help="The subscription name.")


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _role(role: str) -> str:
    if not role.strip():
        _fail("--role must not be empty")
    return role


def _actions(text: str) -> list[str]:
    from magnetar.auth.authorization import AUTH_ACTIONS

    actions = split_csv(text) or []
    if not actions:
        _fail(f"--actions must name at least one of {', '.join(AUTH_ACTIONS)}")
    unknown = [a for a in actions if a not in AUTH_ACTIONS]
    if unknown:
        _fail(f"unknown action(s) {', '.join(unknown)}: expected some of {', '.join(AUTH_ACTIONS)}")
    return [a for a in AUTH_ACTIONS if a in actions]


def _show(grants: Any, as_json: bool, title: str) -> None:
    if as_json or not isinstance(grants, dict):
        emit(grants, as_json, title=title)
    elif not grants:
        typer.echo(f"no permissions on {title}")
    else:
        emit({key: ", ".join(values) for key, values in grants.items()}, as_json, title=title)


def add_namespace_permission_commands(namespaces_app: typer.Typer) -> None:
    """Adds the permission commands to the ``namespaces`` group."""

    def base(namespace: str) -> str:
        return f"/admin/v2/namespaces/{namespace_path(namespace)}/permissions"

    @namespaces_app.command("grant-permission")
    def grant_permission(namespace: str, role: str = RoleOpt, actions: str = ActionsOpt,
                         url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Grant a role actions on every topic of a namespace (replacing what it had there)."""
        path, chosen = f"{base(namespace)}/{quote_segment(_role(role))}", _actions(actions)
        call(url, data_dir, "POST", path, chosen)
        done(f"granted {', '.join(chosen)} on {namespace} to {role}")

    @namespaces_app.command("revoke-permission")
    def revoke_permission(namespace: str, role: str = RoleOpt, url: Optional[str] = UrlOpt,
                          data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Revoke a role's namespace-level permissions (topic-level grants stay)."""
        call(url, data_dir, "DELETE", f"{base(namespace)}/{quote_segment(_role(role))}")
        done(f"revoked the permissions of {role} on {namespace}")

    @namespaces_app.command("permissions")
    def permissions(namespace: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                    as_json: bool = JsonOpt) -> None:
        """Show a namespace's grants: role -> actions."""
        _show(call(url, data_dir, "GET", base(namespace)), as_json, namespace)

    @namespaces_app.command("grant-subscription-permission")
    def grant_subscription_permission(
        namespace: str, subscription: str = SubscriptionOpt,
        roles: str = typer.Option(..., "--roles", help="Comma-separated roles: only these may consume on the "
                                                       "subscription (they also need consume)."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Restrict a subscription name, in every topic of a namespace, to some roles (replacing the list)."""
        names = split_csv(roles) or []
        if not names:
            _fail("--roles must name at least one role")
        if not subscription.strip():
            _fail("--subscription must not be empty")
        call(url, data_dir, "POST", f"{base(namespace)}/subscription/{quote_segment(subscription)}", names)
        done(f"only {', '.join(names)} may consume on subscription {subscription} in {namespace}")

    @namespaces_app.command("revoke-subscription-permission")
    def revoke_subscription_permission(namespace: str, subscription: str = SubscriptionOpt, role: str = RoleOpt,
                                       url: Optional[str] = UrlOpt,
                                       data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a role from a subscription's list (an emptied list restricts nothing)."""
        if not subscription.strip():
            _fail("--subscription must not be empty")
        call(url, data_dir, "DELETE",
             f"{base(namespace)}/{quote_segment(subscription)}/{quote_segment(_role(role))}")
        done(f"removed {role} from subscription {subscription} in {namespace}")

    @namespaces_app.command("subscription-permissions")
    def subscription_permissions(namespace: str, url: Optional[str] = UrlOpt,
                                 data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a namespace's subscription lists: subscription -> roles."""
        _show(call(url, data_dir, "GET", f"{base(namespace)}/subscription"), as_json, namespace)


def add_topic_permission_commands(topics_app: typer.Typer) -> None:
    """Adds the permission commands to the ``topics`` group."""

    def base(topic: str) -> str:
        return f"/admin/v2/{parse_topic(topic).rest_path}/permissions"

    @topics_app.command("grant-permission")
    def grant_permission(topic: str, role: str = RoleOpt, actions: str = ActionsOpt, url: Optional[str] = UrlOpt,
                         data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Grant a role actions on a topic (a partitioned topic's grant covers its partitions)."""
        path, chosen = f"{base(topic)}/{quote_segment(_role(role))}", _actions(actions)
        call(url, data_dir, "POST", path, chosen)
        done(f"granted {', '.join(chosen)} on {topic} to {role}")

    @topics_app.command("revoke-permission")
    def revoke_permission(topic: str, role: str = RoleOpt, url: Optional[str] = UrlOpt,
                          data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Revoke a role's grant on a topic (its namespace-level grant stays)."""
        call(url, data_dir, "DELETE", f"{base(topic)}/{quote_segment(_role(role))}")
        done(f"revoked the permissions of {role} on {topic}")

    @topics_app.command("permissions")
    def permissions(topic: str, url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
                    as_json: bool = JsonOpt) -> None:
        """Show what applies on a topic: role -> actions (namespace and topic grants together)."""
        _show(call(url, data_dir, "GET", base(topic)), as_json, topic)
