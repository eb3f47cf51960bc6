"""``magnetar dashboards render`` against a real Prometheus (Debian's ``/usr/bin/prometheus``).

The test serves a counter and a gauge at ``/metrics`` (observability's own endpoint, prometheus_client), has a
real Prometheus scrape it every second as job ``broker`` of cluster ``test-east``, waits until samples are
stored (asking Prometheus's query API, with a deadline), then renders the fixture dashboard: every panel is a
PNG that is not blank, data panels count series and show their colour, the absent metric's panel says
"No data" and still counts; a query Prometheus refuses fails with its panel and expression named (exit 1),
and an unreachable Prometheus is exit 1 too.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import numpy as np
import pytest
from matplotlib.image import imread
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from typer.testing import CliRunner

from magnetar.cli import app
from magnetar.net import free_port
from observability import serve_metrics
from tests.kit.process import ManagedProcess

PROMETHEUS = pathlib.Path("/usr/bin/prometheus")
FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "data" / "dashboards" / "render-fixture.json"
ROOT = pathlib.Path(__file__).resolve().parents[2]



class _Target:
    """A counter that grows at every scrape (so its rate is not zero) and a gauge that moves."""

    def __init__(self) -> None:
        self.scrapes = 0

    def collect(self):
        self.scrapes += 1
        requests = CounterMetricFamily("magnetar_render_test_requests", "Requests.", labels=["kind"])
        requests.add_metric(["read"], 5.0 * self.scrapes)
        requests.add_metric(["write"], 2.0 * self.scrapes)
        yield requests
        yield GaugeMetricFamily("magnetar_render_test_queue_bytes", "Queued bytes.",
                                value=1024.0 * (100 + 37 * (self.scrapes % 11)))


def _query(url: str, expr: str) -> list:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5) as r:
        return json.load(r)["data"]["result"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus scraping a real /metrics endpoint; yields its URL once it holds enough samples."""
    base = tmp_path_factory.mktemp("render-prometheus")
    registry = CollectorRegistry()
    registry.register(_Target())
    metrics = serve_metrics(registry, "127.0.0.1", 0)
    port = free_port()
    config = base / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: broker\n    static_configs:\n"
        f"      - targets: ['{metrics.address}']\n        labels: {{cluster: test-east}}\n"
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
            return r.status == 200

    proc = ManagedProcess("prometheus", [
        str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={base / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ], log_path=base / "prometheus.log", health=ready)
    try:
        proc.start(timeout_s=30)
        # rate() needs two samples in its window; a few more make a line worth drawing.
        proc.wait_until(lambda: len(_query(url, "count_over_time(magnetar_render_test_queue_bytes[1m]) >= 4")) == 1
                        and len(_query(url, "count_over_time(magnetar_render_test_requests_total[1m]) >= 4")) == 2,
                        timeout_s=30, what="4 scrapes of the test target stored")
        yield url
    finally:
        proc.terminate(grace_s=5)
        proc.cleanup()
        metrics.close()
        shutil.rmtree(base, ignore_errors=True)


def _not_blank(path: pathlib.Path) -> np.ndarray:
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 200, f"{path} is {image.shape}"
    rgb = image[..., :3]
    assert float(rgb.var()) > 0.005, f"{path} is blank (pixel variance {rgb.var():.5f})"
    return rgb


def _coloured_pixels(rgb: np.ndarray) -> int:
    """Pixels clearly not grey: a drawn line or a stat's coloured value (text and axes are black/grey)."""
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 0.25).sum())


def test_renders_every_panel_of_the_fixture(prometheus, tmp_path):
    out = tmp_path / "pictures"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "magnetar", "dashboards", "render", "--prometheus", prometheus, "--out", str(out),
         "--dashboard", str(FIXTURE), "--range", "1m", "--step", "1s", "--var", "cluster=test-east"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "6 panels drawn" in done.stdout
    assert time.monotonic() - started < 60

    manifest = json.loads((out / "manifest.json").read_text())
    (dashboard,) = manifest["dashboards"]
    assert dashboard["name"] == "render-fixture" and dashboard["title"] == "Render fixture"
    assert [s["title"] for s in dashboard["skipped"]] == ["Notes"]
    panels = {p["title"]: p for p in dashboard["panels"]}
    assert len(panels) == 6
    expected_series = {"Request rate": 2, "Queue size": 1, "Requests so far": 1, "Queue fill": 1, "Targets up": 1,
                       "Topic backlog (absent)": 0}
    assert {title: p["series"] for title, p in panels.items()} == expected_series
    for title, panel in panels.items():
        assert panel["status"] == ("no data" if title == "Topic backlog (absent)" else "ok"), panel
        rgb = _not_blank(out / panel["file"])
        if panel["series"]:
            assert _coloured_pixels(rgb) > 10, f"{title}: nothing coloured drawn in {panel['file']}"
        else:
            assert _coloured_pixels(rgb) == 0, f"{title}: a panel without data draws no series"
    assert panels["Request rate"]["file"] == "render-fixture/01-request-rate.png"
    # The variable chose the cluster; $__rate_interval became 1m (4 x 1 s, at least 1m).
    assert panels["Request rate"]["queries"][0]["expr"] == \
        'sum by (kind) (rate(magnetar_render_test_requests_total{cluster=~"test-east"}[1m]))'
    assert panels["Topic backlog (absent)"]["queries"][0]["expr"] == \
        'magnetar_render_test_absent{namespace=~".*", topic=~".*"}'
    index = (out / "index.html").read_text()
    assert all(p["file"] in index for p in panels.values())


def test_another_cluster_has_no_data_but_every_panel_is_drawn(prometheus, tmp_path):
    result = CliRunner().invoke(app, ["dashboards", "render", "--prometheus", prometheus, "--out", str(tmp_path),
                                      "--dashboard", str(FIXTURE), "--range", "1m", "--step", "5s",
                                      "--var", "cluster=elsewhere"])
    assert result.exit_code == 0, result.output
    panels = json.loads((tmp_path / "manifest.json").read_text())["dashboards"][0]["panels"]
    # Every query but the absent one names the cluster, and a sum over no series is no series.
    assert [p["series"] for p in panels] == [0] * 6
    assert all(p["status"] == "no data" and (tmp_path / p["file"]).is_file() for p in panels)


def test_a_refused_query_names_its_panel_and_expression(prometheus, tmp_path):
    broken = json.loads(FIXTURE.read_text())
    broken["panels"][1]["targets"][0]["expr"] = "sum(rate(magnetar_render_test_requests_total[$__rate_interval]"
    dashboard = tmp_path / "broken.json"
    dashboard.write_text(json.dumps(broken))
    result = CliRunner().invoke(app, ["dashboards", "render", "--prometheus", prometheus, "--out",
                                      str(tmp_path / "out"), "--dashboard", str(dashboard), "--range", "1m"])
    assert result.exit_code == 1, result.output
    assert "panel 'broken / 01 Request rate'" in result.stderr
    assert "expr: sum(rate(magnetar_render_test_requests_total[1m]" in result.stderr
    assert "bad_data" in result.stderr
    panels = json.loads((tmp_path / "out" / "manifest.json").read_text())["dashboards"][0]["panels"]
    assert panels[0]["status"] == "error"
    assert [p["status"] for p in panels[1:]] == ["ok"] * 4 + ["no data"]  # the others are drawn all the same
    _not_blank(tmp_path / "out" / panels[0]["file"])


def test_unreachable_prometheus_is_exit_1_and_nothing_is_drawn(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["dashboards", "render", "--prometheus", url, "--out", str(tmp_path / "out"),
                                      "--dashboard", str(FIXTURE)])
    assert result.exit_code == 1, result.output
    assert f"Prometheus at {url} is unreachable" in result.stderr
    assert not (tmp_path / "out").exists()


def test_bad_input_is_exit_2(tmp_path):
    runner = CliRunner()
    base = ["dashboards", "render", "--prometheus", "http://127.0.0.1:1", "--out", str(tmp_path / "out")]
    for extra, message in [(["--dashboard", "no-such-dashboard"], "no dashboard 'no-such-dashboard'"),
                           (["--dashboard", str(FIXTURE), "--range", "soon"], "not a duration"),
                           (["--dashboard", str(FIXTURE), "--range", "1d", "--step", "1s"], "raise --step"),
                           (["--dashboard", str(FIXTURE), "--var", "cluster"], "name=value")]:
        result = runner.invoke(app, base + extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.stderr, (extra, result.stderr)
    assert not (tmp_path / "out").exists()
