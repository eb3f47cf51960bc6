"""The schema registry with pulsar-client: versions assigned to producers and carried in messages, record
evolution under the namespace's strategy, refusals (IncompatibleSchema, nothing stored), consumers with
schemas, GET_SCHEMA on the wire and the admin REST API (with its 400/404/409/422 answers).

The first test runs real processes (ZooKeeper, two bookies, a broker); the namespace policy variants run on
the in-process BrokerThread (in-memory storage and configuration store), which serves the same handlers; the
topic-level policies (a topic's own strategy and validation flag over its namespace's, set over REST and with
``magnetar admin topics``) run on real processes again.
"""

from __future__ import annotations

import asyncio
import enum
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, CustomEnum, Integer, JsonSchema, Record, String, StringSchema

from broker.schema import encode_version
from broker.service.session.schema_commands import registry_of
from config_store import Policies
from magnetar.protocol import pb
from magnetar.protocol.client.connection import Connection
from magnetar.topic_name import TopicName
from tests.kit.broker_thread import broker, storage  # noqa: F401 (fixtures)
from tests.kit.brokers import start_brokers
from tests.kit.process import python_command
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(240)
RECEIVE_MS = 10_000
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class User(Record):
    name = String()
    age = Integer()


def user_with_email():
    class User(Record):  # the same record name, one more optional field with a default: FULL-compatible
        name = String()
        age = Integer()
        email = String(required_default=True)
    return User


def user_with_text_age():
    class User(Record):  # "age" changes type: incompatible under every strategy but ALWAYS_COMPATIBLE
        name = String()
        age = String()
    return User


def rest(method: str, url: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    return status, json.loads(text) if text else None


def admin_cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(python_command("admin", *args, "--url", url), capture_output=True, text=True, timeout=60)


def get_schema_on_the_wire(url: str, topic: str, version: int | None = None) -> pb.CommandGetSchemaResponse:
    async def ask() -> pb.CommandGetSchemaResponse:
        conn = Connection(url)
        await conn.start()
        try:
            command = pb.CommandGetSchema(topic=topic)
            if version is not None:
                command.schema_version = encode_version(version)
            return (await conn.request(command)).getSchemaResponse
        finally:
            await conn.close()
    return asyncio.run(ask())


def receive_version(consumer: pulsar.Consumer) -> tuple[Any, bytes]:
    msg = consumer.receive(RECEIVE_MS)
    consumer.acknowledge(msg)
    version = msg.schema_version()
    return msg.value(), version.encode("latin-1") if isinstance(version, str) else version


# ---------------------------------------------------------------------------------------------- real processes


def test_versions_evolution_refusals_and_rest_on_a_broker_process(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    local = f"users-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://public/default/{local}"
    base = f"{b.http_url}/admin/v2/schemas/public/default/{local}"
    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15, logger=QUIET)
    try:
        assert rest("GET", f"{base}/schema")[0] == 404  # no schema yet
        # The first producer's schema becomes version 0; a consumer with the same schema reads it.
        p0 = client.create_producer(topic, schema=JsonSchema(User))
        consumer = client.subscribe(topic, "s", schema=JsonSchema(User))
        p0.send(User(name="ada", age=36))
        value, version = receive_version(consumer)
        assert value.name == "ada" and version == encode_version(0)

        # An added optional field (with a default) is compatible under FULL, the default: version 1.
        UserV2 = user_with_email()
        p1 = client.create_producer(topic, schema=JsonSchema(UserV2))
        p1.send(UserV2(name="bob", age=7, email="b@x"))
        assert receive_version(consumer)[1] == encode_version(1)
        p0.send(User(name="cy", age=1))  # the old producer keeps its version
        assert receive_version(consumer)[1] == encode_version(0)

        # A field type change and a String producer are refused, and nothing is stored.
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=JsonSchema(user_with_text_age()))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=StringSchema())
        status, all_versions = rest("GET", f"{base}/schemas")
        assert status == 200 and [s["version"] for s in all_versions["getSchemaResponses"]] == [0, 1]
        # A producer without a schema (bytes) is let through: validation is not enforced by default.
        client.create_producer(topic).send(b'{"name": "raw"}')

        # GET_SCHEMA on the wire: latest, by version, unknown version (Pulsar's TopicNotFound).
        latest = get_schema_on_the_wire(b.pulsar_url, topic)
        assert latest.schema_version == encode_version(1) and latest.schema.type == pb.Schema.Json
        assert json.loads(latest.schema.schema_data)["fields"][2]["name"] == "email"
        assert get_schema_on_the_wire(b.pulsar_url, topic, 0).schema_version == encode_version(0)
        missing = get_schema_on_the_wire(b.pulsar_url, topic, 9)
        assert missing.error_code == pb.ServerError.TopicNotFound and "no-schema" in missing.error_message

        # REST reads.
        status, got = rest("GET", f"{base}/schema")
        assert status == 200 and got["version"] == 1 and got["type"] == "JSON" and got["timestamp"] > 0
        assert json.loads(got["data"])["name"] == "User" and got["properties"] == {}
        assert rest("GET", f"{base}/schema/0")[1]["version"] == 0
        assert rest("GET", f"{base}/schema/7")[0] == 404
        assert rest("GET", f"{base}/schema/x")[0] == 400
        assert rest("GET", f"{b.http_url}/admin/v2/schemas/public/nope/{local}/schema")[0] == 404

        # REST writes: bad bodies are 400, bad definitions 422, incompatible 409; none stores anything.
        for body in ({}, {"type": "JSONN", "schema": ""}, {"type": "JSON", "schema": 5},
                     {"type": "STRING", "properties": {"a": 1}}, [1]):
            status, answer = rest("POST", f"{base}/schema", body)
            assert status == 400 and answer["reason"], body
        assert rest("POST", f"{base}/schema", raw=b"{not json")[0] == 400
        assert rest("POST", f"{base}/schema", {"type": "AVRO", "schema": "{\"type\": \"nope\"}"})[0] == 422
        text_age = JsonSchema(user_with_text_age()).schema_info().schema()
        status, answer = rest("POST", f"{base}/schema", {"type": "JSON", "schema": text_age})
        assert status == 409 and "Incompatible schema" in answer["reason"]
        assert rest("POST", f"{base}/compatibility", {"type": "JSON", "schema": text_age})[1] == {
            "compatibility": False, "schemaCompatibilityStrategy": "FULL", "reason": answer["reason"]}
        assert len(rest("GET", f"{base}/schemas")[1]["getSchemaResponses"]) == 2
        v3 = JsonSchema(user_with_email()).schema_info().schema().replace("email", "phone")
        assert rest("POST", f"{base}/compatibility", {"type": "JSON", "schema": v3})[1]["compatibility"] is True
        status, answer = rest("POST", f"{base}/schema", {"type": "JSON", "schema": v3, "properties": {"by": "ci"}})
        assert (status, answer) == (200, {"version": {"version": 2}})
        assert rest("GET", f"{base}/schema/2")[1]["properties"] == {"by": "ci"}
        assert rest("POST", f"{base}/version", {"type": "JSON", "schema": v3})[1] == {"version": 2}

        # The command line: get, upload (an identical schema keeps its version), compatibility, delete.
        shown = admin_cli(b.http_url, "schemas", "get", topic, "--version", "2", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout)["version"] == 2, shown.stderr
        schema_file = tmp_path / "schema.json"
        schema_file.write_text(json.dumps({"type": "JSON", "schema": v3}))
        uploaded = admin_cli(b.http_url, "schemas", "upload", topic, "-f", str(schema_file))
        assert uploaded.returncode == 0 and "version 2" in uploaded.stdout, uploaded.stderr
        schema_file.write_text(json.dumps({"type": "JSON", "schema": text_age}))
        assert admin_cli(b.http_url, "schemas", "compatibility", topic, "-f", str(schema_file)).returncode == 1
        refused = admin_cli(b.http_url, "schemas", "upload", topic, "-f", str(schema_file))
        assert refused.returncode == 1 and "Incompatible schema" in refused.stderr
        strategy = admin_cli(b.http_url, "namespaces", "set-schema-compatibility-strategy", "public/default", "full")
        assert strategy.returncode == 0, strategy.stderr
        assert rest("GET", f"{b.http_url}/admin/v2/namespaces/public/default/schemaCompatibilityStrategy")[1] == "FULL"

        # Deleting: a marker version; the schema is gone for readers, and a new history may start.
        deleted = admin_cli(b.http_url, "schemas", "delete", topic)
        assert deleted.returncode == 0 and "version 3" in deleted.stdout, deleted.stderr
        assert rest("GET", f"{base}/schema")[0] == 404
        assert rest("DELETE", f"{base}/schema")[0] == 404
        assert admin_cli(b.http_url, "schemas", "get", topic).returncode == 1
        p_text = client.create_producer(topic, schema=StringSchema())  # no live schema left to conflict with
        assert rest("GET", f"{base}/schema")[1]["version"] == 4
        p_text.close()
        assert rest("DELETE", f"{base}/schema?force=true") == (200, {"version": 4})
        assert rest("GET", f"{base}/schemas")[0] == 404

        # Namespace policies: strategy, auto update, validation; bad values are 400, unknown namespaces 404.
        ns = f"{b.http_url}/admin/v2/namespaces/public/sch"
        assert rest("PUT", ns, {})[0] in (200, 204)
        assert rest("GET", f"{ns}/schemaCompatibilityStrategy") == (200, "UNDEFINED")
        assert rest("PUT", f"{ns}/schemaCompatibilityStrategy", "SOMETIMES")[0] == 400
        assert rest("PUT", f"{ns}/schemaCompatibilityStrategy", 3)[0] == 400
        assert rest("PUT", f"{ns}/schemaCompatibilityStrategy", "BACKWARD_TRANSITIVE")[0] == 204
        assert rest("GET", f"{ns}/schemaCompatibilityStrategy") == (200, "BACKWARD_TRANSITIVE")
        for key, default in (("isAllowAutoUpdateSchema", True), ("schemaValidationEnforced", False)):
            assert rest("GET", f"{ns}/{key}") == (200, default)
            assert rest("POST", f"{ns}/{key}", "yes")[0] == 400
            assert rest("POST", f"{ns}/{key}", not default)[0] == 204
            assert rest("GET", f"{ns}/{key}") == (200, not default)
        assert rest("GET", f"{b.http_url}/admin/v2/namespaces/public/nope/schemaCompatibilityStrategy")[0] == 404
        policies = rest("GET", ns)[1]
        assert policies["schema_compatibility_strategy"] == "BACKWARD_TRANSITIVE"
        assert policies["is_allow_auto_update_schema"] is False and policies["schema_validation_enforced"] is True
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- policy variants


def _ns(**policy: Any) -> dict:
    return {"namespaces": ("public/default", "public/schemas"), "policies": {"public/schemas": Policies(**policy)}}


def _client(broker) -> pulsar.Client:
    return pulsar.Client(broker.url, operation_timeout_seconds=15, logger=QUIET)


def _topic() -> str:
    return f"persistent://public/schemas/t-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker", [_ns(schema_compatibility_strategy="ALWAYS_COMPATIBLE")], indirect=True)
def test_always_compatible_lets_anything_through(broker) -> None:
    client, topic = _client(broker), _topic()
    try:
        client.create_producer(topic, schema=JsonSchema(User))
        client.create_producer(topic, schema=JsonSchema(user_with_text_age()))
        p = client.create_producer(topic, schema=StringSchema())
        consumer = client.subscribe(topic, "s", schema=StringSchema())
        p.send("hello")
        value, version = receive_version(consumer)
        assert value == "hello" and version == encode_version(2)
    finally:
        client.close()


@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker", [_ns(schema_compatibility_strategy="BACKWARD")], indirect=True)
def test_avro_records_evolve_under_backward(broker) -> None:
    client, topic = _client(broker), _topic()
    try:
        consumer = client.subscribe(topic, "s", schema=AvroSchema(User))  # idle topic: the consumer sets v0
        p1 = client.create_producer(topic, schema=AvroSchema(User))
        p1.send(User(name="ada", age=3))
        value, version = receive_version(consumer)
        assert (value.name, value.age, version) == ("ada", 3, encode_version(0))
        UserV2 = user_with_email()
        client.create_producer(topic, schema=AvroSchema(UserV2))  # version 1
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(user_with_text_age()))
        with pytest.raises(pulsar.IncompatibleSchema):  # a JSON producer on an AVRO topic: another type
            client.create_producer(topic, schema=JsonSchema(User))
        with pytest.raises(pulsar.IncompatibleSchema):  # a consumer that cannot read version 1
            client.subscribe(topic, "s2", schema=AvroSchema(user_with_text_age()))
    finally:
        client.close()


class Person(Record):  # User's fields under another record name
    name = String()
    age = Integer()


def with_enum(enum_name: str):
    """A record whose field is an enum named ``enum_name``, always with the same symbols."""
    symbols = enum.Enum(enum_name, ["RED", "GREEN"])

    class Paint(Record):
        colour = CustomEnum(symbols)
    return Paint


@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker", [_ns(schema_compatibility_strategy=s) for s in ("BACKWARD", "FORWARD", "FULL")],
                         indirect=True, ids=["BACKWARD", "FORWARD", "FULL"])
@pytest.mark.parametrize("schema_type", [AvroSchema, JsonSchema])
def test_a_record_renamed_with_the_same_fields_is_compatible(broker, schema_type) -> None:
    """Pulsar matches records by their fields, not their names (Java Avro's resolver); enum names still count."""
    client, topic = _client(broker), _topic()
    try:
        consumer = client.subscribe(topic, "s", schema=schema_type(User))  # version 0
        renamed = client.create_producer(topic, schema=schema_type(Person))  # version 1, not IncompatibleSchema
        renamed.send(Person(name="ada", age=3))
        value, version = receive_version(consumer)
        assert (value.name, value.age, version) == ("ada", 3, encode_version(1))
        client.create_producer(topic, schema=schema_type(User)).close()  # back to version 0: still identical

        other = _topic()
        client.create_producer(other, schema=schema_type(with_enum("Colour"))).close()
        with pytest.raises(pulsar.IncompatibleSchema):  # the same symbols under another enum name
            client.create_producer(other, schema=schema_type(with_enum("Color")))
    finally:
        client.close()


@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker", [_ns(schema_validation_enforced=True)], indirect=True)
def test_enforced_validation_refuses_producers_without_a_schema(broker) -> None:
    client, topic = _client(broker), _topic()
    try:
        client.create_producer(topic).close()  # no schema on the topic yet: allowed
        client.create_producer(topic, schema=StringSchema())
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic)
    finally:
        client.close()


@pytest.mark.parametrize("storage", ["memory"])
@pytest.mark.parametrize("broker", [_ns(is_allow_auto_update_schema=False)], indirect=True)
def test_without_auto_update_only_stored_schemas_are_accepted(broker) -> None:
    client, topic = _client(broker), _topic()
    try:
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=JsonSchema(User))
        client.create_producer(topic).send(b"bytes")  # the topic is active now, without a schema
        with pytest.raises(pulsar.IncompatibleSchema):  # and a consumer cannot give it one
            client.subscribe(topic, "s", schema=JsonSchema(User))
    finally:
        client.close()


@pytest.mark.parametrize("storage", ["memory"])
def test_partitions_share_their_partitioned_topics_schema(broker) -> None:
    local = f"parts-{uuid.uuid4().hex[:8]}"
    broker.run(broker.config_store.create_partitioned_topic, "public", "default", "persistent", local, 3)
    client = _client(broker)
    try:
        producer = client.create_producer(f"persistent://public/default/{local}", schema=JsonSchema(User))
        consumer = client.subscribe(f"persistent://public/default/{local}-partition-2", "s", schema=JsonSchema(User))
        producer.send(User(name="p", age=1), partition_key="k")
        for i in range(12):  # round-robin reaches every partition, each producer with version 0
            producer.send(User(name=f"n{i}", age=i))
        assert receive_version(consumer)[1] == encode_version(0)
        history = broker.run(lambda: registry_of(broker.service).history(
            TopicName.parse(f"persistent://public/default/{local}")))
        assert [v for v, _ in history] == [0]
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- topic-level policies


def _refused(attempt) -> bool:
    """Whether ``attempt()`` (a producer or reader creation, closed at once) is refused with IncompatibleSchema."""
    try:
        attempt().close()
    except pulsar.IncompatibleSchema:
        return True
    return False


def _namespace(b) -> str:
    namespace = f"public/schema-{uuid.uuid4().hex[:6]}"
    assert rest("PUT", f"{b.http_url}/admin/v2/namespaces/{namespace}")[0] == 204
    return namespace


def test_a_topics_strategy_overrides_its_namespaces_on_a_broker_process(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    namespace = _namespace(b)
    topic = f"persistent://{namespace}/users"
    strategy_url = f"{b.http_url}/admin/v2/persistent/{namespace}/users/schemaCompatibilityStrategy"
    schemas = f"{b.http_url}/admin/v2/schemas/{namespace}/users"
    UserV2 = user_with_email()  # FULL-compatible: the namespace's (default) strategy accepts it
    v2 = {"type": "JSON", "schema": JsonSchema(UserV2).schema_info().schema()}
    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15, logger=QUIET)
    try:
        status, answer = rest("PUT", strategy_url, "ALWAYS_INCOMPATIBLE")
        assert status == 404 and "does not exist" in answer["reason"]  # no such topic yet
        client.create_producer(topic, schema=JsonSchema(User)).close()  # version 0
        for bad in ("SOMETIMES", "always_incompatible", 3, ["FULL"], {"strategy": "FULL"}):
            status, answer = rest("PUT", strategy_url, bad)
            assert status == 400 and "strategy must be one of" in answer["reason"], bad
        assert rest("GET", strategy_url) == (204, None)

        set_ = admin_cli(b.http_url, "topics", "set-schema-compatibility-strategy", topic, "always_incompatible")
        assert set_.returncode == 0, set_.stderr
        shown = admin_cli(b.http_url, "topics", "get-schema-compatibility-strategy", topic, "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout) == "ALWAYS_INCOMPATIBLE", shown.stderr
        # The broker learns of it through its watch: wait until SUBSCRIBE sees it (a reader stores nothing).
        wait_for(lambda: _refused(lambda: client.create_reader(topic, pulsar.MessageId.earliest,
                                                               schema=JsonSchema(UserV2))),
                 30, what="a reader with the new schema refused under the topic's ALWAYS_INCOMPATIBLE")
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=JsonSchema(UserV2))
        client.create_producer(topic, schema=JsonSchema(User)).close()  # the stored version is still fine
        assert rest("POST", f"{schemas}/schema", v2)[0] == 409  # uploads follow the topic's strategy too
        assert rest("POST", f"{schemas}/compatibility", v2)[1]["schemaCompatibilityStrategy"] == "ALWAYS_INCOMPATIBLE"
        assert [s["version"] for s in rest("GET", f"{schemas}/schemas")[1]["getSchemaResponses"]] == [0]

        # Removing it restores the namespace's strategy (FULL), on the live topic.
        removed = admin_cli(b.http_url, "topics", "remove-schema-compatibility-strategy", topic)
        assert removed.returncode == 0, removed.stderr
        assert rest("GET", strategy_url + "?applied=true") == (200, "FULL")
        wait_for(lambda: not _refused(lambda: client.create_reader(topic, pulsar.MessageId.earliest,
                                                                   schema=JsonSchema(UserV2))),
                 30, what="a reader with the new schema accepted under the namespace's FULL")
        consumer = client.subscribe(topic, "s", schema=JsonSchema(UserV2))
        client.create_producer(topic, schema=JsonSchema(UserV2)).send(UserV2(name="ada", age=36, email="a@x"))
        value, version = receive_version(consumer)
        assert value.email == "a@x" and version == encode_version(1)

        # FORWARD on a topic of a BACKWARD namespace: dropping a required field is BACKWARD-compatible only.
        assert rest("PUT", f"{b.http_url}/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy",
                    "BACKWARD")[0] == 204
        events = f"{b.http_url}/admin/v2/persistent/{namespace}/events"
        assert rest("PUT", events)[0] == 204
        fields = [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]
        full, dropped = ({"type": "JSON", "schema": json.dumps({"type": "record", "name": "E", "fields": f})}
                         for f in (fields, fields[:1]))
        assert rest("POST", f"{b.http_url}/admin/v2/schemas/{namespace}/events/schema", full)[0] == 200
        assert rest("PUT", f"{events}/schemaCompatibilityStrategy", "FORWARD") == (204, None)
        answer = rest("POST", f"{b.http_url}/admin/v2/schemas/{namespace}/events/compatibility", dropped)[1]
        assert answer["compatibility"] is False and answer["schemaCompatibilityStrategy"] == "FORWARD"
        assert rest("POST", f"{b.http_url}/admin/v2/schemas/{namespace}/events/schema", dropped)[0] == 409
        assert rest("DELETE", f"{events}/schemaCompatibilityStrategy") == (204, None)
        assert rest("POST", f"{b.http_url}/admin/v2/schemas/{namespace}/events/schema", dropped) == (
            200, {"version": {"version": 1}})
    finally:
        client.close()


def test_a_topics_validation_flag_overrides_its_namespaces_on_a_broker_process(tmp_path, zk_connect,
                                                                              bookie_factory) -> None:
    bookie_factory(2)
    (b,) = start_brokers(1, tmp_path, zk_connect)
    namespace = _namespace(b)
    topic = f"persistent://{namespace}/checked"
    url = f"{b.http_url}/admin/v2/persistent/{namespace}/checked/schemaValidationEnforced"
    client = pulsar.Client(b.pulsar_url, operation_timeout_seconds=15, logger=QUIET)

    def schemaless_refused() -> bool:
        return _refused(lambda: client.create_producer(topic))

    try:
        assert rest("POST", url, True)[0] == 404  # no such topic yet
        client.create_producer(topic, schema=StringSchema()).close()  # the topic has a schema now
        assert not schemaless_refused()  # nothing enforced by default
        for bad in ("yes", 1, {"enabled": True}):
            status, answer = rest("POST", url, bad)
            assert status == 400 and "must be true or false" in answer["reason"], bad
        assert rest("GET", url) == (200, False)

        set_ = admin_cli(b.http_url, "topics", "set-schema-validation-enforce", topic, "--enable")
        assert set_.returncode == 0, set_.stderr
        wait_for(schemaless_refused, 30, what="a producer without a schema refused by the topic's flag")
        shown = admin_cli(b.http_url, "topics", "get-schema-validation-enforce", topic, "--applied", "--json")
        assert shown.returncode == 0 and json.loads(shown.stdout) is True, shown.stderr
        client.create_producer(topic, schema=StringSchema()).close()  # producers with the schema still connect

        assert rest("DELETE", url) == (204, None)  # the namespace's (not enforced) applies again
        wait_for(lambda: not schemaless_refused(), 30, what="a producer without a schema accepted again")

        # The other way round: the namespace enforces, the topic's own false lets it through.
        ns_flag = f"{b.http_url}/admin/v2/namespaces/{namespace}/schemaValidationEnforced"
        assert rest("POST", ns_flag, True) == (204, None)
        wait_for(schemaless_refused, 30, what="a producer without a schema refused by the namespace's flag")
        assert rest("POST", url, False) == (204, None)
        assert rest("GET", url + "?applied=true") == (200, False)
        wait_for(lambda: not schemaless_refused(), 30, what="a producer without a schema let in by the topic's flag")
    finally:
        client.close()
