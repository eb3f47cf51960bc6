"""The demo's main job (`make demo`) against a two-region deployment started here: every check passes; and the
observability plane of the same deployment (its Prometheus, the dashboards, the alert rules) under that load.

The job is the geo-replication one of ``clusters/demo.py``: pulsar-client producers and consumers in both
regions of ``clusters/local.toml``, through each region's proxy (``pulsar+ssl://``, the deployment's CA, a
token of the demo-app role granted on the namespace by the job): every message everywhere exactly once, in
order, backlogs drained; then a replicated-subscription failover from the first region to the second. At
each proxy a client without credentials and a role without permission are refused, counted, and create
nothing. Then ``run`` itself, which must reuse the running deployment and exit 0.

Observability (issue 15's "must show"), on the same deployment after more load: every panel query of every
dashboard returns series and every alert rule parses over series that exist, through the real Prometheus
HTTP API (``observability.check``: a new panel or rule is checked too); ``promtool check metrics`` finds no
error in any process's ``/metrics`` (lint only about names Pulsar, BookKeeper or ZooKeeper chose); every
series a process exports is in docs/observability.md's table; and a killed bookie makes ``MagnetarBookieDown``
pending, then firing within its ``for:``.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import urllib.parse
import urllib.request

import pytest

from matplotlib.image import imread

from clusters import demo
from observability import check, series
from observability.render import RenderOptions, render_dashboards
from observability.render.model import panels_of
from observability.render.run import load_dashboard
from tests.e2e.test_supervisor import running
from tests.kit.promtool import check_metrics
from tests.kit.wait import wait_for

LOCAL = pathlib.Path(__file__).resolve().parents[2] / "clusters" / "local.toml"

pytestmark = pytest.mark.timeout(420)


DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "observability.md"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory):
    """The running two-region deployment: (DataDir, its topology.json); stopped whatever the tests did."""
    with running(LOCAL, tmp_path_factory.mktemp("local"), down_timeout_s=90) as deployment:
        yield deployment


def test_geo_demo_job_passes_every_check(local, spark_session) -> None:
    # The demo's audit runs on the test run's shared Spark session (``tests/conftest.py``), as ``run_session``
    # reuses a running one: a JVM of its own would start (~20 s) and compile with C2 (more than half its CPU here).
    ddir, topo = local
    regions = list(topo["regions"])

    # `magnetar demo` on the running deployment: it reuses it, runs the geo job, draws the dashboard and audits
    assert demo.run(ddir.root, topology=LOCAL) == 0
    assert json.loads(ddir.topology_path.read_text())["supervisor_pid"] == topo["supervisor_pid"]
    report = json.loads((ddir.root / demo.REPORT_FILE).read_text())  # the job's whole report, kept by the demo
    messages = report["messages_per_region"]

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
        assert access.proxy_metric("pulsar_proxy_binary_bytes_total") > messages * report["size_bytes"]
    for origin in regions:
        for dest in regions:
            key = f"{origin} -> {dest}" if origin != dest else f"{dest} (local)"
            assert report["delay_ms"][key]["count"] == messages, key
            assert 0 < report["delay_ms"][key]["p50"] <= report["delay_ms"][key]["p99"]
    for region in regions:
        stats = report["stats"][region]
        assert stats["msgInCounter"] == messages * len(regions)
        assert {r: (x["replicationBacklog"], x["connected"]) for r, x in stats["replication"].items()} == {
            r: (0, True) for r in regions if r != region}
        for remote, x in stats["replication"].items():  # the replicators, too, went through the remote proxy
            assert x["outboundConnection"].endswith(" via " + topo["regions"][remote]["proxy"]["pulsar_ssl"]), x
    fo = report["failover"]
    assert 0 < fo["resumed_at_seq"] <= fo["last_acked_seq"] + 1
    assert fo["received"] == fo["messages"] - fo["resumed_at_seq"]


def _alerts(prometheus: str) -> list[dict]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=10) as response:
        return json.load(response)["data"]["alerts"]


def test_prometheus_dashboards_and_alert_rules_on_the_live_deployment(local) -> None:
    ddir, topo = local
    prometheus = topo["prometheus"]["url"]
    # Load in both regions (replication, a replicated-subscription failover, refusals at the proxies), so every
    # per-topic, replication, snapshot and refusal series exists. The failover produces for 3 s: snapshots (one a
    # second) fall before the half it acknowledges, so the subscription follows to the second region at once (with
    # a second of traffic it never did, and the job waited 20 s for it).
    demo.geo_job(topo, messages=400, rate=400, failover_messages=900, failover_rate=300,
                 client_log=ddir.logs / "observability-pulsar-client.log", show_progress=False)

    # Every panel target returns series; every rule parses, over selectors that return series. Scrapes come
    # every 5 s: the check is repeated until it holds, or its last failures are shown.
    probes: list[check.Probe] = []

    def all_ok() -> bool:
        nonlocal probes
        probes = check.check(prometheus)
        return all(p.ok for p in probes)

    try:
        wait_for(all_ok, 60, interval_s=0.5, what="every dashboard and rule expression answered by Prometheus")
    except AssertionError:
        pass  # the failures are named below
    failing = [f"{p.where}: {p.error or 'no series'}: {p.expr}" for p in probes if not p.ok]
    assert probes and not failing, "\n".join(failing)
    panels = [p for p in probes if p.must_return and ".yml" not in p.where]
    assert len(panels) >= 100 and len({p.where.split(" / ")[0] for p in panels}) == 6

    # promtool on every process's /metrics; every family is in docs/observability.md.
    documented = set(re.findall(r"`([A-Za-z_:<>][\w:<>]*)`", DOCS.read_text()))
    ca, cert = series.client_material(topo)
    undocumented: set[str] = set()
    for kind, name, url in series.metrics_endpoints(topo):
        text = series.scrape(url, ca_file=ca, cert=cert)
        result = check_metrics(text)
        assert result.parsed, f"{name}: {result.output}"
        ours = [p for p in result.problems if p[0].startswith("magnetar_")]
        assert not ours, f"{name}: promtool lint on Magnetar's own names: {ours}"
        undocumented |= {f"{kind}: {n}" for n in series.families(text)
                         if series.documented_name(n) not in documented}
    assert not undocumented, f"not in {DOCS.name} (python -m observability.series): {sorted(undocumented)}"

    # A bookie killed: MagnetarBookieDown goes pending, then fires once its `for:` (30 s) has passed. The dashboards
    # are drawn while it is pending (every process's /metrics was checked above, the victim's too).
    victim = topo["regions"]["us-east"]["bookies"][-1]
    instance = urllib.parse.urlsplit(victim["metrics"]).netloc
    os.kill(victim["pid"], signal.SIGKILL)

    def state() -> str:
        found = [a["state"] for a in _alerts(prometheus)
                 if a["labels"].get("alertname") == "MagnetarBookieDown" and a["labels"].get("instance") == instance]
        return found[0] if found else ""

    assert wait_for(lambda: state() in ("pending", "firing"), 30, interval_s=0.5, what="MagnetarBookieDown pending")

    # Every panel of every dashboard drawn from the live data (`magnetar dashboards render`): a picture per
    # panel, none blank, every one with data (the killed bookie's series too, up to its death).
    drawn = render_dashboards(RenderOptions(prometheus_url=prometheus, out_dir=ddir.root / "pictures",
                                            range_s=300, step_s=5))
    assert not drawn.failures, drawn.failures
    pictures = [(d["name"], p) for d in drawn.manifest["dashboards"] for p in d["panels"]]
    assert len(pictures) == sum(len(panels_of(load_dashboard(f))[0]) for f in check.DASHBOARDS.glob("*.json"))
    for dashboard, panel in pictures:
        assert panel["status"] == "ok" and panel["series"] > 0, (dashboard, panel)
        rgb = imread(ddir.root / "pictures" / panel["file"])[..., :3]
        assert float(rgb.var()) > 0.005, f"{dashboard}/{panel['file']} is blank"

    wait_for(lambda: state() == "firing", 30 + 5 + 5 + 20, interval_s=0.5, what="MagnetarBookieDown firing")
    fired = next(a for a in _alerts(prometheus) if a["labels"].get("alertname") == "MagnetarBookieDown")
    assert fired["labels"]["cluster"] == "us-east" and fired["labels"]["severity"] == "critical"
