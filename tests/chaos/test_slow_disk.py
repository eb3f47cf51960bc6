"""A bookie's disk made slow (issue 18): one bookie's data folder on a FUSE mount whose fsyncs wait 200 ms.

Real bookie and broker processes, a real ZooKeeper, pulsar-client as the application, and
:class:`tests.kit.slow_disk.SlowDisk` as the fault (checked first on its own: files pass through, fsyncs take
at least the delay, a stall holds them, stopping it with a writer blocked leaves no mount and no hang). A
synchronous producer sends while the fault holds.

* E/Qw/Qa 3/3/2: every entry goes to all three bookies and is acknowledged by the first two. With one
  bookie's fsyncs 200 ms long, a publish waits 200 ms only if *both* other bookies are that late, which
  only a stall of the machine itself causes: so few publishes (under a fifth; normally none) may take as long
  as the injected delay, while the slow bookie's own journal shows every fsync taking it. A stalled disk
  (fsyncs blocked until released) stops no publish either, and the slow bookie catches up once released.
* E/Qw/Qa 2/2/2: both bookies must acknowledge, and every entry sent after the fault is set needs an fsync
  of the slow journal that starts after it, so *every* publish takes at least the injected delay, structurally,
  whatever the load. A stalled disk holds a publish until released. After ``normal()`` the delay is gone.

In both, every message reads back once, in order. Cleanup (finalizers, also on failure): client, broker and
bookies killed first, then the FUSE process and its mount.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import sys
import threading
import time

import pulsar
import pytest

from tests.kit.bookies import BookieProcess
from tests.kit.brokers import start_brokers
from tests.kit.exposition import samples, scrape
from tests.kit.slow_disk import SlowDisk, SlowDiskError, fuse_available
from tests.kit.wait import wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

DELAY_MS = 200
DELAY_S = DELAY_MS / 1000.0
FAULT_SECONDS = 3.0       # (3/3/2) how long publishes run against the slow bookie
FAULT_PUBLISHES_MAX = 2000
SLOW_SHARE_MAX = 0.2      # (3/3/2) at most this share of publishes may take the injected delay or longer


@pytest.fixture
def cleanup():
    """An ExitStack unwound after the test, last pushed first: push the disk first so it is unmounted last."""
    with contextlib.ExitStack() as stack:
        yield stack


def _fuse_ready() -> None:
    why_not = fuse_available()
    assert why_not is None, f"the slow-disk fault needs FUSE (make test runs as root, scripts/ensure-fuse): {why_not}"


def _deploy(tmp_path: pathlib.Path, zk_connect: str, cleanup: contextlib.ExitStack, *, bookies: int,
            quorum: tuple[int, int, int]) -> tuple[SlowDisk, BookieProcess, list[BookieProcess], pulsar.Client]:
    """``bookies`` bookies, the last one's data folder on a slow disk; one broker with ``quorum``."""
    _fuse_ready()
    disk = SlowDisk(tmp_path / "slow-disk")
    cleanup.callback(disk.stop)
    disk.start()
    base = tmp_path / "bookies"
    fast = [BookieProcess(f"bookie-{i}", base, zk_connect) for i in range(1, bookies)]
    slow = BookieProcess(f"bookie-{bookies}", base, zk_connect, data_dir=disk.mount)
    for b in (*fast, slow):
        cleanup.callback(b.process.cleanup)
        b.start(wait=False)
    for b in (*fast, slow):
        b.wait_healthy(timeout_s=60)
    e, qw, qa = quorum
    (broker,) = start_brokers(1, tmp_path, zk_connect, managed_ledger_ensemble_size=e,
                              managed_ledger_write_quorum=qw, managed_ledger_ack_quorum=qa)
    cleanup.callback(broker.process.cleanup)
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
    cleanup.callback(client.close)
    cleanup.callback(broker.process.cleanup)  # before: a client closing with sends pending waits for them
    # First of all: a process blocked in an fsync the FUSE process has taken cannot die until it is answered.
    cleanup.callback(disk.unblock)
    return disk, slow, fast, client


def _send_timed(producer, payloads: list[bytes]) -> list[float]:
    latencies = []
    for payload in payloads:
        started = time.monotonic()
        producer.send(payload)
        latencies.append(time.monotonic() - started)
    return latencies


def _send_for(producer, seconds: float, first: int) -> tuple[list[bytes], list[float]]:
    """Synchronous sends for ``seconds`` (at most FAULT_PUBLISHES_MAX); returns payloads and latencies."""
    payloads, latencies = [], []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(payloads) < FAULT_PUBLISHES_MAX:
        payload = f"m{first + len(payloads)}".encode()
        latencies += _send_timed(producer, [payload])
        payloads.append(payload)
    return payloads, latencies


def _read_all(client: pulsar.Client, topic: str, expected: list[bytes]) -> None:
    """Every message once, in order, and nothing after."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        got = [reader.read_next(timeout_millis=30_000).data() for _ in expected]
        assert got == expected
        assert not reader.has_message_available(), "more messages than were acknowledged"
    finally:
        reader.close()


def _bookie_metric(bookie: BookieProcess, name: str, **labels: str) -> float:
    parsed = samples(scrape(bookie.metrics_url))
    return parsed[(name, frozenset({"bookie": bookie.bookie_id, **labels}.items()))]


def _slow_fsyncs(bookie: BookieProcess) -> float:
    """Journal fsyncs this bookie itself measured longer than 0.1 s (the histogram bucket below 0.2 s)."""
    name = "magnetar_bookie_journal_stage_seconds"
    total = _bookie_metric(bookie, name + "_count", stage="fsync")
    fast = _bookie_metric(bookie, name + "_bucket", stage="fsync", le="0.1")
    return total - fast


def _share_at_least(latencies: list[float], seconds: float) -> float:
    return sum(1 for s in latencies if s >= seconds) / len(latencies)


def _summary(latencies: list[float]) -> str:
    ordered = sorted(latencies)
    return (f"{len(ordered)} publishes, p50 {ordered[len(ordered) // 2] * 1000:.0f} ms, "
            f"p99 {ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000:.0f} ms, "
            f"max {ordered[-1] * 1000:.0f} ms, {_share_at_least(latencies, DELAY_S):.1%} >= {DELAY_MS} ms")


def test_the_mount_passes_files_through_delays_and_stalls_fsyncs_and_unmounts_with_a_writer_blocked(tmp_path):
    """The fault itself: files land in the backing folder, fsyncs take at least the delay, a stall holds an
    fsync until released, a bad command changes nothing, and stop() leaves no mount and no process even with
    a writer blocked in a stalled fsync (it gets an error, it does not hang)."""
    _fuse_ready()
    disk = SlowDisk(tmp_path / "disk")
    try:
        disk.start()
        (disk.mount / "sub").mkdir()
        target = disk.mount / "sub" / "f"
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"x" * 5000)
            disk.slow(fsync_ms=DELAY_MS)
            started = time.monotonic()
            os.fdatasync(fd)
            assert time.monotonic() - started >= DELAY_S
        finally:
            os.close(fd)
        os.rename(target, disk.mount / "sub" / "g")
        assert (disk.backing / "sub" / "g").read_bytes() == b"x" * 5000
        assert disk.stats()["fsyncs_delayed"] >= 1

        with pytest.raises(SlowDiskError, match="between 0 and"):
            disk.slow(fsync_ms=-1)
        with pytest.raises(SlowDiskError, match="unknown command"):
            disk._command({"cmd": "explode"})
        assert disk.stats()["fsync_delay_ms"] == DELAY_MS

        disk.stall()
        fsync_done = threading.Event()

        def fsync_on_mount():
            fd = os.open(disk.mount / "sub" / "g", os.O_WRONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_done.set()

        thread = threading.Thread(target=fsync_on_mount, daemon=True)
        thread.start()
        wait_for(lambda: disk.stats()["fsyncs_blocked_now"] == 1, 10, what="the fsync blocked")
        assert not fsync_done.is_set()
        disk.release()
        assert fsync_done.wait(10), "the fsync did not return once released"
        disk.normal()

        # A writer blocked in a stalled fsync when the disk is stopped gets an error and ends.
        disk.stall()
        writer = subprocess.Popen([sys.executable, "-c", "import os,sys; fd = os.open(sys.argv[1], os.O_WRONLY); "
                                   "os.fsync(fd)", str(disk.mount / "sub" / "g")], stderr=subprocess.PIPE)
        try:
            wait_for(lambda: disk.stats()["fsyncs_blocked_now"] == 1, 10, what="the writer's fsync blocked")
            disk.stop()
            assert writer.wait(timeout=10) != 0
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
    finally:
        disk.stop()
    assert not os.path.ismount(disk.mount)
    assert str(disk.mount) not in pathlib.Path("/proc/self/mounts").read_text()
    assert not disk.process.alive


def test_one_slow_disk_of_three_does_not_slow_publishes_with_ack_quorum_two(tmp_path, zk_connect, cleanup):
    disk, slow, fast, client = _deploy(tmp_path, zk_connect, cleanup, bookies=3, quorum=(3, 3, 2))
    topic = "persistent://public/default/slow-disk-3-3-2"
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
    sent = [f"m{i}".encode() for i in range(20)]
    _send_timed(producer, sent)  # the ledger is open on all three bookies

    slow_fsyncs_before = _slow_fsyncs(slow)
    delayed_before = disk.slow(fsync_ms=DELAY_MS)["fsyncs_delayed"]
    payloads, latencies = _send_for(producer, FAULT_SECONDS, first=len(sent))
    sent += payloads
    delayed = disk.stats()["fsyncs_delayed"] - delayed_before
    slow_fsyncs = _slow_fsyncs(slow) - slow_fsyncs_before
    print(f"3/3/2, one bookie's fsyncs {DELAY_MS} ms: {_summary(latencies)}; "
          f"{delayed} fsyncs delayed, {slow_fsyncs:.0f} journal fsyncs > 100 ms on {slow.bookie_id}")
    # The fault was met, and met by the bookie's journal (its own histogram shows the delay)...
    assert delayed >= FAULT_SECONDS / DELAY_S / 2, f"only {delayed} fsyncs delayed: the slow bookie was hardly written"
    assert slow_fsyncs >= FAULT_SECONDS / DELAY_S / 2, f"the slow bookie measured only {slow_fsyncs} slow fsyncs"
    # ...yet publishes did not wait for it: acknowledged by the other two.
    assert _share_at_least(latencies, DELAY_S) < SLOW_SHARE_MAX, _summary(latencies)

    # A disk that stops answering: fsyncs block until released; publishes still go on.
    disk.stall()
    stalled_payloads = [f"m{len(sent) + i}".encode() for i in range(20)]
    _send_timed(producer, stalled_payloads)
    sent += stalled_payloads
    wait_for(lambda: disk.stats()["fsyncs_blocked_now"] >= 1, 10, what="an fsync blocked on the stalled disk")
    assert disk.stats()["stalled"]
    disk.normal()

    after = [f"m{len(sent) + i}".encode() for i in range(20)]
    _send_timed(producer, after)
    sent += after
    _read_all(client, topic, sent)
    # The slow bookie holds every entry too once its disk is back (E = Qw = 3: every bookie gets every entry).
    wait_for(lambda: _bookie_metric(slow, "magnetar_bookie_add_entries_total")
             == _bookie_metric(fast[0], "magnetar_bookie_add_entries_total") >= len(sent),
             30, what="the slow bookie caught up")


def test_a_slow_disk_in_a_quorum_of_two_makes_every_publish_wait_and_loses_nothing(tmp_path, zk_connect, cleanup):
    disk, slow, fast, client = _deploy(tmp_path, zk_connect, cleanup, bookies=2, quorum=(2, 2, 2))
    topic = "persistent://public/default/slow-disk-2-2-2"
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=30_000)
    sent = [f"m{i}".encode() for i in range(20)]
    _send_timed(producer, sent)

    disk.slow(fsync_ms=DELAY_MS)
    slow_payloads = [f"m{len(sent) + i}".encode() for i in range(15)]
    latencies = _send_timed(producer, slow_payloads)
    sent += slow_payloads
    print(f"2/2/2, one bookie's fsyncs {DELAY_MS} ms: {_summary(latencies)}")
    # Every entry sent after slow() needs a journal fsync of the slow bookie that starts after it.
    assert min(latencies) >= DELAY_S, _summary(latencies)

    # A stalled disk holds the publish until released.
    disk.stall()
    acked = threading.Event()
    results = []

    def on_sent(result, _msg_id):
        results.append(result)
        acked.set()

    payload = f"m{len(sent)}".encode()
    producer.send_async(payload, on_sent)
    sent.append(payload)
    wait_for(lambda: disk.stats()["fsyncs_blocked_now"] >= 1, 10, what="an fsync blocked on the stalled disk")
    assert not acked.is_set(), "acknowledged while the bookie's journal could not sync"
    disk.release()
    assert acked.wait(30) and results == [pulsar.Result.Ok]

    disk.normal()
    normal_payloads = [f"m{len(sent) + i}".encode() for i in range(20)]
    recovered = _send_timed(producer, normal_payloads)
    sent += normal_payloads
    print(f"2/2/2 after normal(): {_summary(recovered)}")
    assert _share_at_least(recovered, DELAY_S) < SLOW_SHARE_MAX, _summary(recovered)
    _read_all(client, topic, sent)
