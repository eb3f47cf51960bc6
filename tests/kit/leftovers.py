"""What a killed test run would leave behind, recorded while it exists and removed by the next run.

Network namespaces (with the servers running inside them) and FUSE mounts outlive a test process that is
SIGKILLed before its cleanup runs: every process the kit starts has a session of its own, so nothing takes them
down with it. So the kit records each one while it exists, in a small JSON file under :data:`RECORDS` naming the
recording process (its pid and start time, so a reused pid is not mistaken for it), and forgets it on cleanup.
:func:`sweep` (called when a test session starts) removes whatever a process that no longer runs recorded:
it SIGKILLs the processes inside such namespaces and deletes them (their veths and routes go with them), and
kills such a FUSE server and unmounts its mount lazily. Records of live processes (another test run on the
machine) are left alone, and nothing the kit did not record is touched.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import uuid
from typing import Any, Optional

from clusters import netns
from clusters.runtime import is_alive, signal_group, start_ticks

RECORDS = pathlib.Path(tempfile.gettempdir()) / f"magnetar-kit-leftovers-{os.getuid()}"


def record(kind: str, **facts: Any) -> pathlib.Path:
    """Records something of ``kind`` (``netns`` or ``fuse``) made by this process; returns the record to forget."""
    RECORDS.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    path = RECORDS / f"{kind}-{pid}-{uuid.uuid4().hex[:8]}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"kind": kind, "owner": pid, "owner_started": start_ticks(pid), **facts}))
    tmp.replace(path)
    return path


def forget(path: Optional[pathlib.Path]) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def sweep() -> list[str]:
    """Removes what dead processes recorded; returns what was removed (for the session's log)."""
    removed: list[str] = []
    if not RECORDS.is_dir():
        return removed
    for path in sorted(RECORDS.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written, or already swept by a parallel worker
        if is_alive(int(doc.get("owner", 0)), doc.get("owner_started")):
            continue
        if doc.get("kind") == "netns":
            removed += _remove_namespaces(doc)
        elif doc.get("kind") == "fuse":
            removed += _remove_mount(doc)
        path.unlink(missing_ok=True)
    return removed


def _remove_namespaces(doc: dict[str, Any]) -> list[str]:
    layout = netns.Layout.from_document(doc["layout"])
    names = netns.namespaces_with_prefix(layout.prefix)
    for name in names:  # the servers the dead run started in there: nothing else runs in its namespaces
        out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout
        for pid in out.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    netns.remove(layout)
    return [f"namespace {name}" for name in names]


def _remove_mount(doc: dict[str, Any]) -> list[str]:
    # The kit starts the FUSE server in a session (and group) of its own.
    signal_group(int(doc.get("server", 0)), doc.get("server_started"), signal.SIGKILL)
    mount = str(doc["mount"])
    if listed_as_mounted(mount):
        for argv in (["fusermount3", "-u", "-z", mount], ["umount", "-l", mount]):
            if shutil.which(argv[0]) and subprocess.run(argv, capture_output=True).returncode == 0:
                break
        return [f"mount {mount}"]
    return []


def listed_as_mounted(path: "os.PathLike[str] | str") -> bool:
    """A FUSE mount whose server died fails ``stat`` (ENOTCONN), so ``os.path.ismount`` says False: ask
    the kernel's mount table instead."""
    target = os.path.abspath(path)
    try:
        with open("/proc/self/mounts") as mounts:
            return any(line.split()[1] == target for line in mounts)
    except OSError:
        return False
