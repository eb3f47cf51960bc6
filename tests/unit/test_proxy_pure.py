"""The proxy's pure parts: which targets are allowed, the admission limits, the handshake's framing and CONNECT
decisions, the frames it answers with, its settings, its metric names, and which rooms it imports."""

from __future__ import annotations

import ast
import pathlib
import ssl
import struct

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from config_store.brokers import AdvertisedListener, BrokerRegistration
from magnetar.errors import ConfigError
from magnetar.protocol import FrameDecoder, FrameTooLargeError, ProtocolError, encode_command, pb, wrap
from magnetar.protocol.client.commands import connect_command
from proxy import handshake
from proxy.config import ProxyConfig
from proxy.errors import TargetDeniedError
from proxy.limits import ConnectionLimiter, Refusal, RequestLimiter
from proxy.memory import FREE_BYTES_MIN, HeapTrimmer
from proxy.metrics import ProxyCollector, ProxyStats
from proxy.targets import allowed_endpoints, parse_target
from proxy.tls import failure_reason

ROOT = pathlib.Path(__file__).resolve().parents[2]
T = pb.BaseCommand


def decode(frame: bytes) -> pb.BaseCommand:
    return FrameDecoder().feed(frame)[0].command


# -- rooms -----------------------------------------------------------------------------------------------------


def test_the_proxy_imports_only_the_rooms_design_allows_it() -> None:
    allowed = {"magnetar", "config_store", "observability", "proxy"}
    forbidden = {"broker", "bookie", "replicator", "clusters", "spark", "tests"}
    seen = set()
    for path in (ROOT / "proxy").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                seen.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                seen.update(alias.name.split(".")[0] for alias in node.names)
    assert not seen & forbidden, seen & forbidden
    assert {"magnetar", "config_store", "observability"} <= seen <= allowed | _third_party_and_stdlib(seen)


def _third_party_and_stdlib(names: set[str]) -> set[str]:
    import sys

    return {n for n in names if n in sys.stdlib_module_names or n in {"aiohttp", "multidict", "prometheus_client"}}


# -- targets ---------------------------------------------------------------------------------------------------


def registration(broker_id: str, port: int, *, tls_port: int = 0, listeners=()) -> BrokerRegistration:
    return BrokerRegistration(broker_id=broker_id, pulsar_service_url=f"pulsar://Broker-{broker_id}:{port}",
                              web_service_url=f"http://broker-{broker_id}:8080",
                              pulsar_service_url_tls=f"pulsar+ssl://broker-{broker_id}:{tls_port}" if tls_port else "",
                              advertised_listeners=tuple(listeners))


def test_proxy_to_broker_url_is_host_port_or_one_broker_url() -> None:
    assert parse_target("broker-1:6650") == ("broker-1", 6650)
    assert parse_target("Broker-1:6650") == ("broker-1", 6650)
    assert parse_target("pulsar://broker-1:6650") == ("broker-1", 6650)
    assert parse_target("pulsar+ssl://broker-1:6651/") == ("broker-1", 6651)
    assert parse_target("[::1]:6650") == ("::1", 6650)
    for bad in ("", "broker-1", "broker-1:", "broker-1:99999", "http://broker-1:6650", "a:1,b:2", "broker 1:6650",
                "user@broker-1:6650", "broker-1:6650/path", "x" * 400 + ":1", "pulsar://a:1,b:2"):
        with pytest.raises(TargetDeniedError):
            parse_target(bad)


def test_only_registered_endpoints_are_targets_and_tls_only_drops_plain_ones() -> None:
    regs = [registration("1", 6650, tls_port=6651),
            registration("2", 6660, listeners=[AdvertisedListener("external", "pulsar://203.0.113.7:16650",
                                                                  "pulsar+ssl://203.0.113.7:16651")])]
    allowed = allowed_endpoints(regs, tls_only=False)
    assert set(allowed) == {("broker-1", 6650), ("broker-1", 6651), ("broker-2", 6660), ("203.0.113.7", 16650),
                            ("203.0.113.7", 16651)}
    assert allowed[("broker-1", 6651)].tls and not allowed[("broker-1", 6650)].tls
    assert allowed[("203.0.113.7", 16650)].broker_id == "2"
    assert allowed[("broker-1", 6651)].url == "pulsar+ssl://broker-1:6651"
    assert ("broker-1", 8080) not in allowed  # the web port is no binary target
    tls_only = allowed_endpoints(regs, tls_only=True)
    assert set(tls_only) == {("broker-1", 6651), ("203.0.113.7", 16651)}


def test_malformed_registered_urls_are_skipped_not_allowed() -> None:
    reg = BrokerRegistration(broker_id="x", pulsar_service_url="pulsar://nohost", web_service_url="http://x:1",
                             pulsar_service_url_tls="pulsar://wrong-scheme:6651")
    assert allowed_endpoints([reg], tls_only=False) == {}


# -- limits ----------------------------------------------------------------------------------------------------


def test_connection_limiter_counts_in_total_and_per_address() -> None:
    limiter = ConnectionLimiter(max_total=3, max_per_ip=2)
    assert limiter.try_acquire("a") is None and limiter.try_acquire("a") is None
    assert limiter.try_acquire("a") is Refusal.PER_IP
    assert limiter.try_acquire("b") is None
    assert limiter.try_acquire("c") is Refusal.TOTAL
    assert limiter.active == 3 and limiter.held_by("a") == 2
    limiter.release("a")
    assert limiter.try_acquire("c") is None
    for ip in ("a", "b", "c"):
        limiter.release(ip)
    assert limiter.active == 0 and limiter.held_by("a") == 0
    with pytest.raises(RuntimeError):
        limiter.release("a")
    unlimited = ConnectionLimiter(max_total=100)
    assert all(unlimited.try_acquire("same") is None for _ in range(100))


def test_request_limiter_never_waits() -> None:
    limiter = RequestLimiter(2)
    assert limiter.try_acquire() and limiter.try_acquire() and not limiter.try_acquire()
    limiter.release()
    assert limiter.try_acquire() and limiter.in_flight == 2
    limiter.release()
    limiter.release()
    with pytest.raises(RuntimeError):
        limiter.release()


# -- handshake -------------------------------------------------------------------------------------------------


def test_split_frame_takes_exactly_one_frame_and_leaves_the_rest() -> None:
    connect = encode_command(connect_command())
    ping = encode_command(wrap(pb.CommandPing()))
    buffer = bytearray(connect[:3])
    assert handshake.split_frame(buffer) is None and len(buffer) == 3
    buffer += connect[3:] + ping[:5]
    assert handshake.split_frame(buffer) == connect
    assert bytes(buffer) == ping[:5]
    buffer += ping[5:]
    assert handshake.split_frame(buffer) == ping and buffer == bytearray()
    with pytest.raises(FrameTooLargeError):
        handshake.split_frame(bytearray(struct.pack(">I", 200_000)))
    with pytest.raises(ProtocolError):
        handshake.decode_one(struct.pack(">II", 8, 4) + b"\xff\xff\xff\xff")


def test_connect_decisions() -> None:
    lookups = handshake.decide_connect(connect_command().connect)
    assert lookups == handshake.ConnectDecision("", 20, "")
    forward = handshake.decide_connect(connect_command(proxy_to_broker_url="b:6650", protocol_version=15).connect)
    assert forward.target == "b:6650" and forward.protocol_version == 15 and not forward.refusal
    assert "version 9" in handshake.decide_connect(connect_command(protocol_version=9).connect).refusal
    assert handshake.decide_connect(connect_command(protocol_version=21).connect).protocol_version == 20
    forged = connect_command(original_principal="admin").connect
    assert "original_principal" in handshake.decide_connect(forged).refusal
    empty = connect_command().connect
    empty.proxy_to_broker_url = ""
    assert "empty" in handshake.decide_connect(empty).refusal


def test_the_proxy_connects_to_brokers_as_itself_for_the_client() -> None:
    client = connect_command(client_version="Pulsar-CPP-v3", proxy_to_broker_url="b:6650", topic_watchers=True,
                             auth_method_name="token", auth_data=b"client-token").connect
    cmd = decode(handshake.broker_connect(client, protocol_version=20, auth_method_name="token",
                                          auth_data=b"proxy-token", original_principal="alice")).connect
    assert (cmd.auth_method_name, cmd.auth_data, cmd.original_principal) == ("token", b"proxy-token", "alice")
    assert cmd.client_version == "Pulsar-CPP-v3" and cmd.protocol_version == 20
    assert cmd.feature_flags.supports_topic_watchers and cmd.feature_flags.supports_auth_refresh
    assert not cmd.HasField("proxy_to_broker_url") and cmd.proxy_version.startswith("magnetar-proxy")
    anonymous = decode(handshake.broker_connect(client, protocol_version=20, auth_method_name="",
                                                auth_data=b"", original_principal=None)).connect
    assert anonymous.auth_method_name == "none" and not anonymous.HasField("original_principal")


def test_lookup_answers_send_the_client_back_through_the_proxy() -> None:
    answer = decode(handshake.lookup_connect(7, "pulsar://b:6650")).lookupTopicResponse
    assert answer.request_id == 7 and answer.response == pb.CommandLookupTopicResponse.Connect
    assert answer.brokerServiceUrl == answer.brokerServiceUrlTls == "pulsar://b:6650"
    assert answer.proxy_through_service_url and answer.authoritative


def test_refusals_take_the_shape_each_command_expects() -> None:
    lookup = decode(handshake.rejection(T.LOOKUP, 1))
    assert lookup.lookupTopicResponse.error == pb.TooManyRequests
    assert lookup.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    partitions = decode(handshake.rejection(T.PARTITIONED_METADATA, 2)).partitionMetadataResponse
    assert partitions.error == pb.TooManyRequests and partitions.request_id == 2
    assert partitions.response == pb.CommandPartitionedTopicMetadataResponse.Failed
    schema = decode(handshake.rejection(T.GET_SCHEMA, 3)).getSchemaResponse
    assert schema.error_code == pb.TooManyRequests and schema.request_id == 3
    topics = decode(handshake.rejection(T.GET_TOPICS_OF_NAMESPACE, 4))
    assert topics.type == T.ERROR and topics.error.error == pb.TooManyRequests and topics.error.request_id == 4
    connect_error = decode(handshake.error(handshake.NO_REQUEST_ID, pb.ServiceNotReady, "no"))
    assert connect_error.error.request_id == (1 << 64) - 1


def test_only_the_states_that_decode_frames_admit_commands() -> None:
    S = handshake.ConnectionState
    assert handshake.ALLOWED[S.AWAITING_CONNECT] == {T.CONNECT}
    assert T.PRODUCER not in handshake.ALLOWED[S.LOOKUPS] and T.LOOKUP in handshake.ALLOWED[S.LOOKUPS]
    assert S.RELAYING not in handshake.ALLOWED and S.RELAYING not in handshake.HANDSHAKING
    assert S.CONNECTING_BROKER in handshake.HANDSHAKING


# -- settings --------------------------------------------------------------------------------------------------


def test_the_sample_proxy_toml_loads() -> None:
    config = ProxyConfig.load(ROOT / "deploy" / "proxy.toml")
    assert config.tls_port == 6651 and config.port == 0 and config.cluster == "us-east"
    assert config.configuration_store_connect == "global-zookeeper:2181"


@pytest.mark.parametrize("changes, message", [
    ({"port": 0, "tls_port": 0}, "serve no client"),
    ({"tls_cert_file": ""}, "tls_cert_file"),
    ({"web_port": 6651}, "must differ"),
    ({"port": 70000}, "0..65535"),
    ({"tls_require_trusted_client_cert": True, "tls_trust_certs_file": ""}, "tls_trust_certs_file"),
    ({"tls_min_protocol": "SSLv3"}, "tls_min_protocol"),
    ({"broker_client_auth_method": "kerberos"}, "broker_client_auth_method"),
    ({"broker_client_auth_method": "token"}, "needs broker_client_auth_params"),
    ({"broker_client_auth_method": "tls", "broker_client_auth_params": "c.pem,k.pem"}, "tls_enabled_with_broker"),
    ({"max_concurrent_inbound_connections_per_ip": -1}, "per_ip"),
    ({"handshake_timeout_ms": 0}, "handshake_timeout_ms must be positive"),
    ({"zookeeper": " "}, "zookeeper"),
    ({"authentication_enabled": True}, "needs authentication_providers"),
    ({"authentication_enabled": True, "authentication_providers": ["kerberos"]}, "unknown provider"),
    ({"authentication_enabled": True, "authentication_providers": ["token"]}, "token_secret_key"),
    ({"authentication_enabled": True, "authentication_providers": ["tls"]}, "tls_trust_certs_file"),
    ({"authorization_enabled": True}, "needs authentication_enabled"),
    ({"authentication_refresh_check_ms": 0}, "authentication_refresh_check_ms must be positive"),
    ({"heap_trim_after_closed_connections": -1}, "heap_trim_after_closed_connections must be 0"),
    ({"heap_trim_check_interval_ms": 0}, "heap_trim_check_interval_ms must be positive"),
    ({"event_loop_slice_us": 50}, "event_loop_slice_us must be 0"),
    ({"event_loop_slice_us": 200_000}, "event_loop_slice_us must be 0"),
])
def test_inconsistent_settings_are_refused_naming_the_setting(changes, message) -> None:
    values = {"data_dir": "/tmp/p", "zookeeper": "zk:2181", "tls_cert_file": "c.pem", "tls_key_file": "k.pem",
              **changes}
    with pytest.raises(ConfigError, match=message):
        ProxyConfig.from_mapping(values)


def test_a_misspelt_setting_is_an_error_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="did you mean max_concurrent_lookup_requests"):
        ProxyConfig.from_mapping({"data_dir": "/tmp/p", "zookeeper": "zk", "port": 6650, "tls_port": 0,
                                  "max_concurrent_lookup_request": 5})


# -- metrics and TLS refusals ----------------------------------------------------------------------------------


def test_metrics_carry_pulsars_proxy_names() -> None:
    stats = ProxyStats()
    stats.new_connections, stats.binary_bytes = 3, 1000
    stats.requests["lookup"] = 5
    stats.rejected_requests["partitions_metadata"] = 1
    stats.auth_failures["untrusted_cert"] = 2
    registry = CollectorRegistry()
    ProxyCollector(stats, active_connections=lambda: 2, relayed_connections=lambda: 1).register(registry)
    text = generate_latest(registry).decode()
    for line in ("pulsar_proxy_active_connections 2.0", "pulsar_proxy_new_connections_total 3.0",
                 "pulsar_proxy_rejected_connections_total 0.0", "pulsar_proxy_binary_ops_total 0.0",
                 "pulsar_proxy_binary_bytes_total 1000.0", "pulsar_proxy_lookup_requests_total 5.0",
                 "pulsar_proxy_partitions_metadata_requests_total 0.0",
                 "pulsar_proxy_get_topics_of_namespace_requests_total 0.0", "pulsar_proxy_get_schema_requests_total 0.0",
                 "pulsar_proxy_rejected_lookup_requests_total 0.0",
                 "pulsar_proxy_rejected_partitions_metadata_requests_total 1.0",
                 "pulsar_proxy_rejected_get_topics_of_namespace_requests_total 0.0",
                 'magnetar_proxy_auth_failures_total{reason="untrusted_cert"} 2.0',
                 "magnetar_proxy_relayed_connections 1.0"):
        assert line in text.splitlines(), line


def test_tls_handshake_failures_are_named_by_reason() -> None:
    def err(reason: str) -> ssl.SSLError:
        e = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower().replace('_', ' ')} (_ssl.c:1006)")
        e.reason = reason
        return e

    assert failure_reason(err("PEER_DID_NOT_RETURN_A_CERTIFICATE")) == "no_client_cert"
    assert failure_reason(err("TLSV13_ALERT_CERTIFICATE_REQUIRED")) == "no_client_cert"
    assert failure_reason(err("CERTIFICATE_VERIFY_FAILED")) == "untrusted_cert"
    assert failure_reason(err("TLSV1_ALERT_UNKNOWN_CA")) == "untrusted_cert"
    assert failure_reason(err("WRONG_VERSION_NUMBER")) == "malformed"
    assert failure_reason(err("HTTP_REQUEST")) == "malformed"
    assert failure_reason(TimeoutError()) == "handshake_timeout"


# -- HTTP headers towards brokers ------------------------------------------------------------------------------


def test_forwarded_http_requests_carry_the_proxys_credentials_and_never_a_clients_principal() -> None:
    from aiohttp.test_utils import make_mocked_request
    from multidict import CIMultiDict

    from proxy.http import ForwardingSettings, _request_headers

    request = make_mocked_request("GET", "/admin/v2/tenants", headers=CIMultiDict({
        "Authorization": "Bearer client-token", "X-Original-Principal": "root", "Connection": "keep-alive",
        "Accept": "application/json"}))
    open_proxy = ForwardingSettings(session=None, timeout_s=1, stats=ProxyStats())  # type: ignore[arg-type]
    headers = _request_headers(request, role=None, forwarding=open_proxy)
    assert headers["Authorization"] == "Bearer client-token" and "X-Original-Principal" not in headers
    assert "Connection" not in headers and headers["Accept"] == "application/json"
    secured = ForwardingSettings(session=None, timeout_s=1, stats=ProxyStats(),  # type: ignore[arg-type]
                                 authentication=object(), proxy_headers=lambda: {"Authorization": "Bearer proxy"})
    headers = _request_headers(request, role="alice", forwarding=secured)
    assert headers["Authorization"] == "Bearer proxy" and headers["X-Original-Principal"] == "alice"
    assert headers.getall("X-Original-Principal") == ["alice"]


# -- heap trimming ---------------------------------------------------------------------------------------------


class _FakeAllocator:
    def __init__(self, free_bytes) -> None:
        self.free = free_bytes
        self.trims = 0

    def free_bytes(self):
        return self.free

    def trim(self) -> None:
        self.trims += 1


@pytest.mark.parametrize("after_closed, closed, free, due", [
    (1000, 999, 1 << 30, False),  # not enough closed connections
    (1000, 1000, 1 << 30, True),
    (1000, 5000, FREE_BYTES_MIN - 1, False),  # too little free heap to be worth a walk
    (1000, 5000, None, True),  # the C library does not say how much is free: trims
    (0, 10**6, 1 << 30, False),  # 0: never
])
def test_the_heap_is_trimmed_only_after_enough_closed_connections_and_free_heap(after_closed, closed, free,
                                                                                 due) -> None:
    count = [0]
    trimmer = HeapTrimmer(closed_connections=lambda: count[0], after_closed=after_closed, check_interval_s=1.0,
                          allocator=_FakeAllocator(free))
    assert not trimmer.due()
    count[0] = closed
    assert trimmer.due() is due

