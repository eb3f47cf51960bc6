"""What the supervisor, ``down`` and ``status`` share: the files of a data dir and safe process signalling.

A data dir holds::

    state.json       the supervisor's record: its pid, every process (pid, start time, state, exit code)
    topology.json    every endpoint, written once everything is healthy
    ports.json       the ports chosen at the first `up`, reused by later ones
    supervisor.lock  flock-ed by the live supervisor for its whole life
    logs/            <process name>.log and supervisor.log
    security/        a secured topology's CA, certificates, token key and tokens (``clusters.security``)
    <process name>/  each process's data

Pids are only ever signalled together with the start time recorded for them (``/proc/<pid>/stat`` field
22, in clock ticks since boot): a pid whose start time differs belongs to a stranger that reused it, and
is left alone. Every child runs in its own session, so its pid is also its process group id; Linux does
not reuse a pid while a process group of that id has members, which makes signalling the group of a dead
leader safe (see :func:`signal_group`).
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import pathlib
import signal
import time
from typing import Any, Iterable, Optional

from magnetar.errors import ConfigError

STATE_VERSION = 1


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


# -- process identity ---------------------------------------------------------------------------------------


def _stat_fields(pid: int) -> Optional[list[bytes]]:
    """Fields 3.. of /proc/<pid>/stat (state first), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may itself contain ')' or spaces.
    return data[data.rindex(b")") + 2 :].split()


def start_ticks(pid: int) -> Optional[int]:
    """The start time of live process ``pid`` in clock ticks since boot; None if it is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def is_alive(pid: Optional[int], ticks: Optional[int]) -> bool:
    """True when ``pid`` runs and is the very process that started at ``ticks``."""
    return bool(pid) and ticks is not None and start_ticks(pid) == ticks


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            # fields[0] is the state, fields[2] the process group (field 5).
            if fields is not None and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def group_is_ours(pid: int, ticks: Optional[int]) -> bool:
    """Whether process group ``pid`` may be signalled as the group of the process recorded as (pid, ticks).

    Yes when its leader still runs with the recorded start time, or when no live process has pid ``pid``
    at all (the leader died; members of its group, if any, are ours because the pid cannot have been
    reused while they exist). No when ``pid`` now belongs to a process that started at another time.
    """
    current = start_ticks(pid)
    return current is None or current == ticks


def group_alive(pid: Optional[int], ticks: Optional[int]) -> bool:
    """True while the recorded process or anything left in its process group runs."""
    if not pid:
        return False
    if is_alive(pid, ticks):
        return True
    return group_is_ours(pid, ticks) and bool(_group_members(pid))


def signal_group(pid: Optional[int], ticks: Optional[int], sig: int) -> bool:
    """Sends ``sig`` to the process group of the recorded process, if that group is still ours."""
    if not pid or not group_is_ours(pid, ticks):
        return False
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_groups(procs: Iterable[tuple[int, Optional[int]]], *, grace_s: float, poll=None) -> None:
    """SIGTERM every (pid, ticks) group at once, SIGKILL what is left after ``grace_s``, wait until gone.

    ``poll`` (optional) is called on every round, e.g. to reap children so they do not linger as zombies.
    """
    procs = [(pid, ticks) for pid, ticks in procs if group_alive(pid, ticks)]
    for pid, ticks in procs:
        signal_group(pid, ticks, signal.SIGCONT)  # a paused process cannot act on SIGTERM
        signal_group(pid, ticks, signal.SIGTERM)
    for sig, wait_s in ((signal.SIGKILL, grace_s), (None, 10.0)):
        deadline = time.monotonic() + wait_s
        while True:
            if poll is not None:
                poll()
            left = [(pid, ticks) for pid, ticks in procs if group_alive(pid, ticks)]
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if sig is not None:
            for pid, ticks in left:
                signal_group(pid, ticks, sig)


def describe_exit(code: Optional[int]) -> str:
    """'code 1', or 'code -9 (SIGKILL)' for a process killed by a signal (Popen's convention)."""
    if code is None:
        return "an unknown code"
    if code < 0:
        try:
            return f"code {code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"code {code} (signal {-code})"
    return f"code {code}"


def signal_name(code: Optional[int]) -> Optional[str]:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# -- the data dir -------------------------------------------------------------------------------------------


class DataDir:
    """The files of one deployment's data dir (paths are absolute)."""

    def __init__(self, root: pathlib.Path | str) -> None:
        self.root = pathlib.Path(root).expanduser().resolve()
        self.state_path = self.root / "state.json"
        self.topology_path = self.root / "topology.json"
        self.ports_path = self.root / "ports.json"
        self.lock_path = self.root / "supervisor.lock"
        self.logs = self.root / "logs"
        self.supervisor_log = self.logs / "supervisor.log"

    def prepare(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)

    def read_state(self) -> Optional[dict[str, Any]]:
        return self._read_json(self.state_path)

    def write_state(self, state: dict[str, Any]) -> None:
        write_json_atomically(self.state_path, state)

    def read_ports(self) -> dict[str, dict[str, int]]:
        return self._read_json(self.ports_path) or {}

    def write_ports(self, ports: dict[str, dict[str, int]]) -> None:
        write_json_atomically(self.ports_path, ports)

    def _read_json(self, path: pathlib.Path) -> Optional[Any]:
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise ConfigError(f"{path}: unreadable ({err}); remove it if nothing of this deployment runs") from None

    def try_lock(self) -> Optional[int]:
        """Takes the supervisor lock; returns its fd (keep it open while supervising) or None if held.

        The kernel drops the lock when the holder dies, however it dies.
        """
        self.prepare()
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def lock_is_held(self) -> bool:
        if not self.lock_path.exists():
            return False
        fd = self.try_lock()
        if fd is None:
            return True
        os.close(fd)
        return False

    def log_tail(self, path: pathlib.Path | str, n_lines: int = 40) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                lines = f.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return f"({path} does not exist)"
        return "\n".join(lines[-n_lines:])


def write_json_atomically(path: pathlib.Path, document: Any) -> None:
    """Readers see the old file or the new one, never a part: write a temporary file, fsync, rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(document, f, indent=2, sort_keys=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
