"""The demo's main job (`make demo`) against a two-region deployment started here: every check passes.

The job is the geo-replication one of ``clusters/demo.py``: pulsar-client producers and consumers in both
regions of ``clusters/local.toml``, through each region's proxy (``pulsar+ssl://``, the deployment's CA, a
token of the demo-app role granted on the namespace by the job): every message everywhere exactly once, in
order, backlogs drained; then a replicated-subscription failover from the first region to the second. At
each proxy a client without credentials and a role without permission are refused, counted, and create
nothing. Then ``run`` itself, which must reuse the running deployment and exit 0.
"""

from __future__ import annotations

import json
import pathlib

import pytest

from clusters import demo
from tests.e2e.test_supervisor import running

LOCAL = pathlib.Path(__file__).resolve().parents[2] / "clusters" / "local.toml"

pytestmark = pytest.mark.timeout(420)


@pytest.fixture
def local(tmp_path: pathlib.Path):
    """The running two-region deployment: (DataDir, its topology.json); stopped whatever the test did."""
    with running(LOCAL, tmp_path, down_timeout_s=90) as deployment:
        yield deployment


def test_geo_demo_job_passes_every_check(local) -> None:
    ddir, topo = local
    regions = list(topo["regions"])

    report = demo.geo_job(topo, messages=2_000, rate=1_000, failover_messages=1_000, failover_rate=250,
                          client_log=ddir.logs / "demo-pulsar-client.log", show_progress=False)

    failed = [c for c in report["checks"] if not c["ok"]]
    assert report["ok"] and not failed, failed
    names = {c["name"] for c in report["checks"]}
    assert {"every message arrived in every region exactly once", "each producer's order kept in every region",
            "replication backlogs drained to 0", "nothing skipped after the failover",
            "demo-app granted produce and consume", "replication enters each region through its proxy"} <= names
    details = {c["name"]: c["detail"] for c in report["checks"]}
    for region in regions:  # what each proxy keeps out, each refusal counted by the proxy
        unauthenticated = details[f"a client without credentials is refused ({region} proxy)"]
        assert "Timeout" in unauthenticated and 'reason="no_credentials"} +0' not in unauthenticated
        assert "nothing created" in unauthenticated
        ungranted = details[f"a role without permission is refused ({region} proxy)"]
        assert "AuthorizationError for create_producer, subscribe" in ungranted and "nothing created" in ungranted

    # The job's clients went through the proxies: each proxy relayed their connections, with TLS.
    for region in regions:
        access = demo.access_of(topo, region)
        assert access.service_url.startswith("pulsar+ssl://") and access.through_proxy
        assert access.proxy_metric("pulsar_proxy_binary_bytes_total") > 2_000 * 1024
    for origin in regions:
        for dest in regions:
            key = f"{origin} -> {dest}" if origin != dest else f"{dest} (local)"
            assert report["delay_ms"][key]["count"] == 2_000, key
            assert 0 < report["delay_ms"][key]["p50"] <= report["delay_ms"][key]["p99"]
    for region in regions:
        stats = report["stats"][region]
        assert stats["msgInCounter"] == 2_000 * len(regions)
        assert {r: (x["replicationBacklog"], x["connected"]) for r, x in stats["replication"].items()} == {
            r: (0, True) for r in regions if r != region}
        for remote, x in stats["replication"].items():  # the replicators, too, went through the remote proxy
            assert x["outboundConnection"].endswith(" via " + topo["regions"][remote]["proxy"]["pulsar_ssl"]), x
    fo = report["failover"]
    assert 0 < fo["resumed_at_seq"] <= fo["last_acked_seq"] + 1
    assert fo["received"] == fo["messages"] - fo["resumed_at_seq"]

    # `magnetar demo` on the same data dir reuses the deployment and passes too.
    assert demo.run(ddir.root, topology=LOCAL) == 0
    assert json.loads(ddir.topology_path.read_text())["supervisor_pid"] == topo["supervisor_pid"]
