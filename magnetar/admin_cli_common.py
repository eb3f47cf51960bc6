"""What every ``magnetar admin`` command shares: the common options, calling the broker, parsing names
and printing the answer.

A command calls :func:`call`, which prints the broker's error and exits 1 when the request fails, then
:func:`emit` (a table, or JSON with ``--json``) or :func:`done` (one line saying what changed). Malformed
names on the command line exit 2 before anything is sent.
"""

from __future__ import annotations

import json
import pathlib
import urllib.parse
from typing import Any, Optional

import typer

from magnetar.admin_client import (AdminClient, AdminCredentials, AdminError, credentials_from_environment,
                                   default_url, deployment_credentials)
from magnetar.topic_name import InvalidTopicNameError, TopicName

# ---------------------------------------------------------------------------------------------- options

UrlOpt = typer.Option(None, "--url", help="A broker's HTTP URL (default: from --data-dir, "
                                          "$MAGNETAR_ADMIN_URL or http://127.0.0.1:8080).")
DataDirOpt = typer.Option(None, "--data-dir", help="A deployment's data dir: use its first broker (and its "
                          "admin token, when it has security material).")
JsonOpt = typer.Option(False, "--json", help="Print JSON instead of a table.")
ClustersOpt = typer.Option(..., "--clusters", help="Comma-separated cluster names, e.g. us-east,eu-west.")


# ---------------------------------------------------------------------------------------------- output


def emit(value: Any, as_json: bool, *, title: str = "", column: str = "name") -> None:
    """Prints an answer: JSON with ``--json``; else a one-column table (a list), a key/value table (an
    object), or the value itself."""
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


def done(message: str) -> None:
    """Says what a command changed."""
    typer.echo(message)


# ---------------------------------------------------------------------------------------------- calls and names


CREDENTIALS: Optional[AdminCredentials] = None
"""Set by ``magnetar admin``'s own options (``--auth-token``...); None: from the environment."""


def call(url: Optional[str], data_dir: Optional[pathlib.Path], method: str, path: str, body: Any = None) -> Any:
    """The broker's answer to one request; on an error, prints it and exits 1."""
    try:
        credentials = CREDENTIALS  # None: the environment's
        if url is None and data_dir is not None and not (credentials or credentials_from_environment()).token:
            # A deployment of `magnetar up` with security material: its admin token, unless one was given.
            credentials = deployment_credentials(data_dir) or credentials
        client = AdminClient(url or default_url(data_dir), credentials=credentials)
        return client.request(method, path, body)
    except AdminError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=1) from None


def parse_topic(name: str) -> TopicName:
    """The topic named on the command line; exits 2 if the name is invalid."""
    try:
        return TopicName.parse(name)
    except InvalidTopicNameError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None


def namespace_path(name: str) -> str:
    """``TENANT/NAMESPACE`` quoted for a URL path; exits 2 if it is not of that form."""
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        typer.secho(f"error: expected TENANT/NAMESPACE, got {name!r}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2)
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


def quote_segment(text: str) -> str:
    """``text`` quoted as one URL path segment (a ``/`` in it included)."""
    return urllib.parse.quote(text, safe="")


def split_csv(text: Optional[str]) -> Optional[list[str]]:
    """A comma-separated option as a list (blanks dropped); None stays None."""
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]
