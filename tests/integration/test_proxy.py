"""The gateway proxy as a real process in front of real brokers (real ZooKeeper and bookies), reached by the real
pulsar-client over ``pulsar+ssl://`` with hostname verification: produce, consume, readers and partitioned
topics go through it; the admin REST API too."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
import random
import re
import socket
import ssl
import struct
import subprocess
import urllib.request

import aiohttp
import pulsar
import pytest

from magnetar.net import free_port
from magnetar.protocol import FrameDecoder, encode_command, pb, wrap
from magnetar.protocol.client import Connection, ServerError
from magnetar.protocol.client.commands import connect_command

from tests.kit.bookies import start_bookies
from tests.kit.brokers import broker_on_own_zookeeper, start_brokers
from tests.kit.certs import TestCa
from tests.kit.process import python_command
from tests.kit.proxies import start_proxy
from tests.kit.regions import http_json
from tests.kit.wait import wait_for, wait_for_async

pytestmark = pytest.mark.timeout(240)


def tls_client(proxy, ca: TestCa, **kwargs) -> pulsar.Client:
    return pulsar.Client(proxy.pulsar_ssl_url, tls_trust_certs_file_path=str(ca.ca_file), tls_validate_hostname=True,
                         operation_timeout_seconds=30, **kwargs)


@pytest.fixture
def region(tmp_path, zk_connect, bookie_factory):
    """Two brokers, two bookies and a proxy with a TLS port (certificate for 127.0.0.1 and localhost)."""
    bookie_factory(2)
    brokers = start_brokers(2, tmp_path, zk_connect)
    ca = TestCa(tmp_path / "ca")
    proxy = start_proxy(tmp_path, zk_connect, ca)
    return brokers, proxy, ca


@pytest.fixture(scope="module")
def shared_region(tmp_path_factory, zk_server):
    """The same region, started once for the tests that leave it as they found it (each uses its own topics
    and counts metrics with lower bounds); a test that kills a process takes ``region``."""
    base = tmp_path_factory.mktemp("proxy-region")
    zk = zk_server.new_chroot()
    started = []
    try:
        started += [b.process for b in start_bookies(2, base, zk)]
        brokers = start_brokers(2, base, zk)
        started += [b.process for b in brokers]
        ca = TestCa(base / "ca")
        proxy = start_proxy(base, zk, ca)
        started.append(proxy.process)
        yield brokers, proxy, ca
    finally:
        for process in started:
            process.cleanup()


def test_produce_consume_reader_and_partitioned_topics_through_the_proxy_over_tls(shared_region) -> None:
    brokers, proxy, ca = shared_region
    client = tls_client(proxy, ca)
    try:
        topics = [f"persistent://public/default/through-proxy-{i}" for i in range(6)]
        for topic in topics:  # spread over both brokers' bundles
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(topic)
            for n in range(20):
                producer.send(f"{topic}-{n}".encode())
            got = [consumer.receive(timeout_millis=10_000) for _ in range(20)]
            assert [m.data().decode() for m in got] == [f"{topic}-{n}" for n in range(20)]
            for m in got:
                consumer.acknowledge(m)
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(timeout_millis=10_000).data() == f"{topic}-0".encode()
            reader.close()
            producer.close()
            consumer.close()
        partitioned = "persistent://public/default/through-proxy-partitioned"
        request = urllib.request.Request(f"{proxy.http_url}/admin/v2/persistent/public/default/"
                                         f"through-proxy-partitioned/partitions", data=b"4", method="PUT",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 204
        consumer = client.subscribe(partitioned, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(partitioned)
        for n in range(40):
            producer.send(f"p-{n}".encode(), partition_key=str(n))
        received = sorted(consumer.receive(timeout_millis=10_000).data().decode() for _ in range(40))
        assert received == sorted(f"p-{n}" for n in range(40))
        assert len(client.get_topic_partitions(partitioned)) == 4
        # a pattern consumer finds its topics through the proxy (GET_TOPICS_OF_NAMESPACE) and reads them all
        pattern = client.subscribe(re.compile(r"persistent://public/default/through-proxy-\d"), "pattern",
                                   initial_position=pulsar.InitialPosition.Earliest)
        seen = {pattern.receive(timeout_millis=10_000).topic_name() for _ in range(len(topics) * 20)}
        assert seen == set(topics)
    finally:
        client.close()
    samples = proxy.metrics()
    assert samples["pulsar_proxy_lookup_requests_total"] > 0
    assert samples["pulsar_proxy_binary_bytes_total"] > 0
    assert samples["pulsar_proxy_new_connections_total"] >= 3  # the lookup connection and one per broker


# -- forwarding only to registered brokers ------------------------------------------------------------------


async def connect_frames(reader: asyncio.StreamReader, *, timeout_s: float = 10.0) -> list[pb.BaseCommand]:
    """Reads until the peer closes (or ``timeout_s``), returning the commands it sent."""
    decoder = FrameDecoder()
    frames: list[pb.BaseCommand] = []
    async with asyncio.timeout(timeout_s):
        while data := await reader.read(65536):
            frames += [f.command for f in decoder.feed(data)]
    return frames


async def test_a_client_naming_an_unregistered_broker_is_refused_and_a_registered_one_is_served(shared_region) -> None:
    brokers, proxy, ca = shared_region
    ssl_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    not_brokers = [
        f"127.0.0.1:{brokers[0].http_port}",          # a registered broker's host, another port
        f"127.0.0.1:{proxy.web_port}",                  # the proxy itself
        "10.1.2.3:6650",                                # somewhere else
        f"pulsar://127.0.0.1:{brokers[0].port},127.0.0.1:{brokers[1].port}",  # two targets
        "127.0.0.1",                                    # no port
    ]
    for target in not_brokers:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.tls_port, ssl=ssl_ctx,
                                                       server_hostname="127.0.0.1")
        writer.write(encode_command(connect_command(proxy_to_broker_url=target)))
        frames = await connect_frames(reader)
        writer.close()
        assert [f.type for f in frames] == [pb.BaseCommand.ERROR], (target, frames)
        assert frames[0].error.error == pb.ServiceNotReady and "cannot be validated" in frames[0].error.message
    assert proxy.metric("magnetar_proxy_denied_targets_total") == len(not_brokers)
    for broker in brokers:  # the registered brokers are served, through the proxy, by the broker itself
        conn = Connection(proxy.pulsar_ssl_url, logical_url=broker.pulsar_url, ssl_context=ssl_ctx)
        await conn.start()
        assert conn.server_version and not conn.server_version.startswith("magnetar-proxy")
        answer = await conn.request(pb.CommandPartitionedTopicMetadata(topic="persistent://public/default/x"))
        assert answer.partitionMetadataResponse.partitions == 0
        await conn.close()
    assert proxy.process.alive


# -- bad input never kills the proxy -------------------------------------------------------------------------


async def test_a_plain_text_client_on_the_tls_port_is_refused_and_counted(shared_region) -> None:
    brokers, proxy, ca = shared_region
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.tls_port)
    writer.write(encode_command(connect_command()))
    assert await connect_frames(reader) == []  # closed without a word of the protocol
    writer.close()
    plain = pulsar.Client(f"pulsar://127.0.0.1:{proxy.tls_port}", operation_timeout_seconds=3,
                          connection_timeout_ms=2000)
    try:
        with pytest.raises(pulsar.PulsarException):
            await asyncio.to_thread(plain.create_producer, "persistent://public/default/plain-on-tls")
    finally:
        plain.close()
    assert proxy.metric('magnetar_proxy_auth_failures_total{reason="malformed"}') >= 2
    client = tls_client(proxy, ca)  # the TLS port still serves
    try:
        producer = await asyncio.to_thread(client.create_producer, "persistent://public/default/after-plain")
        await asyncio.to_thread(producer.send, b"still here")
    finally:
        client.close()


async def test_silent_clients_are_closed_at_the_handshake_timeout(tmp_path, zk_connect) -> None:
    ca = TestCa(tmp_path / "ca")
    proxy = start_proxy(tmp_path, zk_connect, ca, handshake_timeout_ms=500)
    ssl_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    started = asyncio.get_running_loop().time()
    silent = [await asyncio.open_connection("127.0.0.1", proxy.port),                      # says nothing
              await asyncio.open_connection("127.0.0.1", proxy.tls_port),                  # no TLS hello
              await asyncio.open_connection("127.0.0.1", proxy.tls_port, ssl=ssl_ctx,      # TLS, then no CONNECT
                                            server_hostname="localhost")]
    half = await asyncio.open_connection("127.0.0.1", proxy.port)
    half[1].write(encode_command(connect_command())[:7])                                    # half a CONNECT
    for reader, writer in [*silent, half]:
        assert await connect_frames(reader, timeout_s=10) == []
        writer.close()
    assert asyncio.get_running_loop().time() - started < 8
    assert proxy.metric("magnetar_proxy_handshake_timeouts_total") == 4
    assert proxy.metric("pulsar_proxy_active_connections") == 0


async def test_fuzzed_handshakes_never_kill_the_proxy(shared_region) -> None:
    brokers, proxy, ca = shared_region
    seed = random.randrange(1 << 30)
    print(f"fuzz seed {seed}")
    rng = random.Random(seed)
    ssl_ctx = ssl.create_default_context(cafile=str(ca.ca_file))
    connect = encode_command(connect_command())
    forward = encode_command(connect_command(proxy_to_broker_url=brokers[0].pulsar_url.removeprefix("pulsar://")))
    lookup = encode_command(wrap(pb.CommandLookupTopic(topic="persistent://public/default/f", request_id=1)))

    def garbage() -> bytes:
        kind = rng.randrange(6)
        if kind == 0:
            return rng.randbytes(rng.randrange(1, 300))
        if kind == 1:  # a frame announcing far too much
            return struct.pack(">II", rng.randrange(1 << 20, 1 << 32), 10) + rng.randbytes(20)
        if kind == 2:  # truncated CONNECT
            return connect[: rng.randrange(1, len(connect))]
        if kind == 3:  # a CONNECT with its body flipped
            body = bytearray(connect)
            body[rng.randrange(8, len(body))] ^= 0xFF
            return bytes(body)
        if kind == 4:  # a valid CONNECT, then garbage in the lookup phase
            return connect + rng.randbytes(rng.randrange(1, 100))
        return forward + rng.randbytes(rng.randrange(1, 100))  # garbage spliced to a broker

    async def one(port: int, tls: bool) -> None:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=ssl_ctx if tls else None, server_hostname="localhost" if tls else None)
        except (ssl.SSLError, OSError):
            return
        try:
            for _ in range(rng.randrange(1, 4)):
                writer.write(garbage())
            await writer.drain()
            if rng.random() < 0.5:
                writer.write_eof() if writer.can_write_eof() else None
            with contextlib.suppress(TimeoutError, OSError, ssl.SSLError):
                await connect_frames(reader, timeout_s=3)
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()

    for _ in range(60):
        mode = rng.randrange(3)
        if mode == 0:
            await one(proxy.port, tls=False)
        elif mode == 1:
            await one(proxy.tls_port, tls=True)
        else:  # raw bytes where a TLS hello belongs
            await one(proxy.tls_port, tls=False)
        assert proxy.process.alive, f"seed {seed}"
    # still serving, through both ports, and every fuzzed connection was given back
    for url, extra in ((proxy.pulsar_url, {}), (proxy.pulsar_ssl_url, {"tls_trust_certs_file_path": str(ca.ca_file),
                                                                          "tls_validate_hostname": True})):
        client = pulsar.Client(url, operation_timeout_seconds=30, **extra)
        try:
            producer = await asyncio.to_thread(client.create_producer, "persistent://public/default/after-fuzz")
            await asyncio.to_thread(producer.send, b"alive")
        finally:
            client.close()
    await wait_for_async(lambda: proxy.metric("pulsar_proxy_active_connections") == 0, 15,
                         what="every connection closed")
    assert all(b.process.alive for b in brokers)


# -- limits --------------------------------------------------------------------------------------------------


async def open_from(source_ip: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source_ip, 0))


async def handshakes(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """True if the proxy answers CONNECT with CONNECTED; False if it closed (or reset) the connection instead."""
    decoder = FrameDecoder()
    try:
        writer.write(encode_command(connect_command()))
        async with asyncio.timeout(10):
            while data := await reader.read(65536):
                frames = decoder.feed(data)
                if frames:
                    return frames[0].command.type == pb.BaseCommand.CONNECTED
    except ConnectionResetError:
        pass
    return False


async def test_connection_caps_in_total_and_per_address_refuse_at_accept(tmp_path, zk_connect) -> None:
    proxy = start_proxy(tmp_path, zk_connect, None, max_concurrent_inbound_connections=5,
                        max_concurrent_inbound_connections_per_ip=3)
    held = [await open_from("127.0.0.1", proxy.port) for _ in range(3)]
    for conn in held:
        assert await handshakes(*conn)
    assert not await handshakes(*await open_from("127.0.0.1", proxy.port))      # a 4th from the same address
    held += [await open_from("127.0.0.2", proxy.port) for _ in range(2)]         # another address: admitted
    for conn in held[3:]:
        assert await handshakes(*conn)
    assert not await handshakes(*await open_from("127.0.0.3", proxy.port))      # 6th in total
    assert proxy.metric("pulsar_proxy_rejected_connections_total") == 2
    assert proxy.metric("pulsar_proxy_active_connections") == 5
    held.pop(0)[1].close()                                                       # one leaves: room again
    await wait_for_async(lambda: proxy.metric("pulsar_proxy_active_connections") == 4, 10, what="a slot freed")
    assert await handshakes(*await open_from("127.0.0.1", proxy.port))
    for _, writer in held:
        writer.close()


async def test_lookups_over_the_concurrency_cap_are_answered_too_many_requests(tmp_path, zk_connect,
                                                                             bookie_factory) -> None:
    bookie_factory(2)
    brokers = start_brokers(2, tmp_path, zk_connect)
    proxy = start_proxy(tmp_path, zk_connect, None, max_concurrent_lookup_requests=1)
    conn = await Connection(proxy.pulsar_url, operation_timeout_s=30).start()
    topic = "persistent://public/default/capped"
    for _ in range(2):  # the proxy now holds a connection to each broker (round robin)
        await conn.request(pb.CommandLookupTopic(topic=topic))
    for broker in brokers:  # brokers that do not answer keep the next lookup in flight
        broker.process.pause()
    try:
        in_flight = asyncio.ensure_future(conn.request(pb.CommandLookupTopic(topic=topic)))
        await wait_for_async(lambda: proxy.metric("pulsar_proxy_lookup_requests_total") == 3, 10,
                             what="the third lookup reached the proxy")
        refused = (await conn.request(pb.CommandLookupTopic(topic=topic))).lookupTopicResponse
        assert refused.response == pb.CommandLookupTopicResponse.Failed and refused.error == pb.TooManyRequests
        partitions = (await conn.request(pb.CommandPartitionedTopicMetadata(topic=topic))).partitionMetadataResponse
        assert partitions.error == pb.TooManyRequests
        with pytest.raises(ServerError) as refusal:
            await conn.request(pb.CommandGetTopicsOfNamespace(namespace="public/default"))
        assert refusal.value.code == pb.TooManyRequests
        assert not in_flight.done()
    finally:
        for broker in brokers:
            broker.process.resume()
    answer = (await in_flight).lookupTopicResponse  # the admitted one completes once the brokers do
    assert answer.response == pb.CommandLookupTopicResponse.Connect and answer.proxy_through_service_url
    assert answer.brokerServiceUrl in {b.pulsar_url for b in brokers}
    await conn.close()
    samples = proxy.metrics()
    assert samples["pulsar_proxy_rejected_lookup_requests_total"] == 1
    assert samples["pulsar_proxy_rejected_partitions_metadata_requests_total"] == 1
    assert samples["pulsar_proxy_rejected_get_topics_of_namespace_requests_total"] == 1


# -- HTTP ----------------------------------------------------------------------------------------------------


async def test_admin_rest_and_http_lookup_through_the_proxy(shared_region) -> None:
    brokers, proxy, ca = shared_region
    base = proxy.http_url
    async with aiohttp.ClientSession() as http:
        async with http.put(f"{base}/admin/v2/tenants/acme", json={"allowedClusters": ["test"]}) as r:
            assert r.status == 204, await r.text()
        async with http.put(f"{base}/admin/v2/namespaces/acme/orders") as r:
            assert r.status == 204, await r.text()
        names = [f"t{i}" for i in range(6)]
        for name in names:  # asked at either broker (round robin); the owner's redirect is followed by the proxy
            async with http.put(f"{base}/admin/v2/persistent/acme/orders/{name}") as r:
                assert r.status == 204, await r.text()
            async with http.put(f"{base}/admin/v2/persistent/acme/orders/{name}/subscription/s",
                                json={"ledgerId": -1, "entryId": -1}) as r:
                assert r.status == 204, await r.text()
            async with http.get(f"{base}/admin/v2/persistent/acme/orders/{name}/stats") as r:
                assert r.status == 200 and list((await r.json())["subscriptions"]) == ["s"]
            async with http.get(f"{base}/lookup/v2/topic/persistent/acme/orders/{name}") as r:
                assert r.status == 200 and (await r.json())["brokerUrl"] in {b.pulsar_url for b in brokers}
        async with http.get(f"{base}/admin/v2/persistent/acme/orders") as r:
            assert sorted(await r.json()) == sorted(f"persistent://acme/orders/{n}" for n in names)
        async with http.get(f"{base}/admin/v2/tenants/nobody") as r:  # the broker's own refusal passes through
            assert r.status == 404 and "reason" in await r.json()
        async with http.put(f"{base}/admin/v2/tenants/big", data=b"x" * (6 * 1024 * 1024)) as r:
            assert r.status == 413
        async with http.get(f"{base}/metrics") as r:
            text = await r.text()
        assert r.status == 200 and "pulsar_proxy_active_connections" in text and "magnetar_proxy_auth_failures" \
            in text
        async with http.get(f"{base}/health") as r:
            assert r.status == 200 and "2 broker(s)" in await r.text()
    cli = await asyncio.to_thread(subprocess.run, python_command("admin", "topics", "list", "acme/orders", "--url",
                                                                 base), capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and all(f"persistent://acme/orders/{n}" in cli.stdout for n in names), cli.stderr
    assert await asyncio.to_thread(proxy.process.terminate) == 0  # SIGTERM: a clean exit


# -- TLS ----------------------------------------------------------------------------------------------------


async def tls_handshake(port: int, ctx: ssl.SSLContext) -> bool:
    """True when a TLS connection verifying with ``ctx`` completes and the proxy answers CONNECT over it."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    except (ssl.SSLError, OSError):
        return False
    try:
        return await handshakes(reader, writer)
    except (ssl.SSLError, OSError):
        return False
    finally:
        writer.close()


async def test_client_certificates_are_verified_when_required(tmp_path, zk_connect) -> None:
    ca, other = TestCa(tmp_path / "ca"), TestCa(tmp_path / "other", name="Someone Else's CA")
    proxy = start_proxy(tmp_path, zk_connect, ca, tls_require_trusted_client_cert=True)

    def context(cert=None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca.ca_file))
        if cert is not None:
            ctx.load_cert_chain(cert.cert, cert.key)
        return ctx

    assert await tls_handshake(proxy.tls_port, context(ca.client("alice")))
    assert not await tls_handshake(proxy.tls_port, context())                       # no certificate
    assert not await tls_handshake(proxy.tls_port, context(other.client("mallory")))  # another CA's
    samples = proxy.metrics()
    assert samples['magnetar_proxy_auth_failures_total{reason="no_client_cert"}'] == 1
    assert samples['magnetar_proxy_auth_failures_total{reason="untrusted_cert"}'] == 1


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path, zk_connect) -> None:
    first, second = TestCa(tmp_path / "first"), TestCa(tmp_path / "second", name="Renewed CA")
    proxy = start_proxy(tmp_path, zk_connect, first, web_tls_port=free_port())
    trusts_first = ssl.create_default_context(cafile=str(first.ca_file))
    trusts_second = ssl.create_default_context(cafile=str(second.ca_file))

    async def https_health(ctx: ssl.SSLContext, host: str) -> bool:
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"https://{host}:{proxy.settings['web_tls_port']}/health", ssl=ctx) as r:
                    return r.status == 200
        except aiohttp.ClientError:
            return False

    assert await tls_handshake(proxy.tls_port, trusts_first)
    assert await https_health(trusts_first, "localhost") and await https_health(trusts_first, "127.0.0.1")
    renewed = second.server("renewed")
    cert_path, key_path = proxy.settings["tls_cert_file"], proxy.settings["tls_key_file"]
    pathlib.Path(key_path).write_bytes(renewed.key.read_bytes())
    pathlib.Path(cert_path).write_bytes(renewed.cert.read_bytes())
    await wait_for_async(lambda: tls_handshake(proxy.tls_port, trusts_second), 15, interval_s=0.2,
                         what="the renewed certificate served")
    assert not await tls_handshake(proxy.tls_port, trusts_first)
    for host in ("localhost", "127.0.0.1"):  # HTTPS too, with or without SNI
        await wait_for_async(lambda: https_health(trusts_second, host), 15, interval_s=0.2, what=f"HTTPS {host}")
        assert not await https_health(trusts_first, host)
    assert proxy.process.alive


# -- backpressure --------------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_consumer_that_stops_reading_holds_the_broker_back_not_the_proxys_memory(
        tmp_path, zk_connect, bookie_factory) -> None:
    bookie_factory(2)
    (broker,) = start_brokers(1, tmp_path, zk_connect)
    proxy = start_proxy(tmp_path, zk_connect, None, relay_buffer_bytes=64 * 1024)
    topic, count, size = "persistent://public/default/slow-reader", 3000, 16 * 1024
    lookups = await Connection(proxy.pulsar_url).start()  # the broker takes the topic on at its lookup
    answer = (await lookups.request(pb.CommandLookupTopic(topic=topic))).lookupTopicResponse
    assert answer.brokerServiceUrl == broker.pulsar_url and answer.proxy_through_service_url
    await lookups.close()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", proxy.port))
    reader, writer = await asyncio.open_connection(sock=sock)
    decoder = FrameDecoder()

    async def next_command() -> pb.BaseCommand:
        while True:
            frames = decoder.feed(await asyncio.wait_for(reader.read(65536), 10))
            if frames:
                assert len(frames) == 1
                return frames[0].command

    writer.write(encode_command(connect_command(proxy_to_broker_url=broker.pulsar_url.removeprefix("pulsar://"))))
    assert (await next_command()).type == pb.BaseCommand.CONNECTED
    writer.write(encode_command(wrap(pb.CommandSubscribe(
        topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive, consumer_id=1, request_id=1,
        initialPosition=pb.CommandSubscribe.Earliest))))
    assert (await next_command()).type == pb.BaseCommand.SUCCESS
    writer.write(encode_command(wrap(pb.CommandFlow(consumer_id=1, messagePermits=count))))
    await writer.drain()
    before = rss_bytes(proxy.process.pid)

    def publish() -> None:  # 48 MiB through the proxy while the consumer reads nothing
        client = pulsar.Client(proxy.pulsar_url, operation_timeout_seconds=60)
        try:
            producer = client.create_producer(topic, block_if_queue_full=True, batching_enabled=True,
                                              batching_max_publish_delay_ms=5)
            payload = b"x" * size
            for _ in range(count):
                producer.send_async(payload, None)
            producer.flush()
        finally:
            client.close()

    await asyncio.to_thread(publish)
    grown = rss_bytes(proxy.process.pid) - before
    assert grown < 12 * 1024 * 1024, f"the proxy grew by {grown / 2**20:.1f} MiB holding a slow reader's messages"
    received = 0
    async with asyncio.timeout(120):  # now read: every message arrives, nothing was dropped by the pause
        while received < count:
            for frame in decoder.feed(await reader.read(1 << 20)):
                if frame.command.type == pb.BaseCommand.MESSAGE:
                    received += max(1, frame.metadata.num_messages_in_batch)
    assert received == count
    writer.close()


# -- failover ------------------------------------------------------------------------------------------------


def test_clients_through_the_proxy_carry_on_when_the_owner_broker_dies(region) -> None:
    brokers, proxy, ca = region
    topic = "persistent://public/default/survives-a-broker"
    client = tls_client(proxy, ca)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, send_timeout_millis=60_000)
        for n in range(20):
            producer.send(f"m{n}".encode())
        owner_url = http_json("GET", f"{proxy.http_url}/lookup/v2/topic/persistent/public/default/"
                                     f"survives-a-broker")["brokerUrl"]
        owner = next(b for b in brokers if b.pulsar_url == owner_url)
        owner.kill()  # SIGKILL: its forwarded connections drop; lookups through the proxy find the survivor
        for n in range(20, 40):
            producer.send(f"m{n}".encode())
        got: dict[bytes, None] = {}
        while len(got) < 40:  # every acknowledged message, in order (at least once across the failover)
            msg = consumer.receive(timeout_millis=30_000)
            got.setdefault(msg.data())
            consumer.acknowledge(msg)
        assert list(got) == [f"m{n}".encode() for n in range(40)]
    finally:
        client.close()
    assert proxy.process.alive
    wait_for(lambda: "1 broker(s)" in urllib.request.urlopen(f"{proxy.http_url}/health").read().decode(), 30,
             what="the proxy forgot the dead broker")


# -- shutdown ------------------------------------------------------------------------------------------------


def test_sigterm_with_zookeeper_gone_exits_promptly(tmp_path) -> None:
    """A SIGTERMed proxy whose ZooKeeper is gone (a client connected through it) must not wait on the store."""
    with broker_on_own_zookeeper(tmp_path) as (zookeeper, broker):
        ca = TestCa(tmp_path / "ca")
        proxy = start_proxy(tmp_path, broker.settings["zookeeper"], ca, zk_session_timeout_ms=30_000)
        try:
            client = tls_client(proxy, ca)
            try:
                client.create_producer("persistent://public/default/proxy-zk-gone").send(b"stored")
                zookeeper.process.kill()
                code, took = proxy.timed_terminate(grace_s=20)
            finally:
                client.close()
        finally:
            proxy.process.cleanup()
    assert code == 0
    assert took < 6.0, f"a SIGTERMed proxy with its ZooKeeper gone took {took:.1f} s to exit"
