"""A region's proxy in a topology: parsed and checked, planned after the brokers, configured with the
deployment's security material (made once, kept, re-issued only when it must be)."""

from __future__ import annotations

import pathlib
import stat
import tomllib

import pytest
from cryptography import x509

from broker.config import BrokerConfig
from clusters import STANDALONE, security
from clusters.kinds import Plan, make_plan
from clusters.supervisor import topology_document
from clusters.topology import ProxySettings, load, parse
from magnetar.auth import tokens
from magnetar.errors import ConfigError
from proxy.config import ProxyConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]

WITH_PROXIES = """
name = "two"
[global_zookeeper]
port = 2181
[[regions]]
name = "us-east"
[regions.bookies]
count = 1
[regions.brokers]
count = 2
[regions.proxy]
tls_port = 6651
web_tls_port = 8443
max_concurrent_inbound_connections = 500
[[regions]]
name = "eu-west"
[regions.brokers]
count = 1
[regions.proxy]
host = "localhost"
authentication_providers = ["token"]
tls_require_trusted_client_cert = true
"""


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, path="topo.toml")
    return str(info.value)


def plan_of(text: str, tmp_path: pathlib.Path) -> Plan:
    ports = iter(range(20000, 30000))
    return make_plan(parse(text, path="topo.toml"), tmp_path, pick_port=lambda host: next(ports))


def test_proxy_table_gives_typed_settings_with_security_on_by_default() -> None:
    topology = parse(WITH_PROXIES, path="topo.toml")
    east, west = (r.proxy for r in topology.regions)
    assert east == ProxySettings(tls_port=6651, web_tls_port=8443, extra={"max_concurrent_inbound_connections": 500})
    assert east.authentication_enabled and east.authorization_enabled
    assert east.authentication_providers == ("token", "tls")
    assert west.host == "localhost" and west.authentication_providers == ("token",)
    assert west.tls_require_trusted_client_cert
    assert topology.secured
    assert not load(STANDALONE).secured  # the standalone topology stays without a proxy


@pytest.mark.parametrize(
    "table, expected",
    [
        ("tls_port = 80", "regions[0].proxy.tls_port: must be 0 (pick a free port) or in [1024, 65535]"),
        ("tls_port = 7000\nweb_tls_port = 7000", "regions[0].proxy.web_tls_port: must differ from tls_port"),
        ("authentication_providers = ['kerberos']", "regions[0].proxy.authentication_providers: unknown provider 'kerberos'"),
        ("authentication_providers = []", "regions[0].proxy.authentication_providers: empty"),
        ("authentication_providers = 'token'", "regions[0].proxy.authentication_providers must be an array"),
        ("authentication_enabled = false", "regions[0].proxy.authorization_enabled: needs authentication_enabled"),
        ("token_secret_key = 'data:;base64,AAAA'", "regions[0].proxy.token_secret_key: is set by the supervisor"),
        ("web_port = 8080", "regions[0].proxy.web_port: is set by the supervisor"),
        ("zookeeper = 'x:1'", "regions[0].proxy.zookeeper: is set by the supervisor"),
        ("[regions.proxy.nested]\na = 1", "regions[0].proxy.nested: passed through to proxy.toml"),
        ("host = 'a b'", "regions[0].proxy.host: not a host name or address"),
    ],
)
def test_proxy_mistakes_are_named(table: str, expected: str) -> None:
    text = f"name = 'x'\n[[regions]]\nname = 'a'\n[regions.brokers]\n[regions.proxy]\n{table}\n"
    assert expected in error_of(text)


def test_a_proxy_needs_the_regions_brokers() -> None:
    message = error_of("name = 'x'\n[[regions]]\nname = 'a'\n[regions.proxy]\n")
    assert "regions[0].proxy: a proxy fronts the region's brokers, but the region has no [regions.brokers]" in message


def test_proxies_start_after_the_brokers_with_their_own_ports(tmp_path: pathlib.Path) -> None:
    plan = plan_of(WITH_PROXIES, tmp_path)
    tiers = [[i.name for i in tier] for tier in plan.tiers()]
    assert tiers[-1] == ["us-east-proxy", "eu-west-proxy"]
    assert tiers[-2] == ["us-east-broker-1", "us-east-broker-2", "eu-west-broker-1"]
    east = plan.one(region="us-east", slot="proxy")
    assert east.ports == {"pulsar_ssl": 6651, "https": 8443}
    west = plan.one(region="eu-west", slot="proxy")
    assert 0 not in west.ports.values() and west.host == "localhost"
    ports = [p for i in plan.instances for p in i.ports.values()]
    assert len(ports) == len(set(ports))
    assert plan.hosts() == ["127.0.0.1", "localhost"]
    assert plan.endpoints(east) == {
        "pulsar_ssl": "pulsar+ssl://127.0.0.1:6651", "https": "https://127.0.0.1:8443",
        "metrics": "https://127.0.0.1:8443/metrics", "config": str(tmp_path.resolve() / "us-east-proxy" / "proxy.toml"),
    }


def test_proxy_config_names_its_region_and_the_deployments_security_material(tmp_path: pathlib.Path) -> None:
    plan = plan_of(WITH_PROXIES, tmp_path)
    sec = plan.security
    east = plan.one(region="us-east", slot="proxy")
    argv = plan.kind(east).command(east, plan)
    assert argv[-3:] == ["proxy", "--config", str(tmp_path.resolve() / "us-east-proxy" / "proxy.toml")]
    raw = tomllib.loads(pathlib.Path(argv[-1]).read_text())
    config = ProxyConfig.load(argv[-1])  # every key the supervisor writes is one the proxy reads
    zk = plan.endpoints(plan.one(region="us-east", slot="zookeeper"))["connect"]
    assert (config.cluster, config.zookeeper, config.configuration_store) == ("us-east", zk, "127.0.0.1:2181")
    assert (config.port, config.tls_port, config.web_port, config.web_tls_port) == (0, 6651, 0, 8443)
    assert config.tls_cert_file == str(sec.server.cert_file) and config.tls_trust_certs_file == str(sec.ca_file)
    assert config.authentication_enabled and config.authentication_providers == ("token", "tls")
    assert config.token_secret_key == sec.token_secret_key_file.as_uri()
    assert config.authorization_enabled and config.superuser_roles == ("admin", "replicator")
    assert config.broker_client_auth_method == "token"
    assert config.broker_client_auth_params == sec.token_file("proxy").as_uri()
    assert config.tls_enabled_with_broker  # only the brokers' pulsar+ssl:// and https:// endpoints
    assert config.broker_client_trust_certs_file == str(sec.ca_file) and config.tls_hostname_verification_enabled
    assert raw["max_concurrent_inbound_connections"] == 500
    west = plan.one(region="eu-west", slot="proxy")
    config = ProxyConfig.load(plan.kind(west).command(west, plan)[-1])
    assert config.tls_require_trusted_client_cert and config.advertised_host == "localhost"


def test_brokers_of_a_secured_topology_serve_tls_and_enforce_the_deployments_credentials(tmp_path: pathlib.Path) -> None:
    plan = plan_of(WITH_PROXIES, tmp_path)
    sec = plan.security
    east = [i for i in plan.instances if i.kind == "broker" and i.region == "us-east"]
    assert all(set(i.ports) == {"pulsar", "http", "pulsar_ssl", "https"} for i in east)
    config = BrokerConfig.load(plan.kind(east[0]).command(east[0], plan)[-1])  # the broker reads every key
    assert (config.tls_port, config.web_tls_port) == (east[0].ports["pulsar_ssl"], east[0].ports["https"])
    assert config.tls_cert_file == str(sec.server.cert_file) and config.tls_trust_certs_file == str(sec.ca_file)
    assert config.authentication_enabled and config.authentication_providers == ("token", "tls")
    assert config.token_secret_key == sec.token_secret_key_file.as_uri()
    assert config.authorization_enabled
    assert config.superuser_roles == ("admin", "proxy", "replicator") and config.proxy_roles == ("proxy",)
    assert (config.broker_client_auth_method, config.broker_client_auth_params) == (
        "token", sec.token_file("replicator").as_uri())
    assert config.broker_client_tls_enabled and config.broker_client_trust_certs_file == str(sec.ca_file)
    # Registered for other regions' replicators and admin calls: the region's proxy, not its brokers.
    proxy = plan.one(region="us-east", slot="proxy")
    assert config.cluster_broker_service_url_tls == f"pulsar+ssl://127.0.0.1:{proxy.ports['pulsar_ssl']}"
    assert config.cluster_service_url_tls == f"https://127.0.0.1:{proxy.ports['https']}"
    assert plan.endpoints(east[1])["pulsar_ssl"] == f"pulsar+ssl://127.0.0.1:{east[1].ports['pulsar_ssl']}"
    assert plan.endpoints(east[1])["https"] == f"https://127.0.0.1:{east[1].ports['https']}"
    # The Kafka listener has no authentication yet: a secured topology's brokers serve none.
    assert "kafka" not in east[0].ports and config.kafka_listeners == ""
    # Without a proxy, brokers stay as they were: plain ports only (and a Kafka listener), no security keys.
    plain = plan_of("name = 'x'\n[[regions]]\nname = 'a'\n[regions.brokers]\ntls_port_base = 7000\n", tmp_path / "p")
    broker = plain.one(region="a", slot="brokers")
    assert set(broker.ports) == {"pulsar", "http", "kafka"}
    config = BrokerConfig.load(plain.kind(broker).command(broker, plain)[-1])
    assert not config.authentication_enabled and config.tls_port == 0
    assert config.kafka_listeners == f"PLAINTEXT://127.0.0.1:{broker.ports['kafka']}"
    assert plain.endpoints(broker)["kafka"] == f"127.0.0.1:{broker.ports['kafka']}"


@pytest.mark.parametrize("key", ["authentication_enabled", "superuser_roles", "tls_port", "broker_client_auth_params"])
def test_broker_security_keys_are_the_supervisors(key: str) -> None:
    message = error_of(f"name = 'x'\n[[regions]]\nname = 'a'\n[regions.brokers]\n{key} = 1\n")
    assert f"regions[0].brokers.{key}: is set by the supervisor" in message


def test_broker_port_ranges_may_not_overlap() -> None:
    message = error_of("name = 'x'\n[[regions]]\nname = 'a'\n[regions.brokers]\ncount = 2\nport_base = 7000\n"
                       "tls_port_base = 7001\n")
    assert "regions[0].brokers.tls_port_base: the port ranges of port_base and tls_port_base overlap" in message


def test_topology_document_names_the_security_files_and_each_proxy(tmp_path: pathlib.Path) -> None:
    plan = plan_of(WITH_PROXIES, tmp_path)
    state = {"supervisor": {"pid": 1}, "processes": [
        {"name": i.name, "pid": None, "log": "x", "data_dir": "y"} for i in plan.instances]}
    doc = topology_document(plan, state)
    assert doc["security"]["ca_file"] == str(plan.security.ca_file)
    assert doc["security"]["superuser_roles"] == ["admin", "replicator"] and doc["security"]["proxy_roles"] == ["proxy"]
    assert doc["security"]["broker_superuser_roles"] == ["admin", "proxy", "replicator"]
    assert set(doc["security"]["roles"]) == {"admin", "proxy", "replicator", "demo-app", "prometheus"}
    assert doc["regions"]["eu-west"]["proxy"]["kind"] == "proxy"
    assert doc["regions"]["eu-west"]["proxy"]["pulsar_ssl"].startswith("pulsar+ssl://localhost:")
    standalone = make_plan(load(STANDALONE), tmp_path / "s")
    assert "security" not in topology_document(standalone, {"supervisor": {"pid": 1}, "processes": [
        {"name": i.name, "pid": None, "log": "x", "data_dir": "y"} for i in standalone.instances]})


def test_bundled_multi_region_topologies_have_a_secured_proxy_per_region() -> None:
    for file in ("local.toml", "three-regions.toml"):
        for region in load(ROOT / "clusters" / file).regions:
            assert region.proxy is not None, (file, region.name)
            assert region.proxy.authentication_enabled and region.proxy.authorization_enabled
            assert set(region.proxy.authentication_providers) == {"token", "tls"}


# -- the security material -------------------------------------------------------------------------------------


def sans(cert_file: pathlib.Path) -> set[str]:
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(san.get_values_for_type(x509.DNSName)) | {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


def test_security_material_is_made_once_private_and_verifiable(tmp_path: pathlib.Path) -> None:
    files, made = security.ensure(tmp_path / "security", hosts=["127.0.0.1"])
    assert made[0] == "CA" and "token secret key" in made
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o700
    for private in (files.server.key_file, files.token_secret_key_file, *(files.token_file(r) for r in security.ROLES),
                    *(files.client(r).key_file for r in security.ROLES)):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    assert sans(files.server.cert_file) == {"localhost", "127.0.0.1"}
    key = tokens.VerificationKey.secret(files.token_secret_key_file.read_bytes())
    for role in security.ROLES:
        claims = tokens.verify_token(files.token(role), key)
        assert claims["sub"] == role and "exp" not in claims
        subject = x509.load_pem_x509_certificate(files.client(role).cert_file.read_bytes()).subject
        assert subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == role
    assert tokens.verify_token(files.mint_token("stranger"), key)["sub"] == "stranger"

    before = {p.name: p.read_bytes() for p in files.directory.iterdir()}
    again, made = security.ensure(tmp_path / "security", hosts=["127.0.0.1", "localhost"])
    assert made == [] and {p.name: p.read_bytes() for p in again.directory.iterdir()} == before


def test_security_material_is_reissued_only_where_it_must_be(tmp_path: pathlib.Path) -> None:
    files, _ = security.ensure(tmp_path, hosts=[])
    admin_token, ca = files.token("admin"), files.ca_file.read_bytes()
    _, made = security.ensure(tmp_path, hosts=["10.1.2.3", "broker.example"])  # a host the certificate lacks
    assert made == ["server certificate (localhost, broker.example, 127.0.0.1, 10.1.2.3)"]
    assert sans(files.server.cert_file) == {"localhost", "broker.example", "127.0.0.1", "10.1.2.3"}
    assert files.ca_file.read_bytes() == ca and files.token("admin") == admin_token

    files.token_file("demo-app").unlink()
    _, made = security.ensure(tmp_path, hosts=[])
    assert made == ["token of demo-app"] and files.token("admin") == admin_token

    files.token_secret_key_file.unlink()  # a new key: every token is minted again
    _, made = security.ensure(tmp_path, hosts=[])
    assert made == ["token secret key"] + [f"token of {r}" for r in security.ROLES]
    assert files.token("admin") != admin_token

    certs_before = files.client("admin").cert_file.read_bytes()
    files.ca_file.unlink()  # a new CA: every certificate is issued again
    _, made = security.ensure(tmp_path, hosts=[])
    assert made[0] == "CA" and len(made) == 2 + len(security.ROLES)
    assert files.client("admin").cert_file.read_bytes() != certs_before


def test_split_hosts_adds_the_loopback_names_once() -> None:
    assert security.split_hosts(["127.0.0.1", "::1", "h.example", "localhost"]) == (
        ["localhost", "h.example"], ["127.0.0.1", "::1"])


def test_dev_credentials_command_makes_what_is_missing(tmp_path: pathlib.Path) -> None:
    from typer.testing import CliRunner

    from magnetar.cli import app

    runner = CliRunner()
    first = runner.invoke(app, ["dev-credentials", "--dir", str(tmp_path / "sec"), "--host", "broker-1"])
    assert first.exit_code == 0, first.output
    assert "made CA, server certificate (localhost, broker-1, 127.0.0.1)" in first.output
    assert sans(tmp_path / "sec" / "server.cert.pem") == {"localhost", "broker-1", "127.0.0.1"}
    again = runner.invoke(app, ["dev-credentials", "--dir", str(tmp_path / "sec"), "--host", "broker-1"])
    assert again.exit_code == 0 and "complete, nothing made" in again.output
    (tmp_path / "file").write_text("")
    refused = runner.invoke(app, ["dev-credentials", "--dir", str(tmp_path / "file" / "sec")])
    assert refused.exit_code == 2 and "error:" in refused.output
