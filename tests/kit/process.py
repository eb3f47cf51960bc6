"""A process started by a test: its own process group, its own log file, and faults on demand.

Every process the kit starts runs in a new session (so its process group holds it and anything it spawns),
logs stdout+stderr to one file, and is registered so the session's teardown kills whatever is left.
Faults are methods: ``kill()`` (SIGKILL the group), ``pause()`` / ``resume()`` (SIGSTOP / SIGCONT),
``terminate()`` (SIGTERM, then SIGKILL after a grace period), ``restart()`` (same command, same log file).

A test run that is itself killed (SIGKILL of pytest, CI timeout) runs no teardown; so a child started
from the main thread also asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``, set by
util-linux's ``setpriv --pdeathsig KILL`` in front of the command, when installed). Not from other threads:
the kernel ties that signal to the thread that forked, which may end long before the test does. Not with
``preexec_fn`` either: that forces a plain fork(), and in a test process running gRPC, gRPC's fork
handlers restart its poller threads in the child, which abort when the child closes its descriptors.
"""

from __future__ import annotations

import os
import pathlib
import signal
import shutil
import subprocess
import sys
import threading
import time
from typing import Callable, Optional, Sequence

_LIVE: "set[ManagedProcess]" = set()
_SETPRIV = shutil.which("setpriv")


def _dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` prefixed so that the child gets SIGKILL when its parent thread dies (see the docstring)."""
    if _SETPRIV is None or threading.current_thread() is not threading.main_thread():
        return argv
    return [_SETPRIV, "--pdeathsig", "KILL", *argv]


def python_command(*args: str) -> list[str]:
    """``python -m magnetar ARGS`` with the interpreter running the tests."""
    return [sys.executable, "-m", "magnetar", *args]


class ManagedProcess:
    """One child process under test control.

    Args:
        name: used in log lines and the log file name.
        argv: the command.
        log_path: stdout and stderr go here (appended across restarts, with a marker line).
        env: extra environment variables.
        health: a callable returning True once the process serves; ``start()`` waits on it.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: pathlib.Path,
        env: Optional[dict[str, str]] = None,
        health: Optional[Callable[[], bool]] = None,
        cwd: Optional[pathlib.Path] = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = pathlib.Path(log_path)
        self.env = env
        self.health = health
        self.cwd = cwd
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 30.0) -> "ManagedProcess":
        if self.alive:
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.env:
            env.update(self.env)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts + 1}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                _dying_with_parent(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.starts += 1
        _LIVE.add(self)
        if self.health is not None:
            self.wait_until(self.health, timeout_s=timeout_s, what="healthy")
        return self

    def wait_until(self, predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
        """Waits for ``predicate()``; fails fast (with the log tail) if the process exits meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before {what}:\n{self.log_tail()}")
            try:
                if predicate():
                    return
            except Exception:  # a health probe that raises means "not yet"
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} not {what} after {timeout_s:.0f} s:\n{self.log_tail()}")

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    # -- faults ----------------------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the whole process group and reap it."""
        if self.proc is None:
            return
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGKILL)
        self.proc.wait()

    def pause(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def terminate(self, *, grace_s: float = 10.0) -> Optional[int]:
        """SIGTERM the group, SIGKILL after ``grace_s``; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal_group(signal.SIGCONT)
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait()
        # Anything the process spawned into its group goes too.
        self._signal_group(signal.SIGKILL)
        return self.proc.returncode

    def restart(self, *, kill: bool = True, timeout_s: float = 30.0) -> "ManagedProcess":
        if kill:
            self.kill()
        else:
            self.terminate()
        return self.start(timeout_s=timeout_s)

    def cleanup(self) -> None:
        if self.proc is not None:
            self._signal_group(signal.SIGCONT)
            self._signal_group(signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        _LIVE.discard(self)

    # -- logs ------------------------------------------------------------------------------------------

    def log_tail(self, n_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except FileNotFoundError:
            return "(no log)"
        return data[-n_bytes:].decode(errors="replace")


def live_processes() -> list[ManagedProcess]:
    return list(_LIVE)


def kill_all() -> None:
    for proc in list(_LIVE):
        proc.cleanup()
