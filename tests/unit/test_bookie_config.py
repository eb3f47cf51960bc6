"""Bookie settings from TOML, the error-status mapping, the disk hysteresis rule, the metrics endpoint."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from bookie import errors
from bookie.config import BookieConfig
from bookie.disk import next_read_only
from magnetar.errors import ConfigError, MagnetarError
from magnetar.proto import bookie_pb2
from observability import serve_metrics


def test_load_full_config(tmp_path):
    path = tmp_path / "bookie.toml"
    path.write_text(
        'bookie_id = "bookie-1"\nbind_host = "127.0.0.1"\nport = 0\nhttp_port = 0\nadvertised_host = "127.0.0.1"\n'
        'data_dir = "data"\nzookeeper = "127.0.0.1:2181/r"\njournal_sync = true\n'
        "journal_max_size_bytes = 268435456\nwrite_cache_max_bytes = 67108864\nflush_interval_ms = 1000\n"
        "entry_log_max_size_bytes = 268435456\nentry_max_size_bytes = 5243904\n"
        "disk_free_min_bytes = 1073741824\ndisk_free_resume_bytes = 2147483648\ndisk_check_interval_ms = 1000\n"
        "gc_interval_ms = 10000\nzk_session_timeout_ms = 10000\n"
    )
    config = BookieConfig.load(path)
    assert config.data_dir == tmp_path / "data"
    assert config.journal_dir == tmp_path / "data" / "journal"
    assert config.zookeeper == "127.0.0.1:2181/r"
    assert config.effective_bookie_id(1234) == "bookie-1"


def test_defaults_and_default_id(tmp_path):
    config = BookieConfig.from_mapping({"data_dir": str(tmp_path)})
    assert config.journal_sync is True
    assert config.entry_max_size_bytes == 5243904
    assert config.effective_bookie_id(3181) == "127.0.0.1:3181"


@pytest.mark.parametrize(
    "values, fragment",
    [
        ({}, "data_dir is required"),
        ({"data_dir": "/x", "prot": 1}, "unknown bookie setting(s) prot"),
        ({"data_dir": "/x", "port": "3181"}, "port must be an integer"),
        ({"data_dir": "/x", "journal_sync": 1}, "journal_sync must be true or false"),
        ({"data_dir": "/x", "port": True}, "port must be an integer"),
        ({"data_dir": "/x", "port": 70000}, "port must be in 0..65535"),
        ({"data_dir": "/x", "flush_interval_ms": 0}, "flush_interval_ms must be positive"),
        ({"data_dir": "/x", "disk_free_min_bytes": 10, "disk_free_resume_bytes": 5}, "disk_free_resume_bytes"),
        ({"data_dir": "/x", "entry_max_size_bytes": 100 << 20}, "entry_max_size_bytes"),
        ({"data_dir": "/x", "entry_log_write_bytes": 5000}, "entry_log_write_bytes must be a positive multiple"),
        ({"data_dir": "/x", "flush_yield_max_ms": -1}, "flush_yield_max_ms must not be negative"),
        ({"data_dir": "/x", "file_removal_step_bytes": -1}, "file_removal_step_bytes must not be negative"),
    ],
)
def test_bad_settings_name_the_problem(values, fragment):
    with pytest.raises(ConfigError) as info:
        BookieConfig.from_mapping(values)
    assert fragment in str(info.value)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        BookieConfig.load(tmp_path / "missing.toml")
    (tmp_path / "bad.toml").write_text("port = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        BookieConfig.load(tmp_path / "bad.toml")


def test_status_to_error():
    S = bookie_pb2.Status
    cases = {
        S.INVALID_ARGUMENT: errors.InvalidRequestError, S.FENCED: errors.LedgerFencedError,
        S.READ_ONLY: errors.BookieReadOnlyError, S.NO_SUCH_ENTRY: errors.NoSuchEntryError,
        S.NO_SUCH_LEDGER: errors.NoSuchLedgerError, S.ENTRY_CONFLICT: errors.EntryConflictError,
        S.TOO_LARGE: errors.EntryTooLargeError, S.INTERNAL: errors.BookieInternalError,
        S.UNAVAILABLE: errors.BookieUnavailableError,
    }
    for status, cls in cases.items():
        err = errors.status_to_error(status, "why")
        assert type(err) is cls and err.status == status and str(err) == "why"
        assert isinstance(err, errors.BookieError) and isinstance(err, MagnetarError)
    assert errors.status_to_error(S.READ_ONLY, "x").retriable
    assert errors.status_to_error(S.UNAVAILABLE, "x").retriable
    assert not errors.status_to_error(S.FENCED, "x").retriable
    partial = errors.status_to_error(S.PARTIAL, "mixed")
    assert type(partial) is errors.BookieError and partial.status == S.PARTIAL


def test_disk_hysteresis():
    rule = lambda ro, free: next_read_only(ro, free, min_bytes=100, resume_bytes=200)  # noqa: E731
    assert rule(False, 150) is False
    assert rule(False, 99) is True
    assert rule(True, 150) is True  # between the thresholds: stays as it is
    assert rule(True, 200) is True
    assert rule(True, 201) is False


def test_metrics_endpoint():
    registry = CollectorRegistry()
    Counter("magnetar_test_things_total", "things", registry=registry).inc(3)
    state = {"ok": True}
    with serve_metrics(registry, "127.0.0.1", 0, health=lambda: (state["ok"], "reason")) as server:
        assert server.port > 0
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5).read().decode()
        assert "magnetar_test_things_total 3.0" in body
        assert urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5).status == 200
        state["ok"] = False
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=5)
        assert info.value.code == 503
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=5)
        assert info.value.code == 404
    server.close()  # idempotent


def test_default_keepalive_of_clients_is_what_bookies_permit(tmp_path):
    """Ledger clients ping every keepalive interval, with or without calls in flight; a bookie must accept
    that (gRPC answers pings sooner than it allows with GOAWAY too_many_pings)."""
    from bookie.client import LedgerClientConfig
    from bookie.client.bookie_client import channel_options
    from bookie.server import server_options

    client_config = LedgerClientConfig()
    client = dict(channel_options(keepalive_interval_ms=client_config.keepalive_interval_ms,
                                  keepalive_timeout_ms=client_config.keepalive_timeout_ms))
    server = dict(server_options(BookieConfig.from_mapping({"data_dir": str(tmp_path)})))
    assert client["grpc.keepalive_permit_without_calls"] == 1
    assert server["grpc.keepalive_permit_without_calls"] == 1
    assert client["grpc.keepalive_time_ms"] >= server["grpc.http2.min_ping_interval_without_data_ms"] > 0
    assert client["grpc.http2.max_pings_without_data"] == 0, "an idle stream must keep pinging"
