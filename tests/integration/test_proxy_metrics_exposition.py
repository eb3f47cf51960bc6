"""The proxy's ``/metrics`` after real traffic through it (the real pulsar-client producing and consuming over
``pulsar+ssl://``, a lookup, a refused plain-text client): the real ``promtool check metrics`` finds no error or
lint problem, and the OpenMetrics form Prometheus scrapes parses with the same families."""

from __future__ import annotations

import asyncio

import pulsar
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from magnetar.protocol import encode_command
from magnetar.protocol.client.commands import connect_command
from tests.kit.brokers import start_brokers
from tests.kit.certs import TestCa
from tests.kit.exposition import promtool_check_metrics, samples, scrape, value
from tests.kit.proxies import start_proxy

pytestmark = pytest.mark.timeout(240)


async def test_the_proxy_exposition_is_clean_after_traffic(tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    start_brokers(1, tmp_path, zk_connect)
    ca = TestCa(tmp_path / "ca")
    proxy = start_proxy(tmp_path, zk_connect, ca)

    def produce_and_consume() -> None:
        client = pulsar.Client(proxy.pulsar_ssl_url, tls_trust_certs_file_path=str(ca.ca_file),
                               tls_validate_hostname=True, operation_timeout_seconds=30)
        try:
            topic = "persistent://public/default/exposition"
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topic)
            for n in range(10):
                producer.send(f"m{n}".encode())
            for _ in range(10):
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        finally:
            client.close()

    await asyncio.to_thread(produce_and_consume)
    # A plain-text CONNECT on the TLS port: refused, and counted by reason (a labelled series gets a sample).
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.tls_port)
    writer.write(encode_command(connect_command()))
    assert await asyncio.wait_for(reader.read(), 10) == b""  # closed without a word of the protocol
    writer.close()

    url = f"{proxy.http_url}/metrics"
    text = scrape(url)
    parsed = samples(text)
    assert value(parsed, "pulsar_proxy_lookup_requests_total") > 0
    assert value(parsed, "pulsar_proxy_binary_bytes_total") > 0
    assert value(parsed, "magnetar_proxy_auth_failures_total", reason="malformed") >= 1
    code, output = promtool_check_metrics(text)
    assert code == 0 and output == "", f"promtool check metrics exited {code}:\n{output}"
    families = {f.name: f for f in parse_openmetrics(scrape(url, openmetrics=True))}
    for name in ("pulsar_proxy_active_connections", "pulsar_proxy_binary_bytes", "pulsar_proxy_lookup_requests",
                 "magnetar_proxy_auth_failures"):
        assert name in families and families[name].samples, name
