"""Real X.509 certificates for TLS tests, made by ``magnetar.auth.certs`` (what ``magnetar certs`` makes): a CA,
server certificates for 127.0.0.1 and localhost, and client certificates whose subject CN is a role.

``TestCa(tmp_path / "ca").server("proxy")`` writes PEM files and returns their paths.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from magnetar.auth import certs


@dataclass(frozen=True)
class CertFiles:
    cert: pathlib.Path
    key: pathlib.Path


class TestCa:
    """A certificate authority in ``folder`` (``ca_file`` is what peers trust)."""

    __test__ = False  # not a pytest test class

    def __init__(self, folder: pathlib.Path, name: str = "Magnetar Test CA") -> None:
        self.folder = pathlib.Path(folder)
        self.ca_file = certs.write_ca(self.folder, common_name=name).cert_file

    def server(self, name: str, *, hostnames: tuple[str, ...] = ("localhost",),
               ips: tuple[str, ...] = ("127.0.0.1",)) -> CertFiles:
        """A server certificate valid for ``hostnames`` and ``ips``."""
        files = certs.write_server_certificate(self.folder, hostnames=hostnames, ips=ips, name=name)
        return CertFiles(files.cert_file, files.key_file)

    def client(self, role: str) -> CertFiles:
        """A client certificate whose subject CN is ``role``."""
        files = certs.write_client_certificate(self.folder, role=role, name=f"client-{role}")
        return CertFiles(files.cert_file, files.key_file)
