"""What pulsar-client really sends, and that ``magnetar.auth`` authenticates it: the real client over
``pulsar+ssl://`` with ``tls_validate_hostname=True`` against a minimal TLS endpoint (certificates from
``magnetar.auth.certs``, context from ``magnetar.auth.tls``) that answers CONNECT and refuses the topic lookup
with AuthorizationError, so the client returns at once.

Facts pinned here (pulsar-client 3.x, C++ core): ``AuthenticationTLS`` sends CONNECT ``auth_method_name="tls"``
without ``auth_data`` and presents its certificate in the handshake; ``AuthenticationToken`` sends
``auth_method_name="token"`` and the token as ``auth_data``; both announce ``supports_auth_refresh``.
"""

from __future__ import annotations

import asyncio
import base64
import threading

import pulsar
import pytest

from magnetar import net
from magnetar.auth import certs, tokens
from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import AuthenticationService, Credentials, TokenSettings
from magnetar.auth.tls import TlsSettings, server_context
from magnetar.protocol import frames
from magnetar.protocol import pulsar_api_pb2 as pb


class ConnectRecorder:
    """A TLS endpoint on its own event loop thread: records each CONNECT with its authentication result."""

    def __init__(self, context, service: AuthenticationService) -> None:
        self.port = net.free_port()
        self.connects: list[tuple[pb.CommandConnect, object]] = []
        self._context, self._service = context, service
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connect-recorder", daemon=True)

    def __enter__(self) -> "ConnectRecorder":
        self._thread.start()
        assert self._started.wait(30), "the TLS endpoint did not start"
        return self

    def __exit__(self, *exc) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        async def main() -> None:
            self._stop = asyncio.Event()
            server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, ssl=self._context)
            self._started.set()
            async with server:
                await self._stop.wait()

        self._loop.run_until_complete(main())
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = frames.FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    self._answer(frame.command, writer)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    def _answer(self, cmd: pb.BaseCommand, writer: asyncio.StreamWriter) -> None:
        if cmd.type == pb.BaseCommand.CONNECT:
            credentials = Credentials(method=cmd.connect.auth_method_name, data=cmd.connect.auth_data,
                                      peer_certificate=writer.get_extra_info("peercert"))
            try:
                outcome: object = self._service.authenticate(credentials)
            except AuthenticationError as err:
                outcome = err
            self.connects.append((cmd.connect, outcome))
            writer.write(frames.encode_command(frames.wrap(pb.CommandConnected(server_version="test",
                                                                               protocol_version=20))))
        elif cmd.type == pb.BaseCommand.PARTITIONED_METADATA:
            writer.write(frames.encode_command(frames.wrap(pb.CommandPartitionedTopicMetadataResponse(
                request_id=cmd.partitionMetadata.request_id, response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=pb.AuthorizationError, message="recorder refuses every topic"))))


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    certs.write_ca(directory)
    certs.write_server_certificate(directory, hostnames=["localhost"], ips=["127.0.0.1"])
    certs.write_client_certificate(directory, role="app-1")
    return directory


@pytest.fixture(scope="module")
def secret() -> bytes:
    return tokens.create_secret_key()


@pytest.fixture
def recorder(pki, secret):
    context = server_context(TlsSettings(cert_file=str(pki / "server.cert.pem"), key_file=str(pki / "server.key.pem"),
                                         trust_certs_file=str(pki / "ca.cert.pem")))
    service = AuthenticationService.from_settings(
        ["tls", "token"], token=TokenSettings(secret_key="data:;base64," + base64.b64encode(secret).decode()))
    with ConnectRecorder(context, service) as endpoint:
        yield endpoint


def connect_once(recorder: ConnectRecorder, pki, authentication) -> None:
    client = pulsar.Client(f"pulsar+ssl://localhost:{recorder.port}", authentication=authentication,
                           tls_trust_certs_file_path=str(pki / "ca.cert.pem"), tls_validate_hostname=True,
                           operation_timeout_seconds=30)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer("persistent://public/default/auth-probe")
    finally:
        client.close()


def test_authentication_tls_sends_its_certificate_and_no_auth_data(recorder, pki) -> None:
    connect_once(recorder, pki, pulsar.AuthenticationTLS(str(pki / "app-1.cert.pem"), str(pki / "app-1.key.pem")))
    connect, outcome = recorder.connects[0]
    assert connect.auth_method_name == "tls" and not connect.HasField("auth_data")
    assert connect.feature_flags.supports_auth_refresh
    assert (outcome.role, outcome.method) == ("app-1", "tls")
    assert outcome.expires_at_s is not None


def test_authentication_token_sends_the_token(recorder, pki, secret) -> None:
    token = tokens.create_token("app-2", key=secret, algorithm="HS256", expires_s=600)
    connect_once(recorder, pki, pulsar.AuthenticationToken(token))
    connect, outcome = recorder.connects[0]
    assert connect.auth_method_name == "token" and connect.auth_data == token.encode()
    assert (outcome.role, outcome.method) == ("app-2", "token")


def test_a_token_signed_elsewhere_is_refused(recorder, pki) -> None:
    forged = tokens.create_token("app-2", key=tokens.create_secret_key(), algorithm="HS256")
    connect_once(recorder, pki, pulsar.AuthenticationToken(forged))
    _, outcome = recorder.connects[0]
    assert isinstance(outcome, AuthenticationError) and outcome.reason == "bad_signature"
