"""``magnetar certs``: a development CA and the certificates it signs (PEM files, keys mode 0600).

``ca --dir D``, ``server --dir D --hostname localhost --ip 127.0.0.1`` (repeatable: every name clients dial
goes in the SANs), ``client --dir D --role ROLE`` (the role is the certificate's CN). ``cryptography`` is
imported inside the commands.
"""

from __future__ import annotations

import pathlib
from typing import List, Optional

import typer

certs_app = typer.Typer(help="A development CA, server certificates (with SANs) and client certificates "
                             "(by role) for TLS and mTLS.", no_args_is_help=True)

DirOpt = typer.Option(..., "--dir", help="Directory of the CA (ca.cert.pem, ca.key.pem) and certificates.")
DaysOpt = typer.Option(825, "--days", help="Validity in days.")
KeyTypeOpt = typer.Option("ec", "--key-type", help="ec (P-256) or rsa (2048 bits).")


def _fail(message: str) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _report(what: str, files, extra: str = "") -> None:
    typer.echo(f"{what}: certificate {files.cert_file}, key {files.key_file}{extra}")


@certs_app.command("ca")
def ca(
    directory: pathlib.Path = DirOpt,
    cn: str = typer.Option("Magnetar development CA", "--cn", help="The CA's common name."),
    days: int = typer.Option(3650, "--days", help="Validity in days."),
    key_type: str = KeyTypeOpt,
    force: bool = typer.Option(False, "--force", help="Replace an existing CA (untrusts what it signed)."),
) -> None:
    """Create a self-signed CA in DIR (trust it with tls_trust_certs_file = DIR/ca.cert.pem)."""
    from magnetar.auth import certs
    from magnetar.errors import MagnetarError

    try:
        files = certs.write_ca(directory, common_name=cn, valid_days=days, key_type=key_type, overwrite=force)
    except (MagnetarError, OSError) as err:
        _fail(str(err))
    _report("CA", files)


@certs_app.command("server")
def server(
    directory: pathlib.Path = DirOpt,
    hostname: Optional[List[str]] = typer.Option(None, "--hostname",
                                                 help="A DNS name for the SANs (repeat for more)."),
    ip: Optional[List[str]] = typer.Option(None, "--ip", help="An IP address for the SANs (repeat for more)."),
    name: str = typer.Option("server", "--name", help="File name stem: NAME.cert.pem, NAME.key.pem."),
    cn: Optional[str] = typer.Option(None, "--cn", help="Subject CN (default: the first host name)."),
    days: int = DaysOpt,
    key_type: str = KeyTypeOpt,
) -> None:
    """Sign a server certificate for the given names and addresses (default: localhost and 127.0.0.1)."""
    from magnetar.auth import certs
    from magnetar.errors import MagnetarError

    hostnames, ips = list(hostname or []), list(ip or [])
    if not hostnames and not ips:
        hostnames, ips = ["localhost"], ["127.0.0.1"]
    try:
        files = certs.write_server_certificate(directory, hostnames=hostnames, ips=ips, name=name,
                                               common_name=cn, valid_days=days, key_type=key_type)
    except (MagnetarError, OSError) as err:
        _fail(str(err))
    _report("server", files, f" (SANs: {', '.join(hostnames + ips)})")


@certs_app.command("client")
def client(
    directory: pathlib.Path = DirOpt,
    role: str = typer.Option(..., "--role", help="The role the certificate authenticates as (its CN)."),
    name: Optional[str] = typer.Option(None, "--name", help="File name stem (default: the role)."),
    days: int = DaysOpt,
    key_type: str = KeyTypeOpt,
) -> None:
    """Sign a client certificate for ROLE (pulsar-client: AuthenticationTLS(cert_file, key_file))."""
    from magnetar.auth import certs
    from magnetar.errors import MagnetarError

    try:
        files = certs.write_client_certificate(directory, role=role, name=name, valid_days=days,
                                               key_type=key_type)
    except (MagnetarError, OSError) as err:
        _fail(str(err))
    _report(f"client {role!r}", files)
