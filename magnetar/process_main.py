"""What the entry point of every server process (``magnetar bookie|broker|proxy --config X.toml``) does alike.

It loads the settings, logs to stderr with the server's name in every line, starts the server, runs until
SIGTERM or SIGINT and then closes the server (a clean shutdown, exit code 0). A room's own ``run`` only names
its settings class and its server; this module imports no room (DESIGN §2), so what a room does once its server
started, the runtime tuning from ``observability.runtime``, is handed in.

Logging: one stderr handler on the root logger, lines ``time LEVEL [name] logger: message``. The name is fixed
(``proxy``) or the server's id, set with :func:`set_log_name` once the server knows it (a bookie or broker whose
port is 0 learns its id when it binds); ``-`` until then. ``MAGNETAR_DEBUG`` set: DEBUG level.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import signal
import sys
from typing import Any, Callable, Optional, Protocol, Sequence

__all__ = ["Server", "run", "serve", "set_log_name", "setup_logging"]

# Third-party and client chatter every server keeps at WARNING (a server adds its own).
QUIET_LOGGERS = ("kazoo", "config_store.kazoo")


class Server(Protocol):
    """A server process's main object: started once, closed once (idempotent)."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class _ServerName(logging.Filter):
    """Puts the server's name into every record (``%(server)s``)."""

    value = "-"

    def filter(self, record: logging.LogRecord) -> bool:
        record.server = self.value
        return True


_NAME = _ServerName()


def set_log_name(name: str) -> None:
    """Names the server in every log line from now on."""
    _NAME.value = name


def setup_logging(level: int = logging.INFO, *, name: str = "-", quiet: Sequence[str] = ()) -> None:
    """Logs to stderr as the module docstring says; ``quiet`` loggers (and :data:`QUIET_LOGGERS`) at WARNING."""
    set_log_name(name)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_NAME)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s [%(server)s] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in (*QUIET_LOGGERS, *quiet):
        logging.getLogger(noisy).setLevel(logging.WARNING)


async def serve(make_server: Callable[[], Server], *, log: logging.Logger,
                tune_runtime: Optional[Callable[[], None]] = None) -> None:
    """Runs the server ``make_server()`` builds (in the running loop) until SIGTERM or SIGINT, then closes it.

    ``tune_runtime`` runs once the server started, unless ``MAGNETAR_TUNE_GC=0``.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = make_server()
    try:
        await server.start()
        if tune_runtime is not None and os.environ.get("MAGNETAR_TUNE_GC", "1") != "0":
            tune_runtime()
        await stop.wait()
        log.info("signal received")
    finally:
        await server.close()


def run(config_path: pathlib.Path | str, *, settings: Any, server: Callable[[Any], Server], log: logging.Logger,
        name: str = "-", quiet: Sequence[str] = (), tune_runtime: Optional[Callable[[], None]] = None) -> None:
    """The whole process: ``settings.load(config_path)`` (a :class:`magnetar.config.TomlSettings` class; its
    ConfigError goes to the caller), logging, then :func:`serve` of ``server(config)``.

    Args:
        log: the room's logger, which says where it starts from and that a signal came.
        name: the server's name in log lines until :func:`set_log_name` says otherwise.
        quiet: more loggers kept at WARNING.
    """
    config = settings.load(config_path)
    setup_logging(logging.DEBUG if os.environ.get("MAGNETAR_DEBUG") else logging.INFO, name=name, quiet=quiet)
    log.info("starting from %s (data_dir %s)", config_path, config.data_dir)
    try:
        asyncio.run(serve(lambda: server(config), log=log, tune_runtime=tune_runtime))
    except KeyboardInterrupt:
        pass
