"""Real X.509 certificates for TLS tests, made with ``cryptography``: a CA, server certificates with SANs, and
client certificates whose subject CN is a role.

``TestCa(tmp_path / "ca").server("proxy", hosts=["127.0.0.1", "localhost"])`` writes PEM files and returns their
paths; everything is EC P-256 and valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    cert: pathlib.Path
    key: pathlib.Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


class TestCa:
    """A certificate authority in ``folder`` (``ca.pem`` is what peers trust)."""

    __test__ = False  # not a pytest test class

    def __init__(self, folder: pathlib.Path, name: str = "Magnetar Test CA") -> None:
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._name = subject
        self._cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
                      .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
                      .not_valid_before(now - datetime.timedelta(minutes=5))
                      .not_valid_after(now + datetime.timedelta(days=1))
                      .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                      .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                   content_commitment=False, key_encipherment=False,
                                                   data_encipherment=False, key_agreement=False, encipher_only=False,
                                                   decipher_only=False), critical=True)
                      .sign(self._key, hashes.SHA256()))
        self.ca_file = self.folder / "ca.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def _issue(self, name: str, *, cn: str, hosts: Sequence[str], usage: x509.ObjectIdentifier) -> CertFiles:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
                   .issuer_name(self._name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = CertFiles(self.folder / f"{name}.pem", self.folder / f"{name}.key.pem")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files.key.write_bytes(_key_pem(key))
        return files

    def server(self, name: str, *, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> CertFiles:
        """A server certificate valid for ``hosts`` (IP addresses and DNS names)."""
        return self._issue(name, cn=hosts[0] if hosts else name, hosts=hosts, usage=ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, role: str) -> CertFiles:
        """A client certificate whose subject CN is ``role``."""
        return self._issue(f"client-{role}", cn=role, hosts=(), usage=ExtendedKeyUsageOID.CLIENT_AUTH)
