"""``/admin/v2/{domain}/{tenant}/{namespace}/{topic}/replication``: a topic's own replication clusters,
checked exactly as the namespace's are; bad bodies and unknown names change nothing; any broker answers."""

from __future__ import annotations

import pytest

from config_store import ConfigurationStore, NotFoundError
from tests.unit.test_admin_rest import call, http, nodes, setup_namespace  # noqa: F401 (fixtures)

TOPIC = "/admin/v2/persistent/t/ns/orders"


@pytest.fixture
async def region(nodes, http):  # noqa: F811
    """Two brokers of cluster ``c``, a second cluster ``west`` allowed for tenant ``t``, namespace ``t/ns``."""
    a, b = nodes
    await setup_namespace(http, a.url)
    assert (await call(http, "PUT", f"{a.url}/admin/v2/clusters/west", {"serviceUrl": "http://w:8080"}))[0] == 204
    assert (await call(http, "PUT", f"{a.url}/admin/v2/clusters/east", {"serviceUrl": "http://e:8080"}))[0] == 204
    assert (await call(http, "POST", f"{a.url}/admin/v2/tenants/t", {"allowedClusters": ["c", "west"]}))[0] == 204
    return a, b


async def stored(node, topic: str = "orders") -> list[str] | None:
    """What the configuration store holds for the topic (None: no override)."""
    config = ConfigurationStore(node.store)
    try:
        return (await config.get_topic_policies("t", "ns", "persistent", topic)).value.replication_clusters
    except NotFoundError:
        return None


async def test_set_get_remove_with_pulsars_answers(region, http) -> None:  # noqa: F811
    a, b = region
    assert await call(http, "GET", a.url + TOPIC + "/replication") == (204, None)  # nothing set
    assert await call(http, "GET", a.url + TOPIC + "/replication?applied=true") == (200, ["c"])
    assert await call(http, "POST", a.url + TOPIC + "/replication", ["c", "west"]) == (204, None)
    assert await stored(a) == ["c", "west"]
    for node in (a, b):  # any broker answers: no redirect to the owner
        assert await call(http, "GET", node.url + TOPIC + "/replication", follow=False) == (200, ["c", "west"])
    assert await call(http, "GET", a.url + TOPIC + "/replication?applied=true") == (200, ["c", "west"])
    assert await call(http, "POST", b.url + TOPIC + "/replication", ["west"]) == (204, None)
    assert await call(http, "GET", a.url + TOPIC + "/replication") == (200, ["west"])
    assert await call(http, "DELETE", a.url + TOPIC + "/replication") == (204, None)
    assert await stored(a) is None
    assert await call(http, "GET", a.url + TOPIC + "/replication") == (204, None)
    assert await call(http, "DELETE", a.url + TOPIC + "/replication") == (204, None)  # idempotent
    # the namespace's own list is untouched throughout
    assert await call(http, "GET", a.url + "/admin/v2/namespaces/t/ns/replication") == (200, ["c"])


async def test_partitioned_base_name_and_partitions_are_stored_as_given(region, http) -> None:  # noqa: F811
    a, _ = region
    assert (await call(http, "PUT", a.url + "/admin/v2/persistent/t/ns/events/partitions", 3))[0] == 204
    assert await call(http, "POST", a.url + "/admin/v2/persistent/t/ns/events/replication", ["west"]) == (204, None)
    assert await stored(a, "events") == ["west"]
    assert await stored(a, "events-partition-0") is None
    assert await call(http, "POST", a.url + "/admin/v2/non-persistent/t/ns/x/replication", ["c"]) == (204, None)
    assert await stored(a, "x") is None  # another domain, another key


async def test_bad_bodies_and_unknown_names_change_nothing(region, http) -> None:  # noqa: F811
    a, _ = region
    url = a.url + TOPIC + "/replication"
    assert await call(http, "POST", url, ["c"]) == (204, None)
    for body in ("c", {"clusters": ["c"]}, [1], ["c", None], ["c", "c"], None, 3):
        status, answer = await call(http, "POST", url, body)
        assert status == 400 and answer["reason"], (body, status, answer)
    for raw in (b"", b"[not json", b"NaN"):
        status, answer = await call(http, "POST", url, raw=raw)
        assert status == 400 and answer["reason"], raw
    status, answer = await call(http, "POST", url, [])
    assert status == 412 and "empty" in answer["reason"]
    status, answer = await call(http, "POST", url, ["c", "mars"])  # unknown cluster: as the namespace call
    assert status == 412 and "mars" in answer["reason"]
    status, answer = await call(http, "POST", url, ["c", "east"])  # exists, not allowed for the tenant
    assert status == 403 and "east" in answer["reason"]
    status, answer = await call(http, "POST", url, raw=b"[" + b'"c",' * 2000 + b'"c"]')
    assert status == 413
    assert await stored(a) == ["c"]  # nothing changed

    for method, body in (("GET", None), ("POST", ["c"]), ("DELETE", None)):
        status, answer = await call(http, method, a.url + "/admin/v2/persistent/t/nope/orders/replication", body)
        assert status == 404 and "t/nope does not exist" in answer["reason"], method
        status, answer = await call(http, method, a.url + "/admin/v2/persistent/nobody/ns/orders/replication", body)
        assert status == 404, method
    status, answer = await call(http, "POST", a.url + "/admin/v2/persistent/t/ns/bad%2Fname/replication", ["c"])
    assert status == 400 and answer["reason"]
    status, answer = await call(http, "GET", url + "?applied=maybe")
    assert status == 400 and "applied" in answer["reason"]
    assert await stored(a) == ["c"]
