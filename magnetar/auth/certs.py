"""A development certificate authority, server certificates with SANs and client certificates by role.

For development and tests (``magnetar certs``), made with ``cryptography``: a self-signed CA, server
certificates naming every host name and IP address clients dial (hostname verification checks the SANs, not
the CN), and client certificates whose subject CN is the role the ``tls`` provider authenticates. The
certificates carry what strict verifiers (OpenSSL's X509_STRICT, Python 3.13's default) insist on: critical
basic constraints, key usage, subject and authority key identifiers, extended key usage.

Files are PEM: ``<name>.cert.pem`` and ``<name>.key.pem`` (PKCS#8, unencrypted, mode 0600, as pulsar-client
and Pulsar's Java side both read PKCS#8), written atomically (a new file renamed over the old) so a server
reloading certificates never reads half a file.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import pathlib
import re
import secrets
import tempfile
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from magnetar.errors import ConfigError

CA_NAME = "ca"
KEY_TYPES = ("ec", "rsa")
_BACKDATE = datetime.timedelta(minutes=5)  # tolerate clocks a little behind the one that signed


@dataclass(frozen=True)
class CertificateFiles:
    """Where a certificate and its private key were written."""

    cert_file: pathlib.Path
    key_file: pathlib.Path


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM."""

    cert_pem: bytes
    key_pem: bytes


def _new_key(key_type: str) -> Any:
    if key_type == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    raise ConfigError(f"key type must be one of {', '.join(KEY_TYPES)}, not {key_type!r}")


def _key_pem(key: Any) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str, organization: Optional[str] = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _validity(valid_days: int) -> tuple[datetime.datetime, datetime.datetime]:
    if valid_days <= 0:
        raise ConfigError(f"a certificate must be valid for at least one day, not {valid_days}")
    now = datetime.datetime.now(datetime.timezone.utc)
    return now - _BACKDATE, now + datetime.timedelta(days=valid_days)


def create_ca(*, common_name: str = "Magnetar development CA", valid_days: int = 3650,
              key_type: str = "ec") -> Issued:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = _new_key(key_type)
    not_before, not_after = _validity(valid_days)
    name = _name(common_name, "Magnetar")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _load_ca(ca: Issued) -> tuple[x509.Certificate, Any]:
    try:
        cert = x509.load_pem_x509_certificate(ca.cert_pem)
        key = serialization.load_pem_private_key(ca.key_pem, password=None)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"the CA certificate or key is not PEM: {err}") from None
    return cert, key


def _leaf(ca: Issued, *, subject: x509.Name, usages: Sequence[x509.ObjectIdentifier],
          san: Optional[x509.SubjectAlternativeName], valid_days: int, key_type: str) -> Issued:
    ca_cert, ca_key = _load_ca(ca)
    key = _new_key(key_type)
    not_before, not_after = _validity(valid_days)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before).not_valid_after(min(not_after, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                     key_encipherment=key_type == "rsa", data_encipherment=False,
                                     key_agreement=False, key_cert_sign=False, crl_sign=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False)
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def create_server_certificate(ca: Issued, *, hostnames: Sequence[str] = ("localhost",),
                              ips: Sequence[str] = ("127.0.0.1",), common_name: Optional[str] = None,
                              valid_days: int = 825, key_type: str = "ec") -> Issued:
    """A server certificate for every name in ``hostnames`` and address in ``ips`` (its SANs). It may also
    serve as the client certificate of a process that connects onwards (a proxy to its brokers), so it is
    good for both serverAuth and clientAuth; its CN is the first host name (the role it authenticates as).
    """
    entries: list[x509.GeneralName] = []
    for host in hostnames:
        if not host or not re.fullmatch(r"[A-Za-z0-9*]([A-Za-z0-9.*-]*[A-Za-z0-9])?", host):
            raise ConfigError(f"{host!r} is not a host name")
        entries.append(x509.DNSName(host))
    for ip in ips:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError:
            raise ConfigError(f"{ip!r} is not an IP address") from None
    if not entries:
        raise ConfigError("a server certificate needs at least one host name or IP address")
    cn = common_name or (hostnames[0] if hostnames else ips[0])
    return _leaf(ca, subject=_name(cn, "Magnetar"),
                 usages=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
                 san=x509.SubjectAlternativeName(entries), valid_days=valid_days, key_type=key_type)


def create_client_certificate(ca: Issued, *, role: str, valid_days: int = 825, key_type: str = "ec") -> Issued:
    """A client certificate whose subject CN is ``role`` (what the ``tls`` provider authenticates)."""
    if not role or len(role) > 64:
        raise ConfigError("a role is 1 to 64 characters (the certificate's CN)")
    return _leaf(ca, subject=_name(role, "Magnetar"), usages=(ExtendedKeyUsageOID.CLIENT_AUTH,), san=None,
                 valid_days=valid_days, key_type=key_type)


# --- files ---------------------------------------------------------------------------------------------------


def write_private(path: pathlib.Path, data: bytes, *, mode: int = 0o600) -> None:
    """Writes ``data`` to ``path`` atomically (temporary file in the same directory, then renamed), readable
    only by its owner when ``mode`` is 0600 from the first byte on."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_pair(directory: pathlib.Path, name: str, issued: Issued) -> CertificateFiles:
    files = CertificateFiles(directory / f"{name}.cert.pem", directory / f"{name}.key.pem")
    write_private(files.key_file, issued.key_pem, mode=0o600)
    write_private(files.cert_file, issued.cert_pem, mode=0o644)
    return files


def file_name_for(text: str) -> str:
    """A file-name-safe form of a role or host name."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", text).strip(".")
    return safe or secrets.token_hex(4)


def ca_files(directory: "str | os.PathLike[str]") -> CertificateFiles:
    directory = pathlib.Path(directory)
    return CertificateFiles(directory / f"{CA_NAME}.cert.pem", directory / f"{CA_NAME}.key.pem")


def _ensure_dir(directory: "str | os.PathLike[str]") -> pathlib.Path:
    path = pathlib.Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create directory {path}: {err.strerror or err}") from None
    return path


def write_ca(directory: "str | os.PathLike[str]", *, common_name: str = "Magnetar development CA",
             valid_days: int = 3650, key_type: str = "ec", overwrite: bool = False) -> CertificateFiles:
    """Creates ``ca.cert.pem`` / ``ca.key.pem`` in ``directory``; refuses to replace an existing CA unless
    ``overwrite`` (every certificate it signed would stop being trusted)."""
    path = _ensure_dir(directory)
    files = ca_files(path)
    if not overwrite and (files.cert_file.exists() or files.key_file.exists()):
        raise ConfigError(f"{files.cert_file} already exists; replacing the CA untrusts every certificate it "
                          f"signed (use --force to do it anyway)")
    return _write_pair(path, CA_NAME, create_ca(common_name=common_name, valid_days=valid_days, key_type=key_type))


def read_ca(directory: "str | os.PathLike[str]") -> Issued:
    files = ca_files(directory)
    try:
        return Issued(files.cert_file.read_bytes(), files.key_file.read_bytes())
    except OSError as err:
        raise ConfigError(f"no CA in {directory} ({err.strerror or err}); make one with: magnetar certs ca "
                          f"--dir {directory}") from None


def write_server_certificate(directory: "str | os.PathLike[str]", *, hostnames: Sequence[str] = ("localhost",),
                             ips: Sequence[str] = ("127.0.0.1",), name: str = "server",
                             common_name: Optional[str] = None, valid_days: int = 825,
                             key_type: str = "ec") -> CertificateFiles:
    """Signs a server certificate with the CA in ``directory`` and writes ``<name>.cert.pem`` / ``.key.pem``."""
    path = _ensure_dir(directory)
    issued = create_server_certificate(read_ca(path), hostnames=hostnames, ips=ips, common_name=common_name,
                                       valid_days=valid_days, key_type=key_type)
    return _write_pair(path, file_name_for(name), issued)


def write_client_certificate(directory: "str | os.PathLike[str]", *, role: str, name: Optional[str] = None,
                             valid_days: int = 825, key_type: str = "ec") -> CertificateFiles:
    """Signs a client certificate for ``role`` with the CA in ``directory``; files named after the role."""
    path = _ensure_dir(directory)
    issued = create_client_certificate(read_ca(path), role=role, valid_days=valid_days, key_type=key_type)
    return _write_pair(path, file_name_for(name or role), issued)
