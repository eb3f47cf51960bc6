"""Options of ``spark.read.format("magnetar")``: what is accepted, and that each bad one is named (pure)."""

from __future__ import annotations

import json
import pathlib

import pytest

from magnetar.errors import MagnetarError
from spark.source.errors import SourceOptionError
from spark.source.offsets import Position
from spark.source.options import RegionSpec, parse_options, pattern_matches

ONE = {"admin.url": "http://127.0.0.1:8080", "metadata.url": "127.0.0.1:2181/region-a"}
T = "persistent://t/ns/x"


def _refused(options, *, streaming: bool = False) -> SourceOptionError:
    with pytest.raises(SourceOptionError) as caught:
        parse_options(options, streaming=streaming)
    assert isinstance(caught.value, MagnetarError)
    return caught.value


def test_one_region_and_defaults() -> None:
    opts = parse_options({**ONE, "topic": "x"})
    assert opts.regions == (RegionSpec(None, "http://127.0.0.1:8080", "127.0.0.1:2181/region-a"),)
    assert opts.selection.topics == ("persistent://public/default/x",)
    assert (opts.starting, opts.ending) == ("earliest", "latest")
    assert (opts.max_entries_per_split, opts.rows_per_batch) == (5000, 4096)
    assert parse_options({**ONE, "topic": "x"}, streaming=True).starting == "latest"


def test_names_are_case_insensitive_as_spark_passes_them() -> None:
    lowered = {k.lower(): v for k, v in {**ONE, "topicsPattern": "persistent://t/ns/a-.*",
                                         "maxEntriesPerSplit": "7", "region": "r1"}.items()}
    opts = parse_options(lowered)
    assert opts.selection.pattern == "persistent://t/ns/a-.*" and opts.selection.namespace == "t/ns"
    assert opts.max_entries_per_split == 7 and opts.regions[0].name == "r1"


def test_topics_and_path() -> None:
    assert parse_options({**ONE, "topics": f"{T}, y ,{T}"}).selection.topics == (T, "persistent://public/default/y")
    assert parse_options({**ONE, "path": T}).selection.topics == (T,)


@pytest.mark.parametrize("options, option", [
    ({**ONE}, "topic"),
    ({**ONE, "topic": "a", "topics": "b"}, "topics"),
    ({**ONE, "topics": "a,,b"}, "topics"),
    ({**ONE, "topic": "non-persistent://t/ns/x"}, "topic"),
    ({**ONE, "topic": "persistent://only/two"}, "topic"),
    ({**ONE, "topicsPattern": "persistent://t/ns/(["}, "topicsPattern"),
    ({**ONE, "topicsPattern": "persistent://t/n.*/x"}, "topicsPattern"),
    ({**ONE, "topicsPattern": "non-persistent://t/ns/.*"}, "topicsPattern"),
    ({**ONE, "topic": "x", "startingoffsets": "{nope"}, "startingOffsets"),
    ({**ONE, "topic": "x", "startingOffsets": "latest"}, "startingOffsets"),
    ({**ONE, "topic": "x", "endingOffsets": "earliest"}, "endingOffsets"),
    ({**ONE, "topic": T, "startingOffsets": json.dumps({T: {"ledgerId": -1, "entryId": 0}})}, "startingOffsets"),
    ({**ONE, "topic": T, "startingOffsets": json.dumps({T: {"ledgerId": 1}})}, "startingOffsets"),
    ({**ONE, "topic": T, "startingOffsets": json.dumps({"persistent://t/ns/other": {"ledgerId": 1, "entryId": 0}})},
     "startingOffsets"),
    ({**ONE, "topic": "x", "maxEntriesPerSplit": "0"}, "maxEntriesPerSplit"),
    ({**ONE, "topic": "x", "rowsPerBatch": "many"}, "rowsPerBatch"),
    ({**ONE, "topic": "x", "startingOfsets": "earliest"}, "startingOfsets"),
    ({"metadata.url": ONE["metadata.url"], "topic": "x"}, "admin.url"),
    ({"admin.url": ONE["admin.url"], "topic": "x"}, "metadata.url"),
    ({**ONE, "admin.url": "pulsar://127.0.0.1:6650", "topic": "x"}, "admin.url"),
    ({**ONE, "service.url": "http://h:1", "topic": "x"}, "service.url"),
    ({**ONE, "metadata.url": "no port here", "topic": "x"}, "metadata.url"),
    ({**ONE, "topic": "x", "tls.trust.certs.file": "/nonexistent/ca.pem"}, "tls.trust.certs.file"),
    ({**ONE, "topic": "x", "auth.token.file": "/nonexistent/token"}, "auth.token.file"),
    ({**ONE, "topic": "x", "regions": "{}"}, "admin.url"),
    ({"topic": "x", "regions": "[1]"}, "regions"),
    ({"topic": "x", "regions": json.dumps({"a": "http://h:1"})}, "regions"),
    ({"topic": "x", "regions": json.dumps({"a": {"admin.url": "http://h:1"}})}, "regions"),
    ({"topic": "x", "topology": "/nonexistent/topology.json"}, "topology"),
])
def test_each_bad_option_is_named(options, option) -> None:
    error = _refused(options)
    assert error.option.lower() == option.lower()
    assert f"option {error.option!r}" in str(error)


def test_streaming_refuses_an_end() -> None:
    assert _refused({**ONE, "topic": "x", "endingOffsets": "latest"}, streaming=True).option == "endingOffsets"


def test_offsets_by_topic_and_by_region() -> None:
    pos = {"ledgerId": 3, "entryId": 4}
    opts = parse_options({**ONE, "topic": T, "startingOffsets": json.dumps({T: pos}),
                          "endingOffsets": json.dumps({T: {"ledgerId": 9, "entryId": 0}})})
    assert opts.starting == {"": {T: Position(3, 4)}} and opts.ending == {"": {T: Position(9, 0)}}
    # A partition of a topic read is a topic read.
    part = f"{T}-partition-1"
    assert parse_options({**ONE, "topic": T, "startingOffsets": json.dumps({part: pos})}).starting == \
        {"": {part: Position(3, 4)}}
    two = json.dumps({"a": {"admin.url": "http://h:1", "metadata.url": "h:2"},
                      "b": {"admin.url": "http://h:3", "metadata.url": "h:4", "auth.token": "tok"}})
    opts = parse_options({"topic": T, "regions": two, "startingOffsets": json.dumps({"b": {T: pos}})})
    assert [r.name for r in opts.regions] == ["a", "b"] and opts.regions[1].token == "tok"
    assert opts.starting == {"b": {T: Position(3, 4)}}
    assert _refused({"topic": T, "regions": two, "startingOffsets": json.dumps({T: pos})}).option == "startingOffsets"
    assert _refused({"topic": T, "regions": two, "startingOffsets": json.dumps({"c": {T: pos}})}).option == \
        "startingOffsets"


def _topology(tmp_path: pathlib.Path, *, secured: bool) -> pathlib.Path:
    regions = {}
    for i, name in enumerate(("us-east", "eu-west")):
        broker = {"http": f"http://127.0.0.1:{8000 + i}", "pulsar": f"pulsar://127.0.0.1:{6650 + i}"}
        entry = {"zookeeper": {"connect": f"127.0.0.1:{2181 + i}"}, "brokers": [broker]}
        if secured:
            entry["proxy"] = {"https": f"https://127.0.0.1:{8443 + i}"}
        regions[name] = entry
    doc = {"regions": regions}
    if secured:
        (tmp_path / "admin.jwt").write_text("secret-token\n")
        (tmp_path / "ca.pem").write_text("ca")
        doc["security"] = {"ca_file": str(tmp_path / "ca.pem"), "superuser_roles": ["admin"],
                           "roles": {"admin": {"token_file": str(tmp_path / "admin.jwt")}}}
    path = tmp_path / "topology.json"
    path.write_text(json.dumps(doc))
    return path


def test_topology_gives_every_region(tmp_path) -> None:
    path = _topology(tmp_path, secured=False)
    opts = parse_options({"topic": "x", "topology": str(tmp_path)})
    assert [(r.name, r.admin_url, r.metadata_url, r.explicit) for r in opts.regions] == [
        ("us-east", "http://127.0.0.1:8000", "127.0.0.1:2181", False),
        ("eu-west", "http://127.0.0.1:8001", "127.0.0.1:2182", False)]
    assert [r.name for r in parse_options({"topic": "x", "topology": str(path), "regions": "eu-west"}).regions] == \
        ["eu-west"]
    assert _refused({"topic": "x", "topology": str(path), "regions": "mars"}).option == "regions"
    assert _refused({"topic": "x", "topology": str(path), "admin.url": "http://h:1"}).option == "admin.url"


def test_secured_topology_reads_through_the_proxy_with_the_admin_token(tmp_path) -> None:
    _topology(tmp_path, secured=True)
    (east, _) = parse_options({"topic": "x", "topology": str(tmp_path)}).regions
    assert east.admin_url == "https://127.0.0.1:8443"
    assert (east.token, east.tls_trust_certs_file, east.explicit) == ("secret-token", str(tmp_path / "ca.pem"), True)


def test_pattern_matches_partitions_by_their_topic() -> None:
    assert pattern_matches("persistent://t/ns/orders", "persistent://t/ns/orders-partition-2")
    assert pattern_matches("persistent://t/ns/ord.*", "persistent://t/ns/orders")
    assert not pattern_matches("persistent://t/ns/ord", "persistent://t/ns/orders")


def test_decode_schema_is_a_boolean_defaulting_to_true() -> None:
    assert parse_options({**ONE, "topic": T}).decode_schema is True
    assert parse_options({**ONE, "topic": T, "decodeschema": "FALSE"}).decode_schema is False
    with pytest.raises(SourceOptionError, match="decodeSchema"):
        parse_options({**ONE, "topic": T, "decodeSchema": "yes"})
