"""Regression: servers a test run starts must not outlive a pytest process that is killed outright."""

import os
import signal
import subprocess
import sys
import textwrap

from tests.kit.wait import wait_for


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_children_die_when_the_test_process_is_sigkilled(tmp_path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(f"""
        import pathlib, sys, time
        sys.path.insert(0, {os.getcwd()!r})
        from tests.kit.process import ManagedProcess
        p = ManagedProcess("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"],
                           log_path=pathlib.Path({str(tmp_path)!r}) / "sleeper.log")
        p.start()
        print(p.pid, flush=True)
        time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    try:
        assert _alive(child_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_for(lambda: not _alive(child_pid), 10, what="the orphaned child to die with its parent")
    finally:
        parent.kill()
        parent.wait()
        if _alive(child_pid):
            os.killpg(child_pid, signal.SIGKILL)  # its own group (start_new_session): only what we started
