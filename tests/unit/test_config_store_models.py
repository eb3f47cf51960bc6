"""config_store.models: the JSON codec round-trips, rejects corruption, and the ledger math is right."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from config_store import (BookieRegistration, ClusterData, InvalidMetadataError, LedgerMetadata, LedgerState,
                          MetadataError, PartitionedTopicMetadata, Policies, TenantInfo)
from config_store.models import AUTH_ACTIONS

text = st.text(max_size=20)
names = st.lists(st.text(min_size=1, max_size=10), max_size=5)
ints = st.integers(min_value=0, max_value=2**53)

clusters = st.builds(ClusterData, text, text, text, text)
tenants = st.builds(TenantInfo, names, names)
json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=10)
bundles = st.none() | st.dictionaries(st.text(max_size=8), json_scalars | st.lists(st.text(max_size=8), max_size=4),
                                      max_size=4)
policies = st.builds(
    Policies,
    replication_clusters=names,
    deduplication_enabled=st.none() | st.booleans(),
    message_ttl_in_seconds=st.none() | ints,
    retention_time_in_minutes=ints,
    retention_size_in_mb=ints,
    bundles=bundles,
    auth_roles=st.dictionaries(st.text(max_size=8), st.lists(st.sampled_from(AUTH_ACTIONS), max_size=6), max_size=4),
    destination_auth=st.dictionaries(st.text(max_size=30), st.dictionaries(
        st.text(max_size=8), st.lists(st.sampled_from(AUTH_ACTIONS), max_size=6), max_size=3), max_size=3),
    subscription_auth_roles=st.dictionaries(st.text(max_size=8), names, max_size=3),
)
bookie_regs = st.builds(BookieRegistration, st.text(min_size=1, max_size=12), text, text, text)


@st.composite
def ledgers(draw) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    pool = [f"bookie-{i}" for i in range(e + 4)]
    starts = sorted(draw(st.sets(st.integers(1, 10_000), max_size=4)))
    ensembles = [(first, draw(st.permutations(pool))[:e]) for first in [0, *starts]]
    state = draw(st.sampled_from(list(LedgerState)))
    return LedgerMetadata(
        ledger_id=draw(ints), ensemble_size=e, write_quorum_size=qw, ack_quorum_size=qa, ensembles=ensembles,
        state=state, last_entry_id=draw(st.integers(-1, 2**40)), length=draw(ints), ctime_ms=draw(ints),
        custom_metadata=draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)))


ALL_MODELS = [(ClusterData, clusters), (TenantInfo, tenants), (Policies, policies),
              (BookieRegistration, bookie_regs), (LedgerMetadata, ledgers())]


@pytest.mark.parametrize("cls,strategy", ALL_MODELS, ids=[c.__name__ for c, _ in ALL_MODELS])
def test_codec_round_trips(cls, strategy) -> None:
    @settings(max_examples=150, deadline=None)
    @given(strategy)
    def check(value) -> None:
        data = value.to_json()
        assert json.loads(data)["version"] == 1
        assert cls.from_json(data) == value

    check()


@pytest.mark.parametrize("cls,strategy", ALL_MODELS, ids=[c.__name__ for c, _ in ALL_MODELS])
def test_decoding_arbitrary_bytes_never_returns_garbage(cls, strategy) -> None:
    """Random bytes and random JSON either decode to a valid value or raise MetadataError — nothing else."""
    @settings(max_examples=150, deadline=None)
    @given(st.binary(max_size=64) | st.recursive(json_scalars, lambda c: st.lists(c) | st.dictionaries(
        st.sampled_from(["version", "serviceUrl", "adminRoles", "ensembles", "bookieId", "address", "ledgerId",
                         "partitions", "state", "x"]), c), max_leaves=10).map(lambda v: json.dumps(v).encode()))
    def check(data: bytes) -> None:
        try:
            value = cls.from_json(data)
        except MetadataError:
            return
        assert isinstance(value, cls)

    check()


def test_pulsar_field_names() -> None:
    assert json.loads(ClusterData("http://a", "https://a", "pulsar://a", "pulsar+ssl://a").to_json()) == {
        "version": 1, "serviceUrl": "http://a", "serviceUrlTls": "https://a", "brokerServiceUrl": "pulsar://a",
        "brokerServiceUrlTls": "pulsar+ssl://a"}
    assert json.loads(TenantInfo(["admin"], ["us-east"]).to_json()) == {
        "version": 1, "adminRoles": ["admin"], "allowedClusters": ["us-east"]}
    p = json.loads(Policies(replication_clusters=["a", "b"], deduplication_enabled=True, message_ttl_in_seconds=60,
                            retention_time_in_minutes=10, retention_size_in_mb=100,
                            auth_roles={"app": ["produce", "consume"]}).to_json())
    assert p["replication_clusters"] == ["a", "b"] and p["deduplicationEnabled"] is True
    assert p["message_ttl_in_seconds"] == 60
    assert p["retention_policies"] == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 100}
    assert p["auth_policies"] == {"namespace_auth": {"app": ["produce", "consume"]}, "destination_auth": {},
                                  "subscription_auth_roles": {}}
    p = json.loads(Policies(destination_auth={"persistent://t/ns/x": {"app": ["consume"]}},
                            subscription_auth_roles={"audit": ["app", "ops"]}).to_json())
    assert p["auth_policies"] == {"namespace_auth": {},
                                  "destination_auth": {"persistent://t/ns/x": {"app": ["consume"]}},
                                  "subscription_auth_roles": {"audit": ["app", "ops"]}}


def test_unknown_fields_are_ignored_and_defaults_apply() -> None:
    data = json.dumps({"version": 1, "serviceUrl": "http://x", "futureField": {"a": 1}}).encode()
    assert ClusterData.from_json(data) == ClusterData(service_url="http://x")
    pulsar_like = {"version": 1, "auth_policies": {"namespace_auth": {}, "destination_auth": {"t": {}}},
                   "replication_clusters": ["a"], "bundles": {"numBundles": 4, "boundaries": ["0x0", "0xffffffff"]}}
    assert Policies.from_json(json.dumps(pulsar_like).encode()) == Policies(
        replication_clusters=["a"], bundles={"numBundles": 4, "boundaries": ["0x0", "0xffffffff"]},
        destination_auth={"t": {}})


@pytest.mark.parametrize("cls,payload,complaint", [
    (ClusterData, b"\xff\xfe", "not valid JSON"),
    (ClusterData, b"[1, 2]", "JSON object"),
    (ClusterData, b'{"serviceUrl": "x"}', "schema 'version'"),
    (ClusterData, b'{"version": 2}', "unsupported schema version 2"),
    (ClusterData, b'{"version": "1"}', "schema 'version'"),
    (ClusterData, b'{"version": 1, "serviceUrl": 5}', "'serviceUrl' must be str"),
    (TenantInfo, b'{"version": 1, "adminRoles": "admin"}', "'adminRoles' must be list"),
    (TenantInfo, b'{"version": 1, "adminRoles": [1]}', "list of strings"),
    (Policies, b'{"version": 1, "message_ttl_in_seconds": true}', "must be int"),
    (Policies, b'{"version": 1, "deduplicationEnabled": 1}', "must be bool"),
    (Policies, b'{"version": 1, "retention_policies": {"retentionSizeInMB": "big"}}', "retentionSizeInMB"),
    (Policies, b'{"version": 1, "auth_policies": {"namespace_auth": {"r": "produce"}}}', "namespace_auth"),
    (Policies, b'{"version": 1, "auth_policies": {"namespace_auth": {"r": ["write"]}}}', "unknown action"),
    (Policies, b'{"version": 1, "auth_policies": {"namespace_auth": []}}', "'namespace_auth' must be dict"),
    (Policies, b'{"version": 1, "auth_policies": {"destination_auth": {"t": ["produce"]}}}', "destination_auth"),
    (Policies, b'{"version": 1, "auth_policies": {"destination_auth": {"t": {"r": [1]}}}}', "list of strings"),
    (Policies, b'{"version": 1, "auth_policies": {"destination_auth": {"t": {"r": ["own"]}}}}', "unknown action"),
    (Policies, b'{"version": 1, "auth_policies": {"subscription_auth_roles": {"s": "r"}}}', "subscription_auth"),
    (Policies, b'{"version": 1, "auth_policies": {"subscription_auth_roles": {"s": [null]}}}', "list of strings"),
    (Policies, b'{"version": 1, "auth_policies": []}', "'auth_policies' must be dict"),
    (PartitionedTopicMetadata, b'{"version": 1, "partitions": 0}', "positive"),
    (PartitionedTopicMetadata, b'{"version": 1}', "missing field 'partitions'"),
    (BookieRegistration, b'{"version": 1, "address": "h:1"}', "missing field 'bookieId'"),
    (LedgerMetadata, b'{"version": 1, "ledgerId": 1}', "missing field"),
])
def test_corrupt_values_are_rejected_with_a_clear_error(cls, payload, complaint) -> None:
    with pytest.raises(InvalidMetadataError, match=complaint):
        cls.from_json(payload)


def _ledger(**kw) -> LedgerMetadata:
    args = dict(ledger_id=7, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                ensembles=[(0, ["b1", "b2", "b3"])])
    args.update(kw)
    return LedgerMetadata(**args)


def _ledger_json(**changes) -> bytes:
    obj = json.loads(_ledger().to_json())
    obj.update(changes)
    return json.dumps(obj).encode()


@pytest.mark.parametrize("changes,complaint", [
    ({"state": "HALF_OPEN"}, "unknown ledger state"),
    ({"ackQuorumSize": 3}, "Qa <= Qw"),
    ({"ensembles": []}, "no ensemble"),
    ({"ensembles": [{"firstEntryId": 5, "bookies": ["b1", "b2", "b3"]}]}, "start at entry 0"),
    ({"ensembles": [{"firstEntryId": 0, "bookies": ["b1", "b1", "b3"]}]}, "repeats a bookie"),
    ({"ensembles": [{"firstEntryId": 0, "bookies": ["b1", "b2"]}]}, "must list 3"),
    ({"ensembles": [{"firstEntryId": 0, "bookies": ["b1", "b2", "b3"]},
                    {"firstEntryId": 0, "bookies": ["b4", "b2", "b3"]}]}, "ascend"),
    ({"ensembles": [{"firstEntryId": "0", "bookies": ["b1", "b2", "b3"]}]}, "firstEntryId"),
    ({"lastEntryId": -2}, "last_entry_id"),
    ({"ledgerId": 1.5}, "ledgerId"),
    ({"customMetadata": {"k": 1}}, "customMetadata"),
])
def test_invalid_ledger_metadata_is_rejected(changes, complaint) -> None:
    with pytest.raises(InvalidMetadataError, match=complaint):
        LedgerMetadata.from_json(_ledger_json(**changes))


@pytest.mark.parametrize("kw", [
    dict(ensemble_size=3, write_quorum_size=2, ack_quorum_size=0),
    dict(ensemble_size=2, write_quorum_size=3, ack_quorum_size=2),
    dict(ack_quorum_size=3),
    dict(ensembles=[(0, "b1b2b3")]),
    dict(state=LedgerState.CLOSED, last_entry_id=-5),
    dict(ledger_id=-1),
])
def test_constructor_validates(kw) -> None:
    with pytest.raises(InvalidMetadataError):
        _ledger(**kw)


def test_write_set_stripes_round_robin_over_the_covering_ensemble() -> None:
    md = LedgerMetadata(ledger_id=1, ensemble_size=3, write_quorum_size=2, ack_quorum_size=2,
                        ensembles=[(0, ["a", "b", "c"]), (10, ["a", "d", "c"])])
    assert [md.write_set(e) for e in range(4)] == [["a", "b"], ["b", "c"], ["c", "a"], ["a", "b"]]
    assert md.ensemble_at(9) == ["a", "b", "c"]
    assert md.ensemble_at(10) == ["a", "d", "c"]
    assert md.ensemble_at(10**9) == ["a", "d", "c"]
    assert md.write_set(10) == ["d", "c"]  # 10 % 3 == 1
    assert md.write_set(11) == ["c", "a"]
    with pytest.raises(ValueError):
        md.ensemble_at(-1)


@settings(max_examples=200, deadline=None)
@given(ledgers(), st.integers(0, 20_000))
def test_write_set_properties(md: LedgerMetadata, entry_id: int) -> None:
    ws = md.write_set(entry_id)
    ensemble = md.ensemble_at(entry_id)
    assert len(ws) == md.write_quorum_size == len(set(ws))
    assert set(ws) <= set(ensemble)
    assert ws[0] == ensemble[entry_id % md.ensemble_size]
    covering = [b for f, b in md.ensembles if f <= entry_id][-1]
    assert ensemble == covering


def test_ensemble_change_and_state_transitions_return_new_copies() -> None:
    md = _ledger()
    changed = md.with_ensemble(5, ["b1", "b4", "b3"])
    assert md.ensembles == [(0, ["b1", "b2", "b3"])]  # the original is untouched
    assert changed.ensembles == [(0, ["b1", "b2", "b3"]), (5, ["b1", "b4", "b3"])]
    again = changed.with_ensemble(5, ["b1", "b5", "b3"]).with_ensemble(8, ["b6", "b5", "b3"])
    assert again.ensembles == [(0, ["b1", "b2", "b3"]), (5, ["b1", "b5", "b3"]), (8, ["b6", "b5", "b3"])]
    assert again.with_ensemble(3, ["x", "y", "z"]).ensembles == [(0, ["b1", "b2", "b3"]), (3, ["x", "y", "z"])]
    with pytest.raises(InvalidMetadataError):
        md.with_ensemble(5, ["b1", "b1", "b3"])
    recovering = changed.in_recovery()
    assert recovering.state is LedgerState.IN_RECOVERY and changed.state is LedgerState.OPEN
    closed = recovering.closed(41, 4200)
    assert (closed.state, closed.last_entry_id, closed.length) == (LedgerState.CLOSED, 41, 4200)
    assert LedgerMetadata.from_json(closed.to_json()) == closed
    empty = md.closed(-1, 0)
    assert empty.last_entry_id == -1


def test_ledger_does_not_alias_callers_lists() -> None:
    bookies = ["b1", "b2", "b3"]
    md = _ledger(ensembles=[(0, bookies)])
    bookies[0] = "zz"
    assert md.ensemble_at(0) == ["b1", "b2", "b3"]
    md.ensemble_at(0)[0] = "yy"
    assert md.ensemble_at(0) == ["b1", "b2", "b3"]
