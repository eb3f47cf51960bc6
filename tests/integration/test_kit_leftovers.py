"""What a killed test run leaves (network namespaces with servers inside, a FUSE mount and its server) is removed
by the next run's sweep; what a live run holds is not touched. Regression: a SIGKILLed pytest left its namespaces,
the processes in them and its FUSE mount behind for good."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clusters import netns
from clusters.runtime import start_ticks
from tests.kit import leftovers
from tests.kit.slow_disk import SlowDisk, fuse_available
from tests.kit.wait import wait_for


@pytest.fixture
def dead_owner() -> tuple[int, int]:
    """The pid and start time of a process that has ended (what a SIGKILLed pytest looks like afterwards)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    started = start_ticks(proc.pid)  # it runs until its stdin closes
    proc.stdin.close()
    proc.wait(timeout=30)
    assert started is not None
    return proc.pid, started


def _owned_by(record, pid: int, started: int) -> None:
    doc = json.loads(record.read_text())
    record.write_text(json.dumps({**doc, "owner": pid, "owner_started": started}))


def test_namespaces_of_a_dead_run_are_removed_with_their_processes_and_a_live_runs_are_kept(dead_owner) -> None:
    why_not = netns.available()
    assert not why_not, f"make test runs as root with iproute2: {why_not}"
    dead, live = netns.Wan.create(["a"]), netns.Wan.create(["a"])
    inside = None
    records = []
    try:
        records = [leftovers.record("netns", layout=w.layout.document()) for w in (dead, live)]
        _owned_by(records[0], *dead_owner)
        inside = subprocess.Popen([*dead.regions["a"].exec_prefix(), "sleep", "600"], start_new_session=True)
        wait_for(lambda: str(inside.pid) in subprocess.run(["ip", "netns", "pids", dead.regions["a"].netns],
                                                           capture_output=True, text=True).stdout,
                 10, what="the process inside the namespace")

        removed = leftovers.sweep()

        assert {f"namespace {n}" for n in dead.layout.namespaces()} <= set(removed)
        wait_for(lambda: inside.poll() is not None, 10, what="the process inside killed")
        assert netns.namespaces_with_prefix(dead.layout.prefix) == []
        assert not records[0].exists()
        assert set(netns.namespaces_with_prefix(live.layout.prefix)) == set(live.layout.namespaces())
        assert records[1].exists()  # its owner (this process) runs
    finally:
        if inside is not None and inside.poll() is None:
            inside.kill()
            inside.wait()
        for wan, record in zip((dead, live), records):
            wan.close()
            leftovers.forget(record)


def test_a_fuse_mount_of_a_dead_run_is_unmounted_and_its_server_killed(tmp_path, dead_owner) -> None:
    why_not = fuse_available()
    assert not why_not, f"make test installs fuse3 and runs as root: {why_not}"
    disk = SlowDisk(tmp_path / "mnt").start()
    try:
        assert disk._record is not None and disk._record.exists()
        _owned_by(disk._record, *dead_owner)

        assert f"mount {tmp_path / 'mnt'}" in leftovers.sweep()

        wait_for(lambda: not disk.process.alive, 10, what="the FUSE server killed")
        assert not leftovers.listed_as_mounted(tmp_path / "mnt")
        assert not disk._record.exists()
    finally:
        disk.stop()  # idempotent after the sweep
    assert not os.path.ismount(tmp_path / "mnt")
