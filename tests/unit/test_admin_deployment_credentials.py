"""`magnetar admin --data-dir D` on a deployment with security material presents its admin token (unless the
operator gave credentials), and on one without presents nothing."""

from __future__ import annotations

import http.server
import json
import pathlib
import threading
from typing import Iterator

import pytest

from magnetar import admin_cli_common
from magnetar.admin_client import AdminCredentials, AdminError, deployment_credentials
from magnetar.auth import certs


def write_topology(root: pathlib.Path, url: str, *, secured: bool) -> None:
    doc: dict = {"regions": {"east": {"brokers": [{"http": url}]}}}
    if secured:
        certs.write_ca(root / "security")
        (root / "security" / "admin.jwt").write_text("the.admin.token\n")
        doc["security"] = {"ca_file": str(root / "security" / "ca.cert.pem"), "superuser_roles": ["admin"],
                           "roles": {"admin": {"token_file": str(root / "security" / "admin.jwt")}}}
    (root / "topology.json").write_text(json.dumps(doc))


@pytest.fixture
def broker() -> Iterator[tuple[str, list]]:
    """A plain HTTP server standing in for a broker's admin API: records each request's Authorization."""
    seen: list = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            seen.append(self.headers.get("Authorization"))
            body = b'["east"]'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_deployment_credentials_are_its_admin_token_and_ca(tmp_path: pathlib.Path) -> None:
    write_topology(tmp_path, "http://x:1", secured=True)
    assert deployment_credentials(tmp_path) == AdminCredentials(
        token="the.admin.token", tls_trust_certs_file=str(tmp_path / "security" / "ca.cert.pem"))
    (tmp_path / "security" / "admin.jwt").unlink()
    with pytest.raises(AdminError, match="cannot read the token file"):
        deployment_credentials(tmp_path)


def test_a_deployment_without_security_has_no_credentials(tmp_path: pathlib.Path) -> None:
    write_topology(tmp_path, "http://x:1", secured=False)
    assert deployment_credentials(tmp_path) is None
    with pytest.raises(AdminError, match="cannot read"):
        deployment_credentials(tmp_path / "nowhere")


def test_data_dir_calls_present_the_deployments_token_unless_one_was_given(tmp_path, broker, monkeypatch) -> None:
    url, seen = broker
    monkeypatch.delenv("MAGNETAR_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("MAGNETAR_AUTH_TOKEN_FILE", raising=False)
    monkeypatch.setattr(admin_cli_common, "CREDENTIALS", None)
    secured, plain = tmp_path / "secured", tmp_path / "plain"
    for root, flag in ((secured, True), (plain, False)):
        root.mkdir()
        write_topology(root, url, secured=flag)

    assert admin_cli_common.call(None, secured, "GET", "/admin/v2/clusters") == ["east"]
    assert admin_cli_common.call(None, plain, "GET", "/admin/v2/clusters") == ["east"]
    assert admin_cli_common.call(url, secured, "GET", "/admin/v2/clusters") == ["east"]  # --url: as given
    monkeypatch.setattr(admin_cli_common, "CREDENTIALS", AdminCredentials(token="operator.given.token"))
    assert admin_cli_common.call(None, secured, "GET", "/admin/v2/clusters") == ["east"]
    assert seen == ["Bearer the.admin.token", None, None, "Bearer operator.given.token"]
