"""A real bookie process exports BookKeeper's series (as Pulsar's metric reference names them) beside its
``magnetar_bookie_*`` ones; they move with real traffic over gRPC, a read-only bookie says so, and the real
``promtool check metrics`` finds nothing wrong with the exposition."""

from __future__ import annotations

import math

import grpc
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from bookie.bookkeeper_metrics import ledger_dir_usage_name
from magnetar.proto import bookie_pb2 as pb
from tests.integration.test_bookie_process import Client, add_request, payload
from tests.kit.exposition import promtool_check_metrics, samples, scrape, value
from tests.kit.wait import wait_for_async

S = pb.Status

OP_STATS = ("bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY",
            "bookkeeper_server_READ_ENTRY_REQUEST", "bookkeeper_server_READ_ENTRY", "bookie_journal_JOURNAL_SYNC")
SINGLE = ("bookie_SERVER_STATUS", "bookie_WRITE_BYTES", "bookie_READ_BYTES", "bookie_ledgers_count",
          "bookie_entries_count", "bookie_write_cache_size", "bookie_journal_JOURNAL_QUEUE_SIZE",
          "bookie_ledger_writable_dirs")


def assert_clean_exposition(url: str) -> dict:
    """promtool finds no error or lint problem in the text format, the OpenMetrics form (what Prometheus
    scrapes) parses, and both carry the same BookKeeper names; returns the parsed text-format samples."""
    text = scrape(url)
    code, output = promtool_check_metrics(text)
    assert code == 0 and output == "", f"promtool check metrics exited {code}:\n{output}"
    families = {f.name: f for f in parse_openmetrics(scrape(url, openmetrics=True))}
    for name in (*OP_STATS, *SINGLE):
        assert name in families and families[name].samples, f"{name} missing from the OpenMetrics exposition"
    for name in OP_STATS:
        assert families[name].type == "summary"
    assert families["bookie_WRITE_BYTES"].type == "unknown"  # exact name kept: a counter would gain _total
    return samples(text)


def op_count(parsed, name: str, success: bool) -> float:
    return value(parsed, f"{name}_count", success="true" if success else "false")


async def test_bookkeeper_series_move_with_real_traffic(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="", flush_interval_ms=200)
    before = assert_clean_exposition(bookie.metrics_url)
    assert value(before, "bookie_WRITE_BYTES") == 0
    assert value(before, "bookie_SERVER_STATUS") == 1
    assert value(before, "bookie_ledger_writable_dirs") == 1
    for name in OP_STATS:  # both outcomes are present from the start, as BookKeeper writes them
        for outcome in ("true", "false"):
            assert value(before, f"{name}_count", success=outcome) == 0
            assert math.isnan(value(before, name, success=outcome, quantile="0.99"))

    client = Client(bookie.address)
    try:
        entries = [(61, e, payload(61, e, 700)) for e in range(30)] + [(62, e, payload(62, e, 300)) for e in range(20)]
        requests = [add_request(i + 1, entries[i * 5:(i + 1) * 5]) for i in range(10)]
        answers = await client.add(requests)
        assert [a.status for a in answers] == [S.OK] * 10
        written = sum(len(p) for _, _, p in entries)
        got = await client.read(61, first=0, last=29)
        assert all(status == S.OK for status, _ in got.values()) and len(got) == 30
        read = sum(len(p) for _, p in got.values())
        # Failures: an add to a fenced ledger (FENCED) and a read the bookie refuses (INVALID_ARGUMENT).
        await client.fence(62)
        (refused,) = await client.add([add_request(99, [(62, 20, b"late")])])
        assert refused.status == S.FENCED
        with pytest.raises(grpc.aio.AioRpcError) as invalid:
            await client.read(61, first=5, last=1)
        assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await client.close()

    # The index count moves once the write cache is flushed (every 200 ms here).
    async def flushed():
        parsed = samples(scrape(bookie.metrics_url))
        return parsed if value(parsed, "bookie_entries_count") == 50 else None

    after = await wait_for_async(flushed, 30, what="bookie_entries_count == 50 after a flush")
    assert value(after, "bookie_WRITE_BYTES") == written
    assert value(after, "bookie_READ_BYTES") == read
    assert value(after, "bookie_ledgers_count") == 2
    for name in ("bookkeeper_server_ADD_ENTRY_REQUEST", "bookkeeper_server_ADD_ENTRY"):
        assert op_count(after, name, True) == 10 and op_count(after, name, False) == 1
        assert value(after, f"{name}_sum", success="true") > 0
        p99 = value(after, name, success="true", quantile="0.99")
        assert 0 < p99 <= value(after, name, success="true", quantile="1.0")
    for name in ("bookkeeper_server_READ_ENTRY_REQUEST", "bookkeeper_server_READ_ENTRY"):
        assert op_count(after, name, True) == 1 and op_count(after, name, False) == 1
    # Every OK add waited for a journal sync; a fence too. Group commit shares syncs, so at most one per record.
    syncs = op_count(after, "bookie_journal_JOURNAL_SYNC", True)
    assert 1 <= syncs <= 11
    assert op_count(after, "bookie_journal_JOURNAL_SYNC", False) == 0
    assert value(after, "bookie_journal_JOURNAL_SYNC", success="true", quantile="0.5") > 0
    # The same measurement as magnetar_bookie_journal_sync_latency_seconds, in milliseconds.
    histogram = value(after, "magnetar_bookie_journal_sync_latency_seconds_count", bookie=bookie.bookie_id)
    assert syncs == histogram
    assert value(after, "bookie_journal_JOURNAL_QUEUE_SIZE") == 0  # nothing waits once every add is answered
    usage = value(after, ledger_dir_usage_name(str(bookie.data_dir / "ledgers")))
    assert 0 < usage <= 100
    assert assert_clean_exposition(bookie.metrics_url)  # with samples in every series, still clean


async def test_a_read_only_bookie_reports_server_status_0(bookie_factory):
    # A free-space floor no disk reaches: the bookie is read-only from its first disk check.
    (bookie,) = bookie_factory(1, zookeeper="", disk_free_min_bytes=1 << 62, disk_free_resume_bytes=1 << 62)
    client = Client(bookie.address)
    try:
        (answer,) = await client.add([add_request(1, [(71, 0, b"refused")])])
        assert answer.status == S.READ_ONLY
        assert (await client.info()).read_only
    finally:
        await client.close()
    parsed = assert_clean_exposition(bookie.metrics_url)
    assert value(parsed, "bookie_SERVER_STATUS") == 0
    assert value(parsed, "bookie_ledger_writable_dirs") == 0
    assert value(parsed, "magnetar_bookie_read_only", bookie=bookie.bookie_id) == 1
    assert op_count(parsed, "bookkeeper_server_ADD_ENTRY_REQUEST", False) == 1
    assert op_count(parsed, "bookkeeper_server_ADD_ENTRY_REQUEST", True) == 0
    assert value(parsed, "bookie_WRITE_BYTES") == 0
