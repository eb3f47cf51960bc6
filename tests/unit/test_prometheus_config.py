"""The deployment's Prometheus: the ``[prometheus]`` table, and the scrape configuration written from a plan (one job
per process kind, a ``cluster`` label per region, TLS towards proxies, Magnetar's rule files), checked by the real
``promtool check config``."""

from __future__ import annotations

import json
import pathlib

import pytest

import observability
from clusters import STANDALONE, security
from clusters.kinds import KINDS, Plan, make_plan
from clusters.prometheus import PrometheusKind, config_of
from clusters.supervisor import topology_document
from clusters.topology import PrometheusSettings, load, parse
from magnetar.errors import ConfigError
from observability.prometheus import ScrapeTarget, scrape_config
from observability.prometheus.config import duration
from tests.kit.promtool import check_config

ROOT = pathlib.Path(__file__).resolve().parents[2]

SECURED = """
name = "two"
[prometheus]
scrape_interval_s = 2.5
[global_zookeeper]
[[regions]]
name = "us-east"
[regions.bookies]
count = 2
[regions.brokers]
count = 2
[regions.proxy]
[[regions]]
name = "eu-west"
[regions.bookies]
count = 1
[regions.brokers]
count = 1
[regions.proxy]
tls_require_trusted_client_cert = true
"""


def plan_of(text: str, tmp_path: pathlib.Path) -> Plan:
    ports = iter(range(20000, 30000))
    return make_plan(parse(text, path="topo.toml"), tmp_path, pick_port=lambda host: next(ports))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, path="topo.toml")
    return str(info.value)


def test_prometheus_table_defaults_and_the_bundled_topologies() -> None:
    topology = parse("name = 'x'\n[prometheus]\n[[regions]]\nname = 'a'\n", path="topo.toml")
    assert topology.prometheus == PrometheusSettings()
    assert topology.prometheus.scrape_interval_s == 5.0 and topology.prometheus.port == 0
    assert parse("name = 'x'\n[[regions]]\nname = 'a'\n", path="topo.toml").prometheus is None
    for file in ("standalone.toml", "local.toml", "three-regions.toml"):
        settings = load(ROOT / "clusters" / file).prometheus
        assert settings is not None and settings.scrape_interval_s == 5.0, file


@pytest.mark.parametrize("table, expected", [
    ("scrape_interval_s = 0", "prometheus.scrape_interval_s: must be in [0.5, 300], got 0.0"),
    ("port = 80", "prometheus.port: must be 0 (pick a free port) or in [1024, 65535], got 80"),
    ("retention_s = 60", "prometheus.retention_s: must be in [600, 31622400]"),
    ("retention_size_bytes = 1024", "prometheus.retention_size_bytes: must be in [16 MiB, 1 TiB]"),
    ("scrape_interval = 5", "prometheus.scrape_interval: unknown key"),
    ("enable_lifecycle = 'yes'", "prometheus.enable_lifecycle"),
])
def test_prometheus_mistakes_are_named(table: str, expected: str) -> None:
    assert expected in error_of(f"name = 'x'\n[prometheus]\n{table}\n[[regions]]\nname = 'a'\n")


def test_a_zookeeper_metrics_port_must_differ_from_its_client_port() -> None:
    message = error_of("name = 'x'\n[[regions]]\nname = 'a'\n[regions.zookeeper]\nport = 3000\nmetrics_port = 3000\n")
    assert "regions[0].zookeeper.metrics_port: must differ from port (both 3000)" in message


def test_prometheus_starts_last_and_is_in_topology_json(tmp_path: pathlib.Path) -> None:
    plan = plan_of(SECURED, tmp_path)
    assert [i.name for i in plan.tiers()[-1]] == ["prometheus"]
    inst = plan.one(region=None, slot="prometheus")
    state = {"supervisor": {"pid": 1}, "processes": [
        {"name": i.name, "pid": None, "log": "x", "data_dir": "y"} for i in plan.instances]}
    doc = topology_document(plan, state)
    assert doc["prometheus"]["kind"] == "prometheus"
    assert doc["prometheus"]["url"] == f"http://127.0.0.1:{inst.ports['web']}"
    assert doc["global_zookeeper"]["metrics"].startswith("http://127.0.0.1:")
    assert "prometheus" not in topology_document(make_plan(parse("name = 'x'\n[[regions]]\nname = 'a'\n"), tmp_path / "n"),
                                                 {"supervisor": {"pid": 1}, "processes": [
                                                     {"name": "a-zookeeper", "pid": None, "log": "x", "data_dir": "y"}]})


def test_scrape_config_has_one_job_per_kind_with_a_cluster_label_per_region(tmp_path: pathlib.Path) -> None:
    plan = plan_of(SECURED, tmp_path)
    config = config_of(plan, plan.topology.prometheus)
    assert config["global"] == {"scrape_interval": "2500ms", "evaluation_interval": "2500ms", "scrape_timeout": "2500ms"}
    rules = pathlib.Path(observability.__file__).resolve().parent / "prometheus" / "rules" / "*.yml"
    assert config["rule_files"] == [str(rules)] and pathlib.Path(config["rule_files"][0]).is_absolute()
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert list(jobs) == ["zookeeper", "bookie", "broker", "proxy"]

    def targets(job: str) -> dict[str, list[str]]:
        return {g["labels"]["cluster"]: g["targets"] for g in jobs[job]["static_configs"]}

    by_name = {i.name: i for i in plan.instances}
    assert targets("zookeeper") == {
        cluster: [f"127.0.0.1:{by_name[name].ports['metrics']}"]
        for cluster, name in (("global", "global-zookeeper"), ("us-east", "us-east-zookeeper"),
                              ("eu-west", "eu-west-zookeeper"))}
    assert targets("bookie") == {"us-east": [f"127.0.0.1:{by_name[f'us-east-bookie-{n}'].ports['http']}" for n in (1, 2)],
                                 "eu-west": [f"127.0.0.1:{by_name['eu-west-bookie-1'].ports['http']}"]}
    # Brokers: /metrics on the plain admin port, open even in a secured deployment.
    assert targets("broker")["us-east"] == [f"127.0.0.1:{by_name[f'us-east-broker-{n}'].ports['http']}" for n in (1, 2)]
    for job in ("zookeeper", "bookie", "broker"):
        assert jobs[job]["scheme"] == "http" and jobs[job]["metrics_path"] == "/metrics" and "tls_config" not in jobs[job]
    # Proxies serve HTTPS only: the deployment's CA, and the prometheus role's client certificate.
    proxy = jobs["proxy"]
    assert proxy["scheme"] == "https"
    assert targets("proxy") == {r: [f"127.0.0.1:{by_name[f'{r}-proxy'].ports['https']}"] for r in ("us-east", "eu-west")}
    client = plan.security.client(security.PROMETHEUS_ROLE)
    assert proxy["tls_config"] == {"ca_file": str(plan.security.ca_file), "cert_file": str(client.cert_file),
                                   "key_file": str(client.key_file)}


def test_promtool_accepts_the_written_config(tmp_path: pathlib.Path) -> None:
    plan = plan_of(SECURED, tmp_path)
    security.ensure(plan.security.directory, hosts=plan.hosts())  # promtool checks that the TLS files exist
    inst = plan.one(region=None, slot="prometheus")
    argv = KINDS["prometheus"].command(inst, plan)
    path = PrometheusKind().config_path(inst, plan)
    assert f"--config.file={path}" in argv
    assert f"--web.listen-address=127.0.0.1:{inst.ports['web']}" in argv
    assert f"--storage.tsdb.path={tmp_path.resolve() / 'prometheus' / 'data'}" in argv
    assert "--storage.tsdb.retention.time=7200s" in argv and "--web.enable-lifecycle" not in argv
    assert path.read_text().startswith("# Written by the Magnetar supervisor")
    written = json.loads("".join(line for line in path.read_text().splitlines(True) if not line.startswith("#")))
    assert written == config_of(plan, plan.topology.prometheus)
    done = check_config(path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

    standalone = make_plan(load(STANDALONE), tmp_path / "standalone")
    inst = standalone.one(region=None, slot="prometheus")
    KINDS["prometheus"].command(inst, standalone)
    config = config_of(standalone, standalone.topology.prometheus)
    assert [j["job_name"] for j in config["scrape_configs"]] == ["zookeeper", "bookie", "broker"]
    assert {g["labels"]["cluster"] for j in config["scrape_configs"] for g in j["static_configs"]} == {"standalone"}
    done = check_config(PrometheusKind().config_path(inst, standalone))
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_config_refuses_what_it_cannot_scrape() -> None:
    mixed = [ScrapeTarget("broker", "http://h:1/metrics", "a"), ScrapeTarget("broker", "https://h:2/metrics", "a")]
    with pytest.raises(ConfigError, match="the broker targets disagree"):
        scrape_config(mixed, scrape_interval_s=5)
    with pytest.raises(ConfigError, match="no CA and client certificate"):
        scrape_config([ScrapeTarget("proxy", "https://h:2/metrics", "a")], scrape_interval_s=5)
    config = scrape_config([], scrape_interval_s=30)
    assert config["scrape_configs"] == [] and config["global"]["scrape_timeout"] == "10s"


def test_durations_are_prometheus_durations() -> None:
    assert [duration(s) for s in (5, 5.0, 0.5, 2.5, 60)] == ["5s", "5s", "500ms", "2500ms", "60s"]


def test_up_prints_the_prometheus_url(tmp_path: pathlib.Path, capsys) -> None:
    from clusters.commands import _print_summary
    from clusters.runtime import DataDir
    from clusters.supervisor import Supervisor

    plan = plan_of(SECURED, tmp_path)
    state = Supervisor(plan, DataDir(tmp_path)).state
    _print_summary(DataDir(tmp_path), state, foreground=False)
    url = f"http://127.0.0.1:{plan.one(region=None, slot='prometheus').ports['web']}"
    assert f"prometheus: {url}\n" in capsys.readouterr().out


def test_a_missing_prometheus_names_the_fix(monkeypatch) -> None:
    from clusters import prometheus
    from magnetar.errors import InstallError

    monkeypatch.setattr(prometheus.shutil, "which", lambda name: None)
    monkeypatch.setattr(prometheus.os, "access", lambda path, mode: False)
    with pytest.raises(InstallError, match="scripts/ensure-prometheus"):
        prometheus.find_prometheus()
