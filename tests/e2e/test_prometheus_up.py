"""`magnetar up` with a `[prometheus]` table: the real Prometheus scrapes every process of a small secured deployment
(a global ZooKeeper; one region with a ZooKeeper, a bookie, a broker and a TLS proxy) and reports every target up,
with the job and cluster labels dashboards group by; ZooKeeper's endpoint passes `promtool check metrics`; and
`magnetar down` leaves nothing running or listening, Prometheus included."""

from __future__ import annotations

import json
import pathlib
import urllib.parse
import urllib.request
from typing import Any

import pytest

from tests.e2e.test_supervisor import assert_all_gone, magnetar, running
from tests.kit.promtool import check_metrics
from tests.kit.wait import wait_for

SMALL = """
name = "prom-small"
[supervisor]
startup_timeout_s = 90
stop_grace_s = 5
[prometheus]
scrape_interval_s = 1.0
[global_zookeeper]
[[regions]]
name = "east"
[regions.bookies]
count = 1
[regions.brokers]
count = 1
[regions.proxy]
tls_require_trusted_client_cert = true
"""

EXPECTED = {  # (job, cluster) of every target, by process name
    "global-zookeeper": ("zookeeper", "global"), "east-zookeeper": ("zookeeper", "east"),
    "east-bookie-1": ("bookie", "east"), "east-broker-1": ("broker", "east"), "east-proxy": ("proxy", "east"),
}

pytestmark = pytest.mark.timeout(240)


def api(url: str, path: str, **params: str) -> Any:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{url}{path}{query}", timeout=5) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]


def test_prometheus_scrapes_every_process_and_goes_down_with_the_rest(tmp_path: pathlib.Path) -> None:
    topology = tmp_path / "small.toml"
    topology.write_text(SMALL)
    with running(topology, tmp_path) as (ddir, doc):
        url = doc["prometheus"]["url"]
        assert doc["prometheus"]["kind"] == "prometheus" and url.startswith("http://127.0.0.1:")
        region = doc["regions"]["east"]
        entries = [doc["global_zookeeper"], region["zookeeper"], *region["bookies"], *region["brokers"], region["proxy"]]
        wanted = {(job, cluster, urllib.parse.urlsplit(e["metrics"]).netloc)
                  for e in entries for job, cluster in [EXPECTED[e["name"]]]}

        def all_up() -> set | None:
            active = api(url, "/api/v1/targets", state="active")["activeTargets"]
            seen = {(t["labels"]["job"], t["labels"]["cluster"], t["labels"]["instance"]) for t in active}
            healthy = all(t["health"] == "up" for t in active)
            return seen if seen == wanted and healthy else None

        wait_for(all_up, timeout_s=60, interval_s=0.5, what="every target up in Prometheus")
        up = api(url, "/api/v1/query", query="up")["result"]
        assert {(r["metric"]["job"], r["metric"]["cluster"]): r["value"][1] for r in up} == {
            pair: "1" for pair in EXPECTED.values()}
        # The ZooKeepers' numbers are scraped too, not only their wrapper's endpoint.
        znodes = wait_for(lambda: api(url, "/api/v1/query", query="znode_count")["result"] or None, timeout_s=30,
                          interval_s=0.5, what="znode_count scraped")
        assert {r["metric"]["cluster"] for r in znodes} == {"global", "east"}
        assert all(float(r["value"][1]) > 0 for r in znodes)

        with urllib.request.urlopen(region["zookeeper"]["metrics"], timeout=5) as response:
            check = check_metrics(response.read())
        assert check.parsed, check.output
        assert all(not name.startswith("magnetar_") for name, _ in check.problems), check.output

        status = magnetar("status", "--data-dir", str(ddir.root))
        assert status.returncode == 0 and url in status.stdout, status.stdout
        down = magnetar("down", "--data-dir", str(ddir.root), timeout_s=90)
        assert down.returncode == 0, down.stdout + down.stderr
        assert_all_gone(ddir)
