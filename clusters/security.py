"""A deployment's security material: a development CA, a server certificate, client certificates and tokens.

A topology with a proxy (``[regions.proxy]``) runs with TLS and authentication on, so its first ``magnetar up``
makes, in ``<data-dir>/security/`` (keys and tokens mode 0600, written atomically by ``magnetar.auth``)::

    ca.cert.pem, ca.key.pem          a development CA (what clients trust: tls_trust_certs_file_path)
    server.cert.pem, server.key.pem  one certificate for every process of this machine: SANs localhost,
                                     127.0.0.1 and every host the topology names
    token-secret.key                 the HS256 key tokens are signed and verified with
    <role>.jwt                       a token for each role (no expiry: development material)
    <role>.cert.pem, <role>.key.pem  a client certificate for each role (subject CN = the role)

for the roles a deployment needs (:data:`ROLES`): ``admin`` (a superuser: what operators and the demo's
admin calls use), ``proxy`` (what proxies present to brokers, in the brokers' ``proxy_roles``),
``replicator`` (what brokers present to each other and to other regions: admin fan-out, replicators),
``demo-app`` (the demo application, given produce and consume on its namespace by the demo itself) and
``prometheus`` (the client certificate the deployment's Prometheus presents to proxies it scrapes; no grant). The
proxies and the brokers of the deployment verify tokens with the one secret key and certificates with the
one CA.

Later ``up`` s keep what exists, so tokens and certificates handed out stay valid: only missing files are
made, except that a new CA re-issues every certificate (the old ones chain to nothing), a new secret key
re-mints every token, and a server certificate that does not name every host of the topology is re-issued.
"""

from __future__ import annotations

import ipaddress
import pathlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from cryptography import x509

from magnetar.auth import certs, tokens
from magnetar.auth.certs import CertificateFiles

ADMIN_ROLE = "admin"
PROXY_ROLE = "proxy"
REPLICATOR_ROLE = "replicator"
APP_ROLE = "demo-app"
PROMETHEUS_ROLE = "prometheus"
ROLES = (ADMIN_ROLE, PROXY_ROLE, REPLICATOR_ROLE, APP_ROLE, PROMETHEUS_ROLE)
SUPERUSER_ROLES = (ADMIN_ROLE, REPLICATOR_ROLE)  # at the proxies (the replicator enters remote regions there)
# At the brokers: the operator, and the deployment's own processes. A proxy role must also be allowed what it
# does for a client (Pulsar authorizes both the proxy's role and the client's), and brokers' fan-out admin
# calls and replicators act as the replicator role.
BROKER_SUPERUSER_ROLES = (ADMIN_ROLE, PROXY_ROLE, REPLICATOR_ROLE)
PROXY_ROLES = (PROXY_ROLE,)

_SERVER = "server"
_SECRET_KEY = "token-secret.key"
_ALGORITHM = "HS256"
_DEFAULT_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class SecurityFiles:
    """Where a deployment's security material lives (paths only; :func:`ensure` makes the files)."""

    directory: pathlib.Path

    @property
    def ca_file(self) -> pathlib.Path:
        return certs.ca_files(self.directory).cert_file

    @property
    def server(self) -> CertificateFiles:
        return CertificateFiles(self.directory / f"{_SERVER}.cert.pem", self.directory / f"{_SERVER}.key.pem")

    @property
    def token_secret_key_file(self) -> pathlib.Path:
        return self.directory / _SECRET_KEY

    @property
    def token_secret_key_url(self) -> str:
        """As the ``token_secret_key`` setting takes it."""
        return self.token_secret_key_file.as_uri()

    def token_file(self, role: str) -> pathlib.Path:
        return self.directory / f"{certs.file_name_for(role)}.jwt"

    def token(self, role: str) -> str:
        return self.token_file(role).read_text().strip()

    def client(self, role: str) -> CertificateFiles:
        name = certs.file_name_for(role)
        return CertificateFiles(self.directory / f"{name}.cert.pem", self.directory / f"{name}.key.pem")

    def mint_token(self, role: str, *, expires_s: float | None = None) -> str:
        """A new token for ``role`` signed with the deployment's key (e.g. the demo's role without grants)."""
        return tokens.create_token(role, key=self.token_secret_key_file.read_bytes(), algorithm=_ALGORITHM,
                                   expires_s=expires_s)

    def document(self) -> dict[str, Any]:
        """What ``topology.json`` says about it: every file, and the roles the processes are configured with."""
        return {
            "dir": str(self.directory),
            "ca_file": str(self.ca_file),
            "server_cert_file": str(self.server.cert_file),
            "server_key_file": str(self.server.key_file),
            "token_secret_key_file": str(self.token_secret_key_file),
            "superuser_roles": list(SUPERUSER_ROLES),
            "broker_superuser_roles": list(BROKER_SUPERUSER_ROLES),
            "proxy_roles": list(PROXY_ROLES),
            "roles": {
                role: {"token_file": str(self.token_file(role)), "cert_file": str(self.client(role).cert_file),
                       "key_file": str(self.client(role).key_file)}
                for role in ROLES
            },
        }


def split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[str]]:
    """(host names, IP addresses) of ``hosts`` plus localhost and 127.0.0.1, each once, in order."""
    names: list[str] = []
    ips: list[str] = []
    for host in (*_DEFAULT_HOSTS, *hosts):
        try:
            target, value = ips, str(ipaddress.ip_address(host))
        except ValueError:
            target, value = names, host
        if value not in target:
            target.append(value)
    return names, ips


def _names_all(cert_file: pathlib.Path, names: Sequence[str], ips: Sequence[str]) -> bool:
    """Whether the certificate in ``cert_file`` has every host name and address as a SAN."""
    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have_names = set(san.get_values_for_type(x509.DNSName))
    have_ips = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    return set(names) <= have_names and set(ips) <= have_ips


def ensure(directory: pathlib.Path, *, hosts: Iterable[str] = (), roles: Sequence[str] = ROLES) -> tuple[SecurityFiles, list[str]]:
    """Makes whatever is missing (see the module docstring); returns the files and what was made, by name."""
    files = SecurityFiles(pathlib.Path(directory))
    files.directory.mkdir(parents=True, exist_ok=True)
    files.directory.chmod(0o700)  # private keys and tokens: nobody else lists or opens them
    made: list[str] = []
    new_ca = not (files.ca_file.exists() and certs.ca_files(files.directory).key_file.exists())
    if new_ca:
        certs.write_ca(files.directory, common_name="Magnetar development CA", overwrite=True)
        made.append("CA")
    names, ips = split_hosts(hosts)
    server = files.server
    if new_ca or not server.key_file.exists() or not _names_all(server.cert_file, names, ips):
        certs.write_server_certificate(files.directory, hostnames=names, ips=ips, name=_SERVER)
        made.append(f"server certificate ({', '.join(names + ips)})")
    for role in roles:
        client = files.client(role)
        if new_ca or not (client.cert_file.exists() and client.key_file.exists()):
            certs.write_client_certificate(files.directory, role=role)
            made.append(f"client certificate of {role}")
    new_key = not files.token_secret_key_file.exists()
    if new_key:
        certs.write_private(files.token_secret_key_file, tokens.create_secret_key(_ALGORITHM))
        made.append("token secret key")
    for role in roles:
        if new_key or not files.token_file(role).exists():
            certs.write_private(files.token_file(role), (files.mint_token(role) + "\n").encode())
            made.append(f"token of {role}")
    return files, made
