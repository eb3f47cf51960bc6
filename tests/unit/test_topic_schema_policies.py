"""Topic-level schema policies without servers: which strategy and validation flag apply (topic, namespace,
defaults), the stored JSON (Pulsar's ``TopicPolicies`` names), and the REST API (round trip, ``applied``,
fall-back on DELETE, 400 for bad bodies with nothing changed, 404 for unknown topics, 405 for non-persistent
ones), including schema uploads checked with the topic's strategy."""

from __future__ import annotations

import json

import pytest

from broker.schema import SchemaDefaults, SchemaPolicy, Strategy
from config_store import InvalidMetadataError, Policies, TopicPolicies
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

RECORD_V1 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}
RECORD_V2 = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                          {"name": "age", "type": "int"}]}  # no default


def test_the_topics_own_settings_beat_its_namespaces() -> None:
    ns = Policies(schema_compatibility_strategy="BACKWARD", schema_validation_enforced=True,
                  is_allow_auto_update_schema=False)
    defaults = SchemaDefaults()
    assert defaults.policy(ns, None) == SchemaPolicy(Strategy.BACKWARD, False, True)
    assert defaults.policy(ns, TopicPolicies()) == SchemaPolicy(Strategy.BACKWARD, False, True)
    own = TopicPolicies(schema_compatibility_strategy="ALWAYS_INCOMPATIBLE", schema_validation_enforced=False)
    assert defaults.policy(ns, own) == SchemaPolicy(Strategy.ALWAYS_INCOMPATIBLE, False, False)
    assert defaults.policy(None, own) == SchemaPolicy(Strategy.ALWAYS_INCOMPATIBLE, True, False)
    # UNDEFINED at topic level means "the namespace's", as in Pulsar
    assert defaults.policy(ns, TopicPolicies(schema_compatibility_strategy="UNDEFINED")).strategy is Strategy.BACKWARD
    assert defaults.policy(None, TopicPolicies(schema_validation_enforced=True)).validation_enforced is True


def test_stored_with_pulsars_names_and_corrupt_values_refused() -> None:
    own = TopicPolicies(schema_compatibility_strategy="FORWARD", schema_validation_enforced=True)
    stored = json.loads(own.to_json())
    assert stored["schemaCompatibilityStrategy"] == "FORWARD" and stored["schemaValidationEnforced"] is True
    assert TopicPolicies.from_json(own.to_json()) == own and not own.is_empty()
    with pytest.raises(InvalidMetadataError, match="schemaCompatibilityStrategy"):
        TopicPolicies.from_json(b'{"version":1,"schemaCompatibilityStrategy":"SOMETIMES"}')
    with pytest.raises(InvalidMetadataError, match="schemaValidationEnforced"):
        TopicPolicies.from_json(b'{"version":1,"schemaValidationEnforced":"yes"}')


async def test_strategy_over_rest_governs_uploads_and_falls_back_on_delete(nodes, http) -> None:
    a, b = nodes
    await setup_namespace(http, a.url)
    topic = f"{a.url}/admin/v2/persistent/t/ns/users"
    url = f"{topic}/schemaCompatibilityStrategy"
    status, answer = await call(http, "PUT", url, "FORWARD")
    assert status == 404 and "does not exist" in answer["reason"]
    assert await call(http, "PUT", topic) == (204, None)
    assert await call(http, "GET", url) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, "FULL")
    schemas = f"{a.url}/admin/v2/schemas/t/ns/users"
    v1 = {"type": "AVRO", "schema": json.dumps(RECORD_V1)}
    v2 = {"type": "AVRO", "schema": json.dumps(RECORD_V2)}
    assert await call(http, "POST", f"{schemas}/schema", v1) == (200, {"version": {"version": 0}})
    # v2 adds a field without a default: FORWARD-compatible (old readers ignore it), not BACKWARD / FULL
    assert (await call(http, "POST", f"{schemas}/compatibility", v2))[1]["compatibility"] is False
    assert await call(http, "PUT", url, "FORWARD") == (204, None)
    assert await call(http, "GET", f"{b.url}/admin/v2/persistent/t/ns/users/schemaCompatibilityStrategy") == (
        200, "FORWARD")
    assert await call(http, "POST", f"{schemas}/compatibility", v2) == (
        200, {"compatibility": True, "schemaCompatibilityStrategy": "FORWARD"})
    for bad in (b'"SOMETIMES"', b'"forward"', b"3", b"null", b'["FULL"]'):
        status, answer = await call(http, "PUT", url, raw=bad)
        assert status == 400 and "strategy must be one of" in answer["reason"], (bad, answer)
    assert (await call(http, "PUT", url, raw=b"FORWARD"))[0] == 400  # not JSON
    assert (await call(http, "PUT", url, raw=b""))[0] == 400
    assert await call(http, "GET", url) == (200, "FORWARD")
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (204, None)
    status, answer = await call(http, "POST", f"{schemas}/schema", v2)
    assert status == 409  # FULL again: refused, nothing stored
    assert await call(http, "PUT", url, "ALWAYS_COMPATIBLE") == (204, None)
    assert await call(http, "POST", f"{schemas}/schema", v2) == (200, {"version": {"version": 1}})
    status, answer = await call(http, "PUT", f"{a.url}/admin/v2/non-persistent/t/ns/users/schemaCompatibilityStrategy",
                                "FULL")
    assert status == 405 and "non-persistent" in answer["reason"]
    assert (await call(http, "GET", f"{a.url}/admin/v2/persistent/t/nope/users/schemaCompatibilityStrategy"))[0] == 404


async def test_validation_flag_over_rest(nodes, http) -> None:
    a, _ = nodes
    await setup_namespace(http, a.url)
    assert await call(http, "PUT", f"{a.url}/admin/v2/persistent/t/ns/parts/partitions", 2) == (204, None)
    url = f"{a.url}/admin/v2/persistent/t/ns/parts/schemaValidationEnforced"
    partition = f"{a.url}/admin/v2/persistent/t/ns/parts-partition-1/schemaValidationEnforced"
    assert await call(http, "GET", url) == (200, False)
    assert await call(http, "POST", f"{a.url}/admin/v2/namespaces/t/ns/schemaValidationEnforced", True) == (204, None)
    assert await call(http, "GET", url + "?applied=true") == (200, True)
    assert await call(http, "POST", url, False) == (204, None)
    assert await call(http, "GET", partition) == (200, False)  # a partitioned topic's cover its partitions
    assert await call(http, "GET", partition + "?applied=true") == (200, False)
    for bad in (b'"true"', b"1", b"null", b'{"enabled": true}'):
        status, answer = await call(http, "POST", url, raw=bad)
        assert status == 400 and "must be true or false" in answer["reason"], (bad, answer)
    assert await call(http, "GET", url) == (200, False)
    assert await call(http, "DELETE", url) == (204, None)
    assert await call(http, "GET", url) == (200, False)
    assert await call(http, "GET", url + "?applied=true") == (200, True)
    missing = f"{a.url}/admin/v2/persistent/t/ns/nothing/schemaValidationEnforced"
    assert (await call(http, "POST", missing, True))[0] == 404
