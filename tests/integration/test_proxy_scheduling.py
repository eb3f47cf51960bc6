"""The proxy's event loop asks Linux for a short scheduler slice (:mod:`proxy.scheduling`): with the real kernel,
a thread gets the slice it asks for and the kernel's default back with 0, and a real proxy process's event-loop
thread runs with ``event_loop_slice_us``."""

from __future__ import annotations

import pathlib
import threading

import pytest

from proxy.scheduling import request_slice, slice_in_force_us
from tests.kit.proxies import start_proxy
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(120)


def _in_a_thread(fn):
    """``fn()`` run on a thread of its own (so this test process's threads keep their slices)."""
    result = []
    thread = threading.Thread(target=lambda: result.append(fn()))
    thread.start()
    thread.join()
    return result[0]


def _kernel_takes_slices() -> bool:
    """Linux 6.12+ shows ``se.slice`` and honours a requested one."""
    return _in_a_thread(lambda: (slice_in_force_us(), request_slice(100))[1] == 100)


needs_slices = pytest.mark.skipif(not _kernel_takes_slices(), reason="issue 14: the kernel has no per-task slices (Linux 6.12+)")


@needs_slices
def test_a_thread_gets_the_slice_it_asks_for_and_the_default_back_with_0() -> None:
    def ask() -> tuple:
        default = slice_in_force_us()
        short = request_slice(250)
        back = request_slice(0)
        return default, short, back

    default, short, back = _in_a_thread(ask)
    assert short == 250
    assert back == default and default != 250


def _slice_of_main_thread_us(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/task/{pid}/sched").read_text().splitlines():
        if line.startswith("se.slice"):
            return int(line.split()[-1]) // 1000
    raise AssertionError("no se.slice")


@needs_slices
def test_the_proxys_event_loop_runs_with_the_configured_slice(tmp_path, zk_connect) -> None:
    proxy = start_proxy(tmp_path, zk_connect, None, plain=True, event_loop_slice_us=300)
    try:
        pid = proxy.process.pid
        # The event loop is the main thread (asyncio.run); the slice is asked for once the proxy serves.
        assert wait_for(lambda: _slice_of_main_thread_us(pid) == 300, 10, what="a 300 µs slice on the loop thread")
    finally:
        proxy.terminate()
