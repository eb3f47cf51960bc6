"""``magnetar admin schemas``: a topic's schema versions (pulsar-admin's ``schemas`` commands).

A schema file is Pulsar's upload format: ``{"type": "JSON", "schema": "<definition as a string>",
"properties": {...}}``. The namespace's compatibility strategy is set with ``magnetar admin namespaces
set-schema-compatibility-strategy``.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Optional

import typer

from magnetar.admin_cli_common import DataDirOpt, JsonOpt, UrlOpt, call, done, emit, parse_topic
from magnetar.topic_name import TopicName

schemas_app = typer.Typer(help="Topic schemas: versions, upload, compatibility, delete.", no_args_is_help=True)

FileOpt = typer.Option(..., "-f", "--filename", help="A JSON file: {\"type\", \"schema\", \"properties\"}.")


def schema_path(topic: str) -> str:
    """``/admin/v2/schemas/<tenant>/<namespace>/<topic>``: a partition uses its partitioned topic's schema."""
    name: TopicName = parse_topic(topic)
    base = name.base if name.is_partition else name
    return f"/admin/v2/schemas/{base.tenant}/{base.namespace_portion}/{base.encoded_local_name}"


def _payload(path: pathlib.Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        typer.secho(f"error: cannot read the schema file {path}: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None


@schemas_app.command("get")
def schemas_get(
    topic: str,
    version: Optional[int] = typer.Option(None, "--version", help="This version (default: the latest)."),
    all_versions: bool = typer.Option(False, "--all", help="Every live version."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt,
) -> None:
    """Show a topic's schema (latest, one version, or all)."""
    base = schema_path(topic)
    if all_versions:
        answer = call(url, data_dir, "GET", f"{base}/schemas")
        emit(answer["getSchemaResponses"] if as_json else
             [f"{s['version']}: {s['type']} {s['data']}" for s in answer["getSchemaResponses"]], as_json,
             column="version: type definition")
        return
    suffix = f"/schema/{version}" if version is not None else "/schema"
    emit(call(url, data_dir, "GET", base + suffix), as_json, title=topic)


@schemas_app.command("upload")
def schemas_upload(topic: str, filename: pathlib.Path = FileOpt, url: Optional[str] = UrlOpt,
                   data_dir: Optional[pathlib.Path] = DataDirOpt) -> None:
    """Add a schema version (checked against the namespace's compatibility strategy)."""
    answer = call(url, data_dir, "POST", f"{schema_path(topic)}/schema", _payload(filename))
    done(f"schema of {topic} is version {answer['version']['version']}")


@schemas_app.command("compatibility")
def schemas_compatibility(topic: str, filename: pathlib.Path = FileOpt, url: Optional[str] = UrlOpt,
                          data_dir: Optional[pathlib.Path] = DataDirOpt, as_json: bool = JsonOpt) -> None:
    """Test whether a schema could be uploaded (stores nothing); exits 1 when it is incompatible."""
    answer = call(url, data_dir, "POST", f"{schema_path(topic)}/compatibility", _payload(filename))
    emit(answer, as_json, title=topic)
    if not answer.get("compatibility"):
        raise typer.Exit(code=1)


@schemas_app.command("delete")
def schemas_delete(
    topic: str,
    force: bool = typer.Option(False, "--force", help="Remove every version (numbering restarts at 0)."),
    url: Optional[str] = UrlOpt, data_dir: Optional[pathlib.Path] = DataDirOpt,
) -> None:
    """Delete a topic's schema."""
    answer = call(url, data_dir, "DELETE", f"{schema_path(topic)}/schema{'?force=true' if force else ''}")
    done(f"deleted the schema of {topic} (version {answer['version']})")
