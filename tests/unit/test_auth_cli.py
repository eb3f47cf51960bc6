"""``magnetar tokens`` and ``magnetar certs`` through the ``magnetar`` command (typer's CliRunner, and one real
subprocess): tokens made by ``create`` pass ``validate`` and the token provider; ``certs`` writes files that
build working TLS contexts."""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from magnetar import net
from magnetar.auth.providers import Credentials, TokenAuthenticationProvider, TokenSettings
from magnetar.auth.tls import TlsSettings, client_context, server_context
from magnetar.auth.tokens_cli import parse_expiry_s
from magnetar.cli import app


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def run(*args: str, code: int = 0, env: "dict | None" = None):
    result = CliRunner(env=env).invoke(app, list(args))
    assert result.exit_code == code, (args, result.exit_code, result.stdout, result.stderr)
    return result


def test_secret_key_create_validate(tmp_path) -> None:
    key_file = tmp_path / "secret.key"
    run("tokens", "create-secret-key", "--output", str(key_file))
    assert len(key_file.read_bytes()) == 32
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    key = f"file://{key_file}"
    token = run("tokens", "create", "--subject", "alice", "--secret-key", key, "--expiry-time", "1h").stdout.strip()
    header, _, claims = run("tokens", "show", token).stdout.strip().split("\n")
    assert json.loads(header)["alg"] == "HS256" and json.loads(claims)["sub"] == "alice"
    checked = run("tokens", "validate", token, "-sk", key)
    assert json.loads(checked.stdout)["sub"] == "alice" and "role 'alice'" in checked.stderr
    # the same token through the provider a server runs
    who = TokenAuthenticationProvider(TokenSettings(secret_key=key)).authenticate(
        Credentials("token", token.encode()))
    assert who.role == "alice" and who.expires_at_s is not None
    # another key refuses it, with the reason
    other = tmp_path / "other.key"
    run("tokens", "create-secret-key", "-o", str(other))
    refused = run("tokens", "validate", token, "--secret-key", f"file://{other}", code=1)
    assert "bad_signature" in refused.stderr and "signed with another key" in refused.stderr


def test_base64_secret_key_as_data_url() -> None:
    b64 = run("tokens", "create-secret-key", "--base64").stdout.strip()
    assert len(base64.b64decode(b64)) == 32
    token = run("tokens", "create", "-s", "bob", "-sk", f"data:;base64,{b64}", "--audience", "east").stdout.strip()
    run("tokens", "validate", token, "-sk", f"data:;base64,{b64}", "--audience", "east")
    wrong = run("tokens", "validate", token, "-sk", f"data:;base64,{b64}", "--audience", "west", code=1)
    assert "wrong_audience" in wrong.stderr


@pytest.mark.parametrize("algorithm, key_format", [("RS256", "pem"), ("ES256", "pem"), ("RS256", "der")])
def test_key_pair_create_validate(tmp_path, algorithm: str, key_format: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    run("tokens", "create-key-pair", "--algorithm", algorithm, "--output-private-key", str(private),
        "--output-public-key", str(public), "--format", key_format)
    assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
    assert private.read_bytes().startswith(b"-----BEGIN") == (key_format == "pem")
    token = run("tokens", "create", "-s", "svc", "--private-key", f"file://{private}", "-e", "10m").stdout.strip()
    header = json.loads(run("tokens", "show", token).stdout.split("\n")[0])
    assert header["alg"] == algorithm
    run("tokens", "validate", token, "--public-key", f"file://{public}")
    # the public key is no HMAC secret: the tool will not make such a token, and one forged by hand (HS256
    # keyed with the public key's bytes: algorithm confusion) is refused
    assert "cannot sign a HS256 token" in run("tokens", "create", "-s", "admin", "-sk", f"file://{public}",
                                              code=2).stderr
    signing_input = b64url(b'{"alg":"HS256"}') + "." + b64url(b'{"sub":"admin"}')
    forged = signing_input + "." + b64url(hmac.new(public.read_bytes(), signing_input.encode(), "sha256").digest())
    assert "bad_signature" in run("tokens", "validate", forged, "-pk", f"file://{public}", code=1).stderr


def test_token_sources_and_usage_errors(tmp_path) -> None:
    b64 = run("tokens", "create-secret-key", "-b").stdout.strip()
    key = f"data:;base64,{b64}"
    token = run("tokens", "create", "-s", "carol", "-sk", key).stdout.strip()
    (tmp_path / "token.txt").write_text(token + "\n")
    assert "carol" in run("tokens", "show", "-f", str(tmp_path / "token.txt")).stdout
    assert "carol" in run("tokens", "validate", "-sk", key, env={"TOKEN": token}).stdout
    assert "carol" in CliRunner().invoke(app, ["tokens", "show", "--stdin"], input=token + "\n").stdout
    assert "exactly one" in run("tokens", "create", "-s", "x", code=2).stderr
    assert "exactly one" in run("tokens", "validate", token, code=2).stderr
    assert "cannot read key file" in run("tokens", "create", "-s", "x", "-sk", "file:///no/such", code=2).stderr
    assert "malformed" in run("tokens", "show", "garbage", code=2).stderr
    expired = run("tokens", "validate", "-sk", key,
                  run("tokens", "create", "-s", "x", "-sk", key, "-e", "0s").stdout.strip(), code=1)
    assert "expired" in expired.stderr and "token expired at" in expired.stderr
    assert "expiry time" in run("tokens", "create", "-s", "x", "-sk", key, "-e", "soon", code=2).stderr


def test_expiry_syntax_is_pulsars() -> None:
    assert [parse_expiry_s(t) for t in ("30", "30s", "10m", "1h", "3d", "2w", "1y", "1H")] == [
        30, 30, 600, 3600, 3 * 86400, 14 * 86400, 365 * 86400, 3600]


def test_magnetar_tokens_as_a_process(tmp_path) -> None:
    """The installed entry point path: ``python -m magnetar tokens ...`` in a subprocess."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}
    key = tmp_path / "k"
    subprocess.run([sys.executable, "-m", "magnetar", "tokens", "create-secret-key", "-o", str(key)], env=env,
                   check=True, timeout=120, capture_output=True)
    made = subprocess.run([sys.executable, "-m", "magnetar", "tokens", "create", "-s", "proc", "-sk",
                           f"file://{key}"], env=env, check=True, timeout=120, capture_output=True, text=True)
    checked = subprocess.run([sys.executable, "-m", "magnetar", "tokens", "validate", made.stdout.strip(), "-sk",
                              f"file://{key}"], env=env, timeout=120, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["sub"] == "proc"


async def test_certs_make_a_working_mutual_tls_pair(tmp_path) -> None:
    pki = str(tmp_path / "pki")
    run("certs", "ca", "--dir", pki, "--cn", "Test CA")
    assert "already exists" in run("certs", "ca", "--dir", pki, code=2).stderr
    out = run("certs", "server", "--dir", pki, "--hostname", "localhost", "--ip", "127.0.0.1").stdout
    assert "SANs: localhost, 127.0.0.1" in out
    run("certs", "client", "--dir", pki, "--role", "app-1")
    for name in ("ca", "server", "app-1"):
        assert stat.S_IMODE(os.stat(f"{pki}/{name}.key.pem").st_mode) == 0o600
    assert "not an IP address" in run("certs", "server", "--dir", pki, "--ip", "nope", code=2).stderr
    assert "no CA in" in run("certs", "client", "--dir", str(tmp_path / "empty"), "--role", "x", code=2).stderr

    server_ctx = server_context(TlsSettings(cert_file=f"{pki}/server.cert.pem", key_file=f"{pki}/server.key.pem",
                                            trust_certs_file=f"{pki}/ca.cert.pem", require_client_cert=True))
    client_ctx = client_context(TlsSettings(cert_file=f"{pki}/app-1.cert.pem", key_file=f"{pki}/app-1.key.pem",
                                            trust_certs_file=f"{pki}/ca.cert.pem"))
    seen: list = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(writer.get_extra_info("peercert"))
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    port = net.free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=server_ctx)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                                       server_hostname="localhost")
        writer.write(b"ping\n")
        assert await asyncio.wait_for(reader.readline(), 10) == b"ping\n"
        assert writer.get_extra_info("ssl_object").version() in ("TLSv1.2", "TLSv1.3")
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
    assert dict(x[0] for x in seen[0]["subject"])["commonName"] == "app-1"
