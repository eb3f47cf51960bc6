"""``python -m magnetar``: the CLI (:mod:`magnetar.cli`).

A server started the way supervisors and tests start one, ``python -m magnetar bookie --config FILE`` (or
``broker``, ``proxy``, ``autorecovery``), goes straight to its server's ``run``: the whole CLI (typer, rich,
pydantic and every sub-command's module) costs ~0.4 s of CPU to import, and a test run starts well over a
thousand servers. It behaves as the CLI's command does: ``error: REASON`` on standard error and exit code 2
for a bad configuration. Anything else (``--help``, other options, other commands) is the CLI's.
"""

import sys

_SERVERS = {
    "bookie": "bookie.server",
    "broker": "broker.process",
    "proxy": "proxy.process",
    "autorecovery": "bookie.autorecovery.process",
}


def server_config(argv: list[str]) -> tuple[str, str] | None:
    """``(module, config path)`` when ``argv`` (without the program) is exactly a server command and its
    ``--config``; None otherwise."""
    if len(argv) == 3 and argv[1] == "--config":
        command, path = argv[0], argv[2]
    elif len(argv) == 2 and argv[1].startswith("--config="):
        command, path = argv[0], argv[1][len("--config="):]
    else:
        return None
    if command not in _SERVERS or not path or path.startswith("-"):
        return None
    return _SERVERS[command], path


def _run_server(module_name: str, path: str) -> int:
    import importlib
    import pathlib

    from magnetar.errors import MagnetarError

    module = importlib.import_module(module_name)
    try:
        module.run(pathlib.Path(path))
    except MagnetarError as err:
        import typer  # only on this path: the message as magnetar.cli's _fail writes it

        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        return 2
    return 0


def _main() -> None:
    direct = server_config(sys.argv[1:])
    if direct is not None:
        sys.exit(_run_server(*direct))
    from magnetar.cli import main

    main()


if __name__ == "__main__":
    _main()
