"""docker-compose.yml, checked without a Docker engine: every service runs a real `magnetar` sub-command whose
options parse and whose config file loads with the process's own loader, every mounted path exists, the
services are exactly clusters/local.toml's processes (a proxy per region included) plus the one-shot service
that makes the development credentials, brokers and proxies use those credentials as `magnetar up` wires
them, and no host port is published twice. Beside them, `prometheus` scrapes every process that serves
/metrics at the port and scheme its config gives (its scrape config passes `promtool check config`) and loads
the alert rules, and `grafana` loads the provisioning and dashboards of observability/grafana/ as mounted."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import typer
import yaml

from bookie.config import BookieConfig
from broker.config import BrokerConfig
from clusters import security
from clusters import topology as topo
from magnetar import zookeeper as zk
from magnetar.cli import app
from proxy.config import ProxyConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
ALL_SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
OBSERVABILITY = ("prometheus", "grafana")  # the services that are not Magnetar processes
SERVICES = {name: service for name, service in ALL_SERVICES.items() if name not in OBSERVABILITY}
LOCAL = topo.load(ROOT / "clusters" / "local.toml")
CLI = typer.main.get_command(app)
CREDENTIALS = "dev-credentials"  # the one-shot service that makes the CA, certificates and tokens
SECURITY_DIR = pathlib.Path("/var/lib/magnetar-security")
GLOBAL = ("global-zookeeper", CREDENTIALS)


def parse_command(service: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(sub-command, its parsed options), parsed by the real command line (an unknown option raises)."""
    argv = service["command"]
    assert isinstance(argv, list) and argv[0] == "magnetar", argv
    sub = CLI.commands.get(argv[1])
    assert sub is not None, f"magnetar has no sub-command {argv[1]!r}"
    with sub.make_context(argv[1], list(argv[2:])) as ctx:
        return argv[1], dict(ctx.params)


def bind_mounts(service: dict[str, Any]) -> dict[str, pathlib.Path]:
    """Container path -> repo path of every bind mount (``./x:/y[:ro]``)."""
    found = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith((".", "/")):
            found[target] = (ROOT / source).resolve()
    return found


def host_file(service: dict[str, Any], container_path: pathlib.Path) -> pathlib.Path:
    """The repo file a container path names, through the service's bind mounts."""
    for target, source in bind_mounts(service).items():
        if container_path.is_relative_to(target):
            return source / container_path.relative_to(target)
    raise AssertionError(f"{container_path} is not under any bind mount of the service")


def region_of(name: str) -> str | None:
    """The local.toml region a service belongs to (None: the global ZooKeeper, the credentials)."""
    regions = [r.name for r in LOCAL.regions if name.startswith(f"{r.name}-")]
    assert regions or name in GLOBAL, f"{name} is in no region of local.toml"
    return regions[0] if regions else None


def config_of(name: str) -> Any:
    service = SERVICES[name]
    kind, params = parse_command(service)
    path = host_file(service, pathlib.Path(params["config"]))
    return {"bookie": BookieConfig, "broker": BrokerConfig, "proxy": ProxyConfig}[kind].load(path)


def test_services_are_exactly_the_local_topologys_processes() -> None:
    expected = {"global-zookeeper"} if LOCAL.global_zookeeper is not None else set()
    for region in LOCAL.regions:
        expected.add(f"{region.name}-zookeeper")
        expected.update(f"{region.name}-bookie-{n}" for n in range(1, region.bookies.count + 1))
        expected.update(f"{region.name}-broker-{n}" for n in range(1, region.brokers.count + 1))
        if region.proxy is not None:
            expected.add(f"{region.name}-proxy")
    if LOCAL.secured:
        expected.add(CREDENTIALS)
    assert set(SERVICES) == expected
    assert set(ALL_SERVICES) == expected | set(OBSERVABILITY)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_every_command_is_a_magnetar_sub_command_whose_options_parse(name: str) -> None:
    kind, params = parse_command(SERVICES[name])
    assert kind in name.split("-") or kind == name, (name, kind)
    if kind == CREDENTIALS:
        assert params["directory"] == SECURITY_DIR
    elif kind == "zookeeper":
        params.pop("metrics_port")  # the wrapper's own /metrics, not a ZooKeeper setting
        settings = zk.ZooKeeperSettings(**params)
        assert settings.host == "0.0.0.0" and settings.port == 2181
        assert str(settings.data_dir).startswith("/var/lib/magnetar")
    else:
        assert kind in ("bookie", "broker", "proxy")
        config_of(name)  # a wrong key or type fails here with the loader's own ConfigError


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if "-bookie-" in n))
def test_bookies_register_in_their_regions_zookeeper(name: str) -> None:
    config: BookieConfig = config_of(name)
    assert config.bookie_id == config.advertised_host == name
    assert config.zookeeper == f"{region_of(name)}-zookeeper:2181"
    assert config.journal_sync
    assert str(config.data_dir).startswith("/var/lib/magnetar")


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if "-broker-" in n))
def test_brokers_serve_their_region_and_name_its_brokers_as_the_cluster_urls(name: str) -> None:
    config: BrokerConfig = config_of(name)
    region = region_of(name)
    peers = sorted(n for n in SERVICES if n.startswith(f"{region}-broker-"))
    assert config.broker_id == config.advertised_host == name and config.cluster == region
    assert config.zookeeper == f"{region}-zookeeper:2181"
    assert config.configuration_store == "global-zookeeper:2181"
    assert config.cluster_service_url == "http://" + ",".join(f"{p}:{config.http_port}" for p in peers)
    assert config.cluster_broker_service_url == "pulsar://" + ",".join(f"{p}:{config.port}" for p in peers)
    bookies = LOCAL.region(region).bookies.count
    assert config.managed_ledger_ensemble_size <= bookies


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if "-broker-" in n))
def test_brokers_advertise_their_service_name_inside_and_their_published_port_outside(name: str) -> None:
    config: BrokerConfig = config_of(name)
    published = {int(c): int(h) for h, c in (str(m).split(":") for m in SERVICES[name].get("ports", []))}
    listeners = {entry.name: entry.broker_service_url for entry in config.listeners}
    assert listeners == {"internal": f"pulsar://{name}:{config.port}",
                         "external": f"pulsar://localhost:{published[config.port]}"}
    assert config.internal_listener_name in ("", "internal")  # the default URL stays the service name


def test_the_credentials_name_every_broker_and_proxy_and_are_mounted_where_their_configs_say() -> None:
    kind, params = parse_command(SERVICES[CREDENTIALS])
    served = sorted(n for n in SERVICES if "-broker-" in n or n.endswith("-proxy"))
    assert sorted(params["hosts"]) == served  # the server certificate's SANs (plus localhost, 127.0.0.1)
    assert SERVICES[CREDENTIALS]["restart"] == "no"
    writer = SERVICES[CREDENTIALS]["volumes"]
    assert writer == [f"security:{SECURITY_DIR}"]
    for name in served:
        assert f"security:{SECURITY_DIR}:ro" in SERVICES[name]["volumes"], name
        config = config_of(name)
        files = security.SecurityFiles(SECURITY_DIR)
        assert (config.tls_cert_file, config.tls_key_file) == (str(files.server.cert_file), str(files.server.key_file))
        assert config.tls_trust_certs_file == config.broker_client_trust_certs_file == str(files.ca_file)
        assert config.authentication_enabled and config.authorization_enabled
        assert set(config.authentication_providers) == {"token", "tls"}
        assert config.token_secret_key == files.token_secret_key_url
        role = security.PROXY_ROLE if name.endswith("-proxy") else security.REPLICATOR_ROLE
        assert (config.broker_client_auth_method, config.broker_client_auth_params) == (
            "token", files.token_file(role).as_uri())
    for name in (n for n in served if "-broker-" in n):
        depends = SERVICES[name]["depends_on"][CREDENTIALS]
        assert depends == {"condition": "service_completed_successfully"}, name


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if n.endswith("-proxy")))
def test_proxies_serve_tls_and_forward_to_their_regions_brokers_over_tls(name: str) -> None:
    config: ProxyConfig = config_of(name)
    region = region_of(name)
    assert config.cluster == region and config.zookeeper == f"{region}-zookeeper:2181"
    assert config.configuration_store == "global-zookeeper:2181"
    assert (config.port, config.web_port, config.tls_port, config.web_tls_port) == (0, 0, 6651, 8443)
    assert config.tls_enabled_with_broker and config.tls_hostname_verification_enabled
    assert config.superuser_roles == security.SUPERUSER_ROLES
    published = {int(c): int(h) for h, c in (str(m).split(":") for m in SERVICES[name]["ports"])}
    assert set(published) == {6651, 8443}
    brokers = sorted(n for n in SERVICES if n.startswith(f"{region}-broker-"))
    assert sorted(SERVICES[name]["depends_on"]) == brokers


@pytest.mark.parametrize("name", sorted(n for n in SERVICES if "-broker-" in n))
def test_brokers_serve_tls_and_register_their_regions_tls_urls(name: str) -> None:
    config: BrokerConfig = config_of(name)
    region = region_of(name)
    peers = sorted(n for n in SERVICES if n.startswith(f"{region}-broker-"))
    assert (config.tls_port, config.web_tls_port) == (6651, 8443)
    listener_ports = {int(e.broker_service_url.rsplit(":", 1)[1]) for e in config.listeners if e.broker_service_url}
    assert config.tls_port not in listener_ports  # a listener's port on a local host is served too: no clash
    assert peers  # other regions' replicators and admin calls come in through the region's proxy
    assert config.cluster_broker_service_url_tls == f"pulsar+ssl://{region}-proxy:6651"
    assert config.cluster_service_url_tls == f"https://{region}-proxy:8443"
    assert config.superuser_roles == security.BROKER_SUPERUSER_ROLES and config.proxy_roles == security.PROXY_ROLES
    assert config.broker_client_tls_enabled


def test_every_mounted_path_exists_and_named_volumes_are_declared() -> None:
    declared = set(COMPOSE.get("volumes") or {})
    for name, service in ALL_SERVICES.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is not in the repo"
            else:
                assert source in declared, f"{name} uses volume {source}, not declared"
        build = service.get("build")
        if build is not None:
            assert (ROOT / build["context"] / build.get("dockerfile", "Dockerfile")).is_file(), name


def test_dependencies_exist_and_start_in_the_supervisors_tier_order() -> None:
    tier = {CREDENTIALS: -1, "zookeeper": 0, "bookie": 1, "broker": 2, "proxy": 3}
    for name, service in SERVICES.items():
        kind = parse_command(service)[0]
        for dependency in service.get("depends_on") or {}:
            assert dependency in SERVICES, (name, dependency)
            assert tier[parse_command(SERVICES[dependency])[0]] < tier[kind], (name, dependency)
            assert region_of(dependency) in (None, region_of(name)), (name, dependency)


def test_published_host_ports_are_unique() -> None:
    published = []
    for service in ALL_SERVICES.values():
        for mapping in service.get("ports", []):
            parts = str(mapping).split(":")
            assert len(parts) == 2, f"publish as HOST:CONTAINER, got {mapping!r}"
            published.append(int(parts[0]))
    assert published and len(published) == len(set(published))


def test_image_installs_every_room_the_processes_import() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("#") and "FROM python:3.11-slim" in dockerfile
    assert "zookeeper" in dockerfile and "default-jre-headless" in dockerfile and "pip install" in dockerfile
    import tomllib

    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in packages:
        room = package.rstrip("*")
        assert f"COPY {room} ./{room}" in dockerfile, f"the image lacks {room}/"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "tests" in ignored and ".venv" in ignored


# -- prometheus and grafana --------------------------------------------------------------------------------------

PROMETHEUS = ALL_SERVICES["prometheus"]
GRAFANA = ALL_SERVICES["grafana"]
JOBS = ("broker", "bookie", "proxy", "zookeeper")  # the scrape jobs, one per process kind, as `magnetar up` names them
ZOOKEEPER_METRICS_PORT = 7000  # `magnetar zookeeper --metrics-port` (ZooKeeper's own default metrics port)
GRAFANA_DIR = ROOT / "observability" / "grafana"


def prometheus_flag(name: str) -> str:
    """The value of ``--name=value`` in the prometheus service's command."""
    values = [arg.split("=", 1)[1] for arg in PROMETHEUS["command"] if arg.startswith(f"--{name}=")]
    assert len(values) == 1, f"prometheus's command sets --{name} {len(values)} times"
    return values[0]


def scrape_config() -> dict[str, Any]:
    """The configuration file Prometheus loads, read through its bind mount."""
    return yaml.safe_load(host_file(PROMETHEUS, pathlib.Path(prometheus_flag("config.file"))).read_text())


def metrics_endpoint(name: str) -> tuple[str, str, str, str]:
    """(job, scheme, host:port, cluster) where a Magnetar service serves /metrics, from its command and config."""
    kind, _ = parse_command(SERVICES[name])
    cluster = region_of(name) or "global"
    if kind == "zookeeper":
        return "zookeeper", "http", f"{name}:{ZOOKEEPER_METRICS_PORT}", cluster
    config = config_of(name)
    if kind == "proxy":  # /metrics on its web ports: HTTPS when it has one
        scheme, port = ("https", config.web_tls_port) if config.web_tls_port else ("http", config.web_port)
    else:  # brokers and bookies: their plain HTTP port
        scheme, port = "http", config.http_port
    assert port, f"{name} serves no /metrics"
    return kind, scheme, f"{name}:{port}", cluster


def scraped_endpoints() -> set[tuple[str, str, str, str]]:
    found = set()
    for job in scrape_config()["scrape_configs"]:
        for group in job["static_configs"]:
            for target in group["targets"]:
                found.add((job["job_name"], job.get("scheme", "http"), target, group["labels"]["cluster"]))
    return found


def test_prometheus_loads_the_compose_scrape_config_and_the_alert_rules() -> None:
    assert str(PROMETHEUS["image"]).startswith("prom/prometheus:v2.")
    config_path = host_file(PROMETHEUS, pathlib.Path(prometheus_flag("config.file")))
    assert config_path == ROOT / "observability" / "prometheus" / "compose.yml"
    rule_globs = scrape_config()["rule_files"]
    assert rule_globs and all(host_file(PROMETHEUS, pathlib.Path(g)) == ROOT / "observability" / "prometheus" /
                              "rules" / "*.yml" for g in rule_globs)
    assert all(target.startswith("/etc/prometheus") for target in bind_mounts(PROMETHEUS))
    assert f"security:{SECURITY_DIR}:ro" in PROMETHEUS["volumes"]
    assert PROMETHEUS["depends_on"][CREDENTIALS] == {"condition": "service_completed_successfully"}
    assert "9090:9090" in PROMETHEUS["ports"]


def test_the_scrape_config_names_every_process_that_serves_metrics() -> None:
    expected = {metrics_endpoint(name) for name in SERVICES if name != CREDENTIALS}
    assert {e[0] for e in expected} == set(JOBS)
    assert scraped_endpoints() == expected
    jobs = {job["job_name"]: job for job in scrape_config()["scrape_configs"]}
    assert sorted(jobs) == sorted(JOBS)
    assert jobs["proxy"]["tls_config"]["ca_file"] == str(security.SecurityFiles(SECURITY_DIR).ca_file)
    # the proxies' certificate names them (dev-credentials' --host), so Prometheus verifies who it scrapes
    certified = set(parse_command(SERVICES[CREDENTIALS])[1]["hosts"])
    assert {target.split(":")[0] for job, scheme, target, _ in expected if scheme == "https"} <= certified


def test_zookeepers_serve_metrics_where_prometheus_scrapes_them() -> None:
    for name in (n for n in SERVICES if parse_command(SERVICES[n])[0] == "zookeeper"):
        params = parse_command(SERVICES[name])[1]
        assert params.get("metrics_port") == ZOOKEEPER_METRICS_PORT, name


def test_promtool_accepts_the_compose_scrape_config(tmp_path: pathlib.Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/ensure-prometheus (make install does)")
    config = scrape_config()
    # what Prometheus reads inside its container, here: the rules through their bind mount; the CA lives in the
    # `security` volume, which only Docker fills, so a stand-in file takes its place
    config["rule_files"] = [str(host_file(PROMETHEUS, pathlib.Path(g))) for g in config["rule_files"]]
    stand_in = tmp_path / "ca.cert.pem"
    stand_in.write_text("")
    for job in config["scrape_configs"]:
        if "tls_config" in job:
            job["tls_config"]["ca_file"] = str(stand_in)
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_grafana_mounts_the_provisioning_and_the_dashboards_it_loads() -> None:
    assert str(GRAFANA["image"]).startswith("grafana/grafana:")
    mounts = bind_mounts(GRAFANA)
    for kind in ("datasources", "dashboards"):
        assert mounts[f"/etc/grafana/provisioning/{kind}"] == GRAFANA_DIR / "provisioning" / kind
    provider = yaml.safe_load((GRAFANA_DIR / "provisioning" / "dashboards" / "magnetar.yml").read_text())
    [folder] = [p["options"]["path"] for p in provider["providers"]]
    assert host_file(GRAFANA, pathlib.Path(folder)) == GRAFANA_DIR / "dashboards"
    home = host_file(GRAFANA, pathlib.Path(GRAFANA["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]))
    assert home.is_file() and home.parent == GRAFANA_DIR / "dashboards"
    assert "3000:3000" in GRAFANA["ports"] and "prometheus" in GRAFANA["depends_on"]


def test_grafanas_data_source_is_the_compose_prometheus_at_its_scrape_interval() -> None:
    datasources = yaml.safe_load((GRAFANA_DIR / "provisioning" / "datasources" / "magnetar.yml").read_text())
    [source] = datasources["datasources"]
    listen = prometheus_flag("web.listen-address") if any(
        a.startswith("--web.listen-address=") for a in PROMETHEUS["command"]) else ":9090"
    assert source["url"] == f"http://prometheus{listen}"
    assert source["jsonData"]["timeInterval"] == scrape_config()["global"]["scrape_interval"]
