"""TLS contexts, certificates from ``magnetar.auth.certs`` and the ``tls`` provider, over real TLS on 127.0.0.1.

A small asyncio server accepts TCP, upgrades to TLS with the context under test (``start_tls``, so its handshake
outcome is observable), authenticates the verified client certificate with ``TlsAuthenticationProvider`` and
answers the role. Clients are asyncio TLS clients with ``client_context``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import stat
from dataclasses import dataclass, field
from typing import Optional

import pytest

from magnetar import net
from magnetar.auth import certs
from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import AuthenticationService, Credentials, TlsAuthenticationProvider, TokenSettings
from magnetar.auth.tls import (ReloadingServerContext, TlsSettings, client_context, handshake_failure,
                               server_context)
from magnetar.errors import ConfigError
from tests.kit.wait import wait_for_async

HANDSHAKE_TIMEOUT_S = 10.0


@dataclass
class Pki:
    dir: str
    ca: str
    server: certs.CertificateFiles
    alice: certs.CertificateFiles
    other_ca: str
    mallory: certs.CertificateFiles  # signed by the other CA
    wrong_host: certs.CertificateFiles  # a server certificate for another name only


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    base = tmp_path_factory.mktemp("pki")
    main, other = base / "main", base / "other"
    certs.write_ca(main)
    server = certs.write_server_certificate(main, hostnames=["localhost"], ips=["127.0.0.1"])
    alice = certs.write_client_certificate(main, role="alice")
    wrong_host = certs.write_server_certificate(main, hostnames=["other.example"], ips=[], name="elsewhere")
    certs.write_ca(other, common_name="Another CA")
    mallory = certs.write_client_certificate(other, role="mallory")
    return Pki(str(main), str(main / "ca.cert.pem"), server, alice, str(other / "ca.cert.pem"), mallory, wrong_host)


def server_settings(pki: Pki, *, require: bool = True, files: Optional[certs.CertificateFiles] = None,
                    **extra) -> TlsSettings:
    files = files or pki.server
    return TlsSettings(cert_file=str(files.cert_file), key_file=str(files.key_file), trust_certs_file=pki.ca,
                       require_client_cert=require, **extra)


def client_settings(pki: Pki, who: Optional[certs.CertificateFiles] = None, *, ca: Optional[str] = None,
                    **extra) -> TlsSettings:
    return TlsSettings(cert_file=str(who.cert_file) if who else "", key_file=str(who.key_file) if who else "",
                       trust_certs_file=ca or pki.ca, **extra)


@dataclass
class RoleServer:
    """Accepts TCP, completes the TLS handshake with ``context`` (``connect_accepted_socket``, so a failed
    handshake is an exception here), answers ``role <name>\\n`` for a verified client certificate."""

    context: ssl.SSLContext
    port: int = field(default_factory=net.free_port)
    failures: list = field(default_factory=list)
    roles: list = field(default_factory=list)

    async def __aenter__(self) -> "RoleServer":
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.setblocking(False)
        self._tasks: set[asyncio.Task] = set()
        self._accepting = asyncio.create_task(self._accept())
        return self

    async def __aexit__(self, *exc) -> None:
        self._accepting.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(self._accepting, *self._tasks, return_exceptions=True)
        self._listener.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(self._listener)
            task = asyncio.create_task(self._serve(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        try:
            transport, protocol = await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(reader), sock, ssl=self.context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (ssl.SSLError, ConnectionError, asyncio.TimeoutError) as err:
            self.failures.append(handshake_failure(err))
            sock.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            try:
                who = TlsAuthenticationProvider().authenticate(
                    Credentials(method="tls", peer_certificate=writer.get_extra_info("peercert")))
            except AuthenticationError as err:
                self.failures.append(err)
                writer.write(f"refused {err.reason}\n".encode())
            else:
                self.roles.append(who.role)
                writer.write(f"role {who.role}\n".encode())
            await writer.drain()
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ssl.SSLError, ConnectionError):
                pass


async def ask(port: int, ctx: ssl.SSLContext, *, server_hostname: str = "localhost") -> str:
    """The server's answer, or the name of the error the client saw."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname=server_hostname),
            HANDSHAKE_TIMEOUT_S)
    except ssl.SSLCertVerificationError as err:
        return f"verify failed: {err.verify_message}"
    except (ssl.SSLError, ConnectionError) as err:
        return f"handshake failed: {type(err).__name__}"
    try:
        line = await asyncio.wait_for(reader.readline(), HANDSHAKE_TIMEOUT_S)
        return line.decode().strip() or "closed"
    except (ssl.SSLError, ConnectionError) as err:  # TLS 1.3: the server's refusal arrives after the handshake
        return f"closed: {type(err).__name__}"
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ssl.SSLError, ConnectionError):
            pass


async def test_mutual_tls_handshake_and_role_from_cn(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki))) as server:
        assert await ask(server.port, client_context(client_settings(pki, pki.alice))) == "role alice"
    assert server.roles == ["alice"] and server.failures == []


async def test_required_client_certificate_missing_is_refused(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki))) as server:
        answer = await ask(server.port, client_context(client_settings(pki)))
        assert not answer.startswith("role"), answer
        await wait_for_async(lambda: server.failures, 5, what="the server's handshake failure")
    assert [f.reason for f in server.failures] == ["no_client_cert"]
    assert server.roles == []


async def test_optional_client_certificate_lets_token_clients_in_without_a_role(pki: Pki) -> None:
    """Without require_client_cert the handshake succeeds, and the ``tls`` provider refuses with no_client_cert
    (a token client would authenticate with its token instead)."""
    async with RoleServer(server_context(server_settings(pki, require=False))) as server:
        assert await ask(server.port, client_context(client_settings(pki))) == "refused no_client_cert"
        assert await ask(server.port, client_context(client_settings(pki, pki.alice))) == "role alice"


@pytest.mark.parametrize("require", [True, False])
async def test_certificate_from_another_ca_is_refused(pki: Pki, require: bool) -> None:
    async with RoleServer(server_context(server_settings(pki, require=require))) as server:
        answer = await ask(server.port, client_context(client_settings(pki, pki.mallory)))
        assert not answer.startswith("role"), answer
        await wait_for_async(lambda: server.failures, 5, what="the server's handshake failure")
    assert [f.reason for f in server.failures] == ["untrusted_cert"]
    assert "client certificate not trusted" in str(server.failures[0])
    assert server.roles == []


async def test_client_refuses_a_server_from_another_ca(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki))) as server:
        answer = await ask(server.port, client_context(client_settings(pki, pki.alice, ca=pki.other_ca)))
    assert answer.startswith("verify failed"), answer
    assert server.roles == []


async def test_hostname_verification(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki, files=pki.wrong_host))) as server:
        strict = client_context(client_settings(pki, pki.alice))
        answer = await ask(server.port, strict, server_hostname="localhost")
        assert answer.startswith("verify failed") and "Hostname mismatch" in answer, answer
        assert await ask(server.port, strict, server_hostname="other.example") == "role alice"
        relaxed = client_context(client_settings(pki, pki.alice), verify_hostname=False)
        assert await ask(server.port, relaxed, server_hostname="localhost") == "role alice"
    assert server.roles == ["alice", "alice"]


async def test_ip_address_san_is_verified(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki))) as server:
        ctx = client_context(client_settings(pki, pki.alice))
        assert await ask(server.port, ctx, server_hostname="127.0.0.1") == "role alice"


async def test_min_protocol_tls13_refuses_a_tls12_client(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki, min_protocol="TLSv1.3"))) as server:
        old = client_context(client_settings(pki, pki.alice))
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        assert not (await ask(server.port, old)).startswith("role")
        assert await ask(server.port, client_context(client_settings(pki, pki.alice))) == "role alice"
        await wait_for_async(lambda: server.failures, 5, what="the server's handshake failure")
    assert server.failures[0].reason == "malformed"


async def test_plain_text_on_the_tls_port_is_a_handshake_failure(pki: Pki) -> None:
    async with RoleServer(server_context(server_settings(pki))) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"\x00\x00\x00\x10 definitely not a ClientHello\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), HANDSHAKE_TIMEOUT_S) == b""
        writer.close()
        await wait_for_async(lambda: server.failures, 5, what="the server's handshake failure")
    assert server.failures[0].reason == "malformed"


async def test_reload_serves_a_new_certificate_to_new_connections(pki: Pki, tmp_path) -> None:
    """Files replaced as ``magnetar certs`` writes them (atomically): the next connection gets the new
    certificate, through a listening socket created once (``serving_context``), and through ``context()``."""
    cert_file, key_file = tmp_path / "live.cert.pem", tmp_path / "live.key.pem"
    cert_file.write_bytes(pki.server.cert_file.read_bytes())
    key_file.write_bytes(pki.server.key_file.read_bytes())
    settings = TlsSettings(cert_file=str(cert_file), key_file=str(key_file), trust_certs_file=pki.ca,
                           require_client_cert=True)
    reloading = ReloadingServerContext(settings, check_interval_s=0.0)
    port = net.free_port()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello\n")
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", port, ssl=reloading.serving_context())

    async def served_serial() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_context(
            client_settings(pki, pki.alice)), server_hostname="localhost")
        try:
            assert await reader.readline() == b"hello\n"
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            from cryptography import x509
            return x509.load_der_x509_certificate(der).serial_number
        finally:
            writer.close()
            await writer.wait_closed()

    def serial_of(path) -> int:
        from cryptography import x509
        return x509.load_pem_x509_certificate(path.read_bytes()).serial_number

    try:
        first = await served_serial()
        assert first == serial_of(cert_file)
        fresh = certs.create_server_certificate(certs.read_ca(pki.dir), hostnames=["localhost"], ips=["127.0.0.1"])
        certs.write_private(key_file, fresh.key_pem)
        certs.write_private(cert_file, fresh.cert_pem, mode=0o644)
        second = await served_serial()
        assert second == serial_of(cert_file) != first
        assert reloading.reloads == 1
        # a half-written replacement keeps the last good certificate
        cert_file.write_bytes(b"-----BEGIN CERTIFICATE-----\ntruncated")
        assert await served_serial() == second
        assert reloading.failed_reloads >= 1
        via_context = reloading.context()
        assert via_context.verify_mode == ssl.CERT_REQUIRED
    finally:
        listener.close()
        await listener.wait_closed()


def test_reload_checks_at_most_once_per_interval(pki: Pki, tmp_path) -> None:
    now = [100.0]
    cert_file, key_file = tmp_path / "c.pem", tmp_path / "k.pem"
    cert_file.write_bytes(pki.server.cert_file.read_bytes())
    key_file.write_bytes(pki.server.key_file.read_bytes())
    reloading = ReloadingServerContext(TlsSettings(cert_file=str(cert_file), key_file=str(key_file)),
                                       check_interval_s=5.0, clock=lambda: now[0])
    first = reloading.context()
    fresh = certs.create_server_certificate(certs.read_ca(pki.dir))
    certs.write_private(key_file, fresh.key_pem)
    certs.write_private(cert_file, fresh.cert_pem)
    now[0] += 1.0
    assert reloading.context() is first
    now[0] += 5.0
    assert reloading.context() is not first and reloading.reloads == 1


def test_configuration_errors_name_what_to_fix(pki: Pki, tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        server_context(TlsSettings(cert_file=str(tmp_path / "missing.pem"), key_file=str(pki.server.key_file)))
    with pytest.raises(ConfigError, match="needs tls_trust_certs_file"):
        server_context(TlsSettings(cert_file=str(pki.server.cert_file), key_file=str(pki.server.key_file),
                                   require_client_cert=True))
    with pytest.raises(ConfigError, match="cannot use certificate"):
        server_context(TlsSettings(cert_file=str(pki.server.cert_file), key_file=str(pki.alice.key_file)))
    with pytest.raises(ConfigError, match="tls_min_protocol"):
        server_context(server_settings(pki, min_protocol="SSLv3"))
    with pytest.raises(ConfigError, match="tls_ciphers"):
        server_context(server_settings(pki, ciphers="NOT-A-CIPHER"))
    with pytest.raises(ConfigError, match="both"):
        client_context(TlsSettings(cert_file=str(pki.alice.cert_file)))
    ctx = server_context(server_settings(pki, ciphers="ECDHE+AESGCM"))
    assert all("GCM" in c["name"] or c["protocol"] == "TLSv1.3" for c in ctx.get_ciphers())


def test_contexts_follow_the_settings(pki: Pki) -> None:
    assert server_context(server_settings(pki)).verify_mode == ssl.CERT_REQUIRED
    assert server_context(server_settings(pki, require=False)).verify_mode == ssl.CERT_OPTIONAL
    no_ca = TlsSettings(cert_file=str(pki.server.cert_file), key_file=str(pki.server.key_file))
    assert server_context(no_ca).verify_mode == ssl.CERT_NONE
    client = client_context(client_settings(pki))
    assert client.check_hostname and client.verify_mode == ssl.CERT_REQUIRED
    assert client.minimum_version == ssl.TLSVersion.TLSv1_2
    relaxed = client_context(client_settings(pki), verify_hostname=False)
    assert not relaxed.check_hostname and relaxed.verify_mode == ssl.CERT_REQUIRED


def test_certificate_files(pki: Pki) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    for files in (pki.server, pki.alice):
        assert stat.S_IMODE(os.stat(files.key_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(pki.dir, "ca.key.pem")).st_mode) == 0o600
    server = x509.load_pem_x509_certificate(pki.server.cert_file.read_bytes())
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    client = x509.load_pem_x509_certificate(pki.alice.cert_file.read_bytes())
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(ConfigError, match="already exists"):
        certs.write_ca(pki.dir)
    with pytest.raises(ConfigError, match="not an IP address"):
        certs.create_server_certificate(certs.read_ca(pki.dir), ips=["localhost"])


# --- the tls provider and the service ------------------------------------------------------------------------


def peer(subject, not_after: str = "Nov 25 15:00:00 2026 GMT") -> dict:
    return {"subject": subject, "notAfter": not_after}


def test_tls_provider_role_is_the_cn() -> None:
    who = TlsAuthenticationProvider().authenticate(Credentials(
        method="tls", peer_certificate=peer(((("organizationName", "Magnetar"),), (("commonName", "alice"),)))))
    assert (who.role, who.method, who.expires_at_s) == ("alice", "tls", 1795618800.0)
    nested = peer(((("commonName", "outer"),), (("organizationalUnitName", "x"),), (("commonName", "inner"),)))
    assert TlsAuthenticationProvider().authenticate(Credentials("tls", peer_certificate=nested)).role == "inner"


@pytest.mark.parametrize("cert, reason", [
    (None, "no_client_cert"),
    ({}, "no_client_cert"),
    (peer(((("organizationName", "Magnetar"),),)), "no_role"),
    (peer(((("commonName", ""),),)), "no_role"),
    ({"subject": "garbage"}, "no_role"),
])
def test_tls_provider_refusals(cert, reason: str) -> None:
    with pytest.raises(AuthenticationError) as info:
        TlsAuthenticationProvider().authenticate(Credentials(method="tls", peer_certificate=cert))
    assert info.value.reason == reason


def test_service_chooses_the_provider_by_method() -> None:
    from magnetar.auth import tokens

    key = tokens.create_secret_key()
    import base64
    service = AuthenticationService.from_settings(
        ["tls", "token"], token=TokenSettings(secret_key="data:;base64," + base64.b64encode(key).decode()))
    assert service.methods == ("tls", "token")
    token = tokens.create_token("bob", key=key, algorithm="HS256")
    cert = peer(((("commonName", "alice"),),))
    assert service.authenticate(Credentials("token", token.encode())).role == "bob"
    assert service.authenticate(Credentials("tls", peer_certificate=cert)).role == "alice"
    for method, reason in (("", "no_credentials"), ("none", "no_credentials"), ("basic", "unknown_method"),
                           ("athenz", "unknown_method")):
        with pytest.raises(AuthenticationError) as info:
            service.authenticate(Credentials(method, b"x"))
        assert info.value.reason == reason, method
    assert "token" in str(info.value) and "client certificate" in str(info.value)
    # HTTP: a Bearer token when the header is there, else the client certificate
    assert service.authenticate_http(f"Bearer {token}", None).role == "bob"
    assert service.authenticate_http(f"bearer  {token} ", cert).role == "bob"
    assert service.authenticate_http(None, cert).role == "alice"
    for header, certificate, reason in ((None, None, "no_credentials"), ("", {}, "no_credentials"),
                                        ("Basic dXNlcjpwYXNz", cert, "unknown_method"),
                                        ("Bearer", None, "no_credentials"),
                                        ("Bearer not.a.jwt", cert, "malformed")):
        with pytest.raises(AuthenticationError) as info:
            service.authenticate_http(header, certificate)
        assert info.value.reason == reason, header


def test_service_configuration_errors() -> None:
    with pytest.raises(ConfigError, match="unknown authentication provider 'kerberos'"):
        AuthenticationService.from_settings(["kerberos"], token=TokenSettings())
    with pytest.raises(ConfigError, match="empty"):
        AuthenticationService.from_settings([], token=TokenSettings())
    with pytest.raises(ConfigError, match="token_secret_key or token_public_key"):
        AuthenticationService.from_settings(["token"], token=TokenSettings())
    tls_only = AuthenticationService.from_settings(["tls"], token=TokenSettings())
    with pytest.raises(AuthenticationError) as info:
        tls_only.authenticate(Credentials("token", b"abc"))
    assert info.value.reason == "unknown_method"
    with pytest.raises(AuthenticationError) as info:
        tls_only.authenticate_http("Bearer abc", None)
    assert info.value.reason == "unknown_method"
