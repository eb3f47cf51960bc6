"""The broker's security pieces on their own: settings refused when they cannot work, the refresh decision, which
admin route needs what (read from the real route tables), the authorization decisions over a configuration
store whose grants change, and the broker's own client credentials."""

from __future__ import annotations

import base64
import pathlib

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from broker.admin import app as admin_app_module
from broker.admin.access import Need, rule_for
from broker.client_credentials import BrokerClientCredentials, BrokerClientSettings
from broker.config import BrokerConfig
from broker.lookup_http import routes as lookup_routes
from broker.security import BrokerSecurity, SecuritySettings
from broker.service.session.auth import RefreshAction, refresh_action
from config_store import ConfigurationStore, MemoryMetadataStore, Policies, TenantInfo
from config_store import permissions as grants
from magnetar.auth import certs, tokens
from magnetar.errors import ConfigError
from magnetar.topic_name import TopicName
from tests.kit.wait import wait_for_async

SECRET = "data:;base64," + base64.b64encode(b"k" * 32).decode()


# ------------------------------------------------------------------------------------------ settings


def config(**settings) -> BrokerConfig:
    return BrokerConfig(data_dir=pathlib.Path("/tmp/b"), zookeeper="zk:2181", **settings)


def test_security_is_off_by_default_and_a_full_setup_is_accepted() -> None:
    plain = config()
    assert (plain.authentication_enabled, plain.authorization_enabled, plain.tls_port, plain.web_tls_port) == \
        (False, False, 0, 0)
    full = config(authentication_enabled=True, authentication_providers=("tls", "token"), authorization_enabled=True,
                  superuser_roles=("admin",), proxy_roles=("proxy",), token_secret_key=SECRET, tls_port=6651,
                  web_tls_port=8443, tls_cert_file="c.pem", tls_key_file="k.pem", tls_trust_certs_file="ca.pem",
                  broker_client_auth_method="token", broker_client_auth_params="file:///etc/broker.token")
    assert full.authentication_refresh_check_ms == 60_000


@pytest.mark.parametrize("settings, message", [
    ({"tls_port": 6651}, "need tls_cert_file and tls_key_file"),
    ({"web_tls_port": 8443, "tls_cert_file": "c.pem"}, "need tls_cert_file and tls_key_file"),
    ({"tls_port": 6650}, "port and tls_port must differ"),
    ({"tls_require_trusted_client_cert": True}, "needs tls_trust_certs_file"),
    ({"tls_min_protocol": "TLSv1.1"}, "tls_min_protocol"),
    ({"authentication_enabled": True}, "needs authentication_providers"),
    ({"authentication_enabled": True, "authentication_providers": ("basic",)}, "unknown provider 'basic'"),
    ({"authorization_enabled": True}, "needs authentication_enabled"),
    ({"authentication_enabled": True, "authentication_providers": ("token",)}, "token_secret_key or token_public_key"),
    ({"authentication_enabled": True, "authentication_providers": ("tls",)}, "client certificates arrive only"),
    ({"superuser_roles": ("",)}, "superuser_roles must not hold empty roles"),
    ({"broker_client_auth_method": "kerberos"}, "broker_client_auth_method"),
    ({"broker_client_auth_method": "token"}, "needs broker_client_auth_params"),
    ({"broker_client_auth_method": "token", "broker_client_auth_params": "eyJ"}, "token:<jwt>"),
    ({"broker_client_auth_method": "tls", "broker_client_auth_params": "only-a-cert.pem"}, "cert_file,key_file"),
    ({"authentication_refresh_check_ms": 0}, "authentication_refresh_check_ms must be positive"),
    ({"cluster_broker_service_url_tls": "http://x:1"}, "cluster_broker_service_url_tls must be a pulsar"),
])
def test_settings_that_cannot_work_are_refused(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        config(**settings)


def test_a_token_key_that_cannot_be_read_fails_at_start_up(tmp_path) -> None:
    with pytest.raises(ConfigError):
        BrokerSecurity(SecuritySettings(authentication_enabled=True, authentication_providers=("token",),
                                        token_secret_key=f"file://{tmp_path}/missing.key"))


# ------------------------------------------------------------------------------------------ refresh


@pytest.mark.parametrize("expires_in_s, supports, pending, expected", [
    (None, True, False, RefreshAction.KEEP),           # credentials that never expire
    (60.0, True, False, RefreshAction.KEEP),           # valid past the next look
    (5.0, True, False, RefreshAction.CHALLENGE),       # would expire before the next look
    (-1.0, True, False, RefreshAction.CHALLENGE),      # expired since the last look: ask once
    (5.0, True, True, RefreshAction.KEEP),             # asked, still valid: wait for the answer
    (-1.0, True, True, RefreshAction.CLOSE),           # asked, not answered in time
    (5.0, False, False, RefreshAction.KEEP),           # cannot refresh, still valid
    (-1.0, False, False, RefreshAction.CLOSE),         # cannot refresh, expired
])
def test_refresh_action(expires_in_s, supports, pending, expected) -> None:
    now = 1_000_000.0
    action = refresh_action(expires_at_s=None if expires_in_s is None else now + expires_in_s, now_s=now,
                            check_interval_s=10.0, supports_refresh=supports, challenge_pending=pending)
    assert action is expected


# ------------------------------------------------------------------------------------------ admin routes


async def _nothing(request: web.Request) -> web.Response:
    return web.Response()


@pytest.fixture(scope="module")
def router():
    app = web.Application()
    for module in admin_app_module._MODULES:
        app.add_routes(module.routes)
    app.add_routes(lookup_routes)
    app.router.add_get("/metrics", _nothing)
    app.router.add_get("/health", _nothing)
    return app.router


@pytest.mark.parametrize("method, path, need, tenant", [
    ("GET", "/metrics", Need.OPEN, ""),
    ("GET", "/health", Need.OPEN, ""),
    ("GET", "/admin/v2/clusters", Need.AUTHENTICATED, ""),
    ("PUT", "/admin/v2/clusters/us-east", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/clusters/us-east", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/tenants", Need.SUPERUSER, ""),
    ("PUT", "/admin/v2/tenants/acme", Need.SUPERUSER, ""),
    ("DELETE", "/admin/v2/tenants/acme", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/tenants/acme", Need.TENANT_ADMIN, "acme"),
    ("GET", "/admin/v2/namespaces/acme", Need.TENANT_ADMIN, "acme"),
    ("PUT", "/admin/v2/namespaces/acme/orders", Need.TENANT_ADMIN, "acme"),
    ("POST", "/admin/v2/namespaces/acme/orders/permissions/app", Need.TENANT_ADMIN, "acme"),
    ("POST", "/admin/v2/namespaces/acme/orders/retention", Need.TENANT_ADMIN, "acme"),
    ("PUT", "/admin/v2/namespaces/acme/orders/unload", Need.SUPERUSER, ""),
    ("PUT", "/admin/v2/namespaces/acme/orders/0x00000000_0x40000000/split", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/namespaces/acme/orders/topics", Need.NAMESPACE, "acme"),
    ("GET", "/admin/v2/persistent/acme/orders", Need.NAMESPACE, "acme"),
    ("GET", "/admin/v2/non-persistent/acme/orders/partitioned", Need.NAMESPACE, "acme"),
    ("GET", "/admin/v2/persistent/acme/orders/events/partitions", Need.TOPIC_LOOKUP, "acme"),
    ("GET", "/admin/v2/persistent/acme/orders/events/stats", Need.TOPIC_LOOKUP, "acme"),
    ("PUT", "/admin/v2/persistent/acme/orders/events/partitions", Need.TENANT_ADMIN, "acme"),
    ("DELETE", "/admin/v2/persistent/acme/orders/events", Need.TENANT_ADMIN, "acme"),
    ("PUT", "/admin/v2/persistent/acme/orders/events/subscription/s", Need.TENANT_ADMIN, "acme"),
    ("GET", "/admin/v2/schemas/acme/orders/events/schema", Need.TOPIC_LOOKUP, "acme"),
    ("POST", "/admin/v2/schemas/acme/orders/events/schema", Need.TENANT_ADMIN, "acme"),
    ("GET", "/lookup/v2/topic/persistent/acme/orders/events", Need.TOPIC_LOOKUP, "acme"),
    ("GET", "/admin/v2/brokers/test", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/bookies/all", Need.SUPERUSER, ""),
    ("GET", "/admin/v2/no/such/route/here/at/all", Need.AUTHENTICATED, ""),
])
async def test_what_each_route_needs(router, method, path, need, tenant) -> None:
    match = await router.resolve(make_mocked_request(method, path))
    resource = match.route.resource
    rule = rule_for(method, resource.canonical if resource is not None else None, match)
    assert rule.need is need, (method, path, resource.canonical if resource else None)
    if need in (Need.TENANT_ADMIN, Need.NAMESPACE, Need.TOPIC_LOOKUP):
        assert rule.tenant == tenant


def test_every_admin_route_has_a_rule_and_none_is_open(router) -> None:
    for resource in router.resources():
        for route in resource:
            rule = rule_for(route.method, resource.canonical, {})
            if resource.canonical in ("/metrics", "/health"):
                assert rule.need is Need.OPEN
            else:
                assert rule.need is not Need.OPEN, resource.canonical


# ------------------------------------------------------------------------------------------ decisions


@pytest.fixture
async def configuration():
    async with MemoryMetadataStore() as store:
        conf = ConfigurationStore(store)
        await conf.create_tenant("acme", TenantInfo(admin_roles=["acme-admin"], allowed_clusters=["test"]))
        await conf.create_namespace("acme", "orders", Policies(auth_roles={"app": ["produce", "consume"]}))
        yield conf


def secured(configuration, **settings) -> BrokerSecurity:
    values = dict(authentication_enabled=True, authentication_providers=("token",), authorization_enabled=True,
                  superuser_roles=("admin", "proxy-su"), proxy_roles=("proxy", "proxy-su"), token_secret_key=SECRET)
    values.update(settings)
    return BrokerSecurity(SecuritySettings(**values), configuration=configuration)


TOPIC = TopicName.parse("persistent://acme/orders/events")


async def test_decisions_follow_the_rules_and_grant_changes(configuration) -> None:
    security = secured(configuration)
    try:
        assert await security.can_produce("app", None, TOPIC)
        assert await security.can_produce("admin", None, TopicName.parse("persistent://other/ns/t"))
        assert await security.can_produce("acme-admin", None, TOPIC)
        assert not await security.can_produce("billing", None, TOPIC)
        assert not await security.can_produce(None, None, TOPIC)  # no role is nobody
        assert await security.can_administer_tenant("acme-admin", None, "acme")
        assert not await security.can_administer_tenant("app", None, "acme")
        assert not security.can_administer_cluster("acme-admin", None)

        def edit(p: Policies) -> Policies:
            grants.grant_topic_permission(p, str(TOPIC), "billing", ["consume"])
            grants.grant_subscription_permission(p, "audit", ["billing"])
            return p

        await configuration.update_namespace_policies("acme", "orders", edit)
        partition = TOPIC.partition(3)
        await wait_for_async(lambda: security.can_consume("billing", None, partition, "audit"), 5,
                             what="the topic grant reaches the cache (a partition inherits it)")
        assert not await security.can_consume("app", None, TOPIC, "audit")  # not on audit's list
        assert await security.can_consume("app", None, TOPIC, "other")
        assert await security.can_lookup("billing", None, TOPIC)
        assert not await security.can_list_namespace("billing", None, "acme", "orders")  # topic grant only
        assert await security.can_list_namespace("app", None, "acme", "orders")
    finally:
        security.close()


async def test_through_a_proxy_both_roles_must_be_allowed(configuration) -> None:
    security = secured(configuration)
    try:
        assert security.is_valid_original_principal("proxy", "app")
        assert not security.is_valid_original_principal("app", "admin")
        assert not security.is_valid_original_principal("proxy", None)
        assert not security.is_valid_original_principal("proxy", "proxy-su")
        assert await security.can_produce("proxy-su", "app", TOPIC)         # superuser proxy, allowed client
        assert not await security.can_produce("proxy-su", "billing", TOPIC)  # the client is not allowed
        assert not await security.can_produce("proxy", "app", TOPIC)        # the proxy itself has no grant
        assert not await security.can_produce("app", "admin", TOPIC)        # not a proxy
    finally:
        security.close()


async def test_authorization_off_allows_everything(configuration) -> None:
    security = BrokerSecurity(SecuritySettings(), configuration=configuration)
    assert security.authentication is None and not security.authorization_enabled
    assert await security.can_produce(None, None, TOPIC)
    assert await security.can_administer_tenant(None, None, "acme")
    security.count_failure("expired")
    assert security.failures("expired") == 1


# ------------------------------------------------------------------------------------------ client credentials


def test_broker_client_tokens_inline_and_from_a_file_read_again(tmp_path) -> None:
    inline = BrokerClientCredentials(BrokerClientSettings(auth_method="token", auth_params="token:abc"))
    assert (inline.token(), inline.authorization_header(), inline.ssl_context) == ("abc", "Bearer abc", None)
    assert inline.protocol_auth().get_data() == b"abc"
    path = tmp_path / "broker.token"
    path.write_text("first\n")
    from_file = BrokerClientCredentials(BrokerClientSettings(auth_method="token", auth_params=f"file://{path}"))
    assert from_file.token() == "first"
    path.write_text("rotated")
    assert from_file.protocol_auth().get_data() == b"rotated"
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerClientCredentials(BrokerClientSettings(auth_method="token", auth_params=f"file://{tmp_path}/none"))
    nothing = BrokerClientCredentials(BrokerClientSettings())
    assert (nothing.token(), nothing.protocol_auth(), nothing.choose_url("http://a", "https://a")) == \
        (None, None, "http://a")


def test_broker_client_tls_presents_a_certificate_and_prefers_tls_urls(tmp_path) -> None:
    certs.write_ca(tmp_path)
    files = certs.write_client_certificate(tmp_path, role="broker")
    credentials = BrokerClientCredentials(BrokerClientSettings(
        auth_method="tls", auth_params=f"{files.cert_file},{files.key_file}",
        trust_certs_file=str(tmp_path / "ca.cert.pem")))
    assert credentials.tls and credentials.ssl_context is not None
    assert credentials.protocol_auth().method_name == "tls"
    assert credentials.choose_url("pulsar://b:6650", "pulsar+ssl://b:6651") == "pulsar+ssl://b:6651"
    assert credentials.choose_url("pulsar://b:6650", "") == "pulsar://b:6650"
    with pytest.raises(ConfigError):
        BrokerClientCredentials(BrokerClientSettings(auth_method="tls", auth_params="missing.pem,missing.key"))


def test_tokens_module_is_what_the_broker_verifies_with() -> None:
    token = tokens.create_token("app", key=b"k" * 32, algorithm="HS256", expires_s=60)
    security = BrokerSecurity(SecuritySettings(authentication_enabled=True, authentication_providers=("token",),
                                               token_secret_key=SECRET))
    from magnetar.auth.providers import Credentials

    assert security.authentication.authenticate(Credentials(method="token", data=token.encode())).role == "app"
