"""``magnetar admin topics {set,get,remove}-inactive-topic-policies``, ``...-schema-compatibility-strategy`` and
``...-schema-validation-enforce``: a topic's own inactive-topic and schema policies, overriding its namespace's
(a partitioned topic's cover its partitions). The options are the namespace commands' (and pulsar-admin's);
``get-...`` prints the topic's own setting ("(not set)", or ``null`` with ``--json``, when the broker answers 204:
its namespace's applies; the validation flag reads ``False`` when not set, as Pulsar answers it), or with
``--applied`` the one that applies. Strategy names are checked by the broker (a 400 lists them).
"""

from __future__ import annotations

import pathlib
from typing import Optional

import typer

from magnetar.admin_cli_common import DataDirOpt, JsonOpt, UrlOpt, call, done, emit, parse_topic
from magnetar.admin_namespace_policies_cli import exactly_one, inactive_policies_body

AppliedOpt = typer.Option(False, "--applied", help="Show what applies (the topic's, else its namespace's, "
                                                   "else the broker's), not only the topic's own.")


def _path(topic: str, policy: str, *, applied: bool = False) -> str:
    return f"/admin/v2/{parse_topic(topic).rest_path}/{policy}" + ("?applied=true" if applied else "")


def add_topic_policy_commands(topics_app: typer.Typer) -> None:
    """Adds the inactive-topic and schema policy commands to the ``topics`` group."""

    @topics_app.command("set-inactive-topic-policies")
    def set_inactive_topic_policies(
        topic: str,
        enable: bool = typer.Option(False, "--enable-delete-while-inactive", "-e",
                                    help="Delete the topic when left inactive."),
        disable: bool = typer.Option(False, "--disable-delete-while-inactive", "-d",
                                     help="Never delete the topic for being inactive."),
        max_inactive: str = typer.Option(..., "--max-inactive-duration", "-t",
                                         help="How long the topic must be inactive (e.g. 1h, 3d)."),
        mode: str = typer.Option(..., "--delete-mode", "-m",
                                 help="delete_when_no_subscriptions or delete_when_subscriptions_caught_up."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set when a topic is deleted for being inactive (overrides its namespace's policies)."""
        body = inactive_policies_body(enable, disable, max_inactive, mode)
        on, seconds = body["deleteWhileInactive"], body["maxInactiveDurationSeconds"]
        call(url, data_dir, "POST", _path(topic, "inactiveTopicPolicies"), body)
        done(f"inactive-topic policies of {topic}: {'deleted' if on else 'kept'} after {seconds} s ({mode})")

    @topics_app.command("get-inactive-topic-policies")
    def get_inactive_topic_policies(topic: str, applied: bool = AppliedOpt, url: Optional[str] = UrlOpt,
                                    data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a topic's inactive-topic policies ("(not set)": its namespace's apply)."""
        emit(call(url, data_dir, "GET", _path(topic, "inactiveTopicPolicies", applied=applied)), as_json, title=topic)

    @topics_app.command("remove-inactive-topic-policies")
    def remove_inactive_topic_policies(topic: str, url: Optional[str] = UrlOpt,
                                       data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a topic's inactive-topic policies: its namespace's apply again."""
        call(url, data_dir, "DELETE", _path(topic, "inactiveTopicPolicies"))
        done(f"removed the inactive-topic policies of {topic}; the namespace's apply")

    @topics_app.command("set-schema-compatibility-strategy")
    def set_schema_strategy(topic: str, strategy: str, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Set how new schema versions of a topic are checked (overrides its namespace's strategy)."""
        value = strategy.upper()
        call(url, data_dir, "PUT", _path(topic, "schemaCompatibilityStrategy"), value)
        done(f"schema compatibility strategy of {topic} is {value}")

    @topics_app.command("get-schema-compatibility-strategy")
    def get_schema_strategy(topic: str, applied: bool = AppliedOpt, url: Optional[str] = UrlOpt,
                            data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show a topic's schema compatibility strategy ("(not set)": its namespace's applies)."""
        emit(call(url, data_dir, "GET", _path(topic, "schemaCompatibilityStrategy", applied=applied)), as_json)

    @topics_app.command("remove-schema-compatibility-strategy")
    def remove_schema_strategy(topic: str, url: Optional[str] = UrlOpt,
                               data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a topic's schema compatibility strategy: its namespace's applies again."""
        call(url, data_dir, "DELETE", _path(topic, "schemaCompatibilityStrategy"))
        done(f"removed the schema compatibility strategy of {topic}; the namespace's applies")

    @topics_app.command("set-schema-validation-enforce")
    def set_schema_validation(
        topic: str,
        enable: bool = typer.Option(False, "--enable", "-e", help="Refuse producers without a schema once the "
                                                                  "topic has one."),
        disable: bool = typer.Option(False, "--disable", "-d", help="Let producers without a schema in."),
        url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
    ) -> None:
        """Set whether a topic with a schema refuses producers without one (overrides its namespace's)."""
        on = exactly_one(enable, disable, "")
        call(url, data_dir, "POST", _path(topic, "schemaValidationEnforced"), on)
        done(f"schema validation of {topic} is {'enforced' if on else 'not enforced'}")

    @topics_app.command("get-schema-validation-enforce")
    def get_schema_validation(topic: str, applied: bool = AppliedOpt, url: Optional[str] = UrlOpt,
                              data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
        """Show whether a topic enforces schema validation (False when not set: its namespace's applies)."""
        emit(call(url, data_dir, "GET", _path(topic, "schemaValidationEnforced", applied=applied)), as_json)

    @topics_app.command("remove-schema-validation-enforce")
    def remove_schema_validation(topic: str, url: Optional[str] = UrlOpt,
                                 data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
        """Remove a topic's schema validation setting: its namespace's applies again."""
        call(url, data_dir, "DELETE", _path(topic, "schemaValidationEnforced"))
        done(f"removed the schema validation setting of {topic}; the namespace's applies")
