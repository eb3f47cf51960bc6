"""``magnetar tokens``: keys and JWTs, with the options of Pulsar's ``pulsar tokens`` tool.

``create-secret-key [-a HS256] [-o FILE] [-b]``, ``create-key-pair [-a RS256|ES256] --output-private-key F
--output-public-key F [--format pem|der]``, ``create -s SUBJECT (-sk KEY | -pk KEY) [-e 1h] [--audience A]``,
``show TOKEN``, ``validate TOKEN (-sk KEY | -pk KEY) [--audience A]``. Keys are named as Pulsar names them
(``data:;base64,...``, ``file:///path``); a token is the argument, ``-i/--stdin``, ``-f/--token-file`` or the
``TOKEN`` environment variable. Heavy imports (PyJWT, cryptography) happen inside the commands.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import sys
from typing import Optional

import typer

tokens_app = typer.Typer(help="Make and check JWTs for token authentication (as Pulsar's `pulsar tokens`).",
                         no_args_is_help=True)

_EXPIRY = re.compile(r"^\s*(\d+)\s*([smhdwy]?)\s*$", re.IGNORECASE)
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_expiry_s(text: str) -> int:
    """``1h`` -> 3600; a bare number is seconds; units s, m, h, d, w, y (Pulsar's ``RelativeTimeUtil``)."""
    match = _EXPIRY.match(text)
    if match is None:
        raise typer.BadParameter(f"expiry time must be like 30s, 10m, 1h, 3d, 2w or 1y, not {text!r}")
    return int(match.group(1)) * _UNIT_S[match.group(2).lower()]


def _fail(message: str, code: int = 2) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=code)


def _key_url_hint(path: pathlib.Path) -> str:
    return f"file://{path.resolve()}"


def _read_token(token: Optional[str], stdin: bool, token_file: Optional[pathlib.Path]) -> str:
    if token:
        return token
    if stdin:
        return sys.stdin.readline().strip()
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as err:
            _fail(f"cannot read {token_file}: {err.strerror or err}")
    if os.environ.get("TOKEN"):
        return os.environ["TOKEN"].strip()
    _fail("give the token as an argument, with --stdin, --token-file or in the TOKEN environment variable")
    return ""  # unreachable


TokenArg = typer.Argument(None, help="The token (else --stdin, --token-file or $TOKEN).")
StdinOpt = typer.Option(False, "-i", "--stdin", help="Read the token from standard input.")
TokenFileOpt = typer.Option(None, "-f", "--token-file", help="Read the token from a file.")


@tokens_app.command("create-secret-key")
def create_secret_key(
    algorithm: str = typer.Option("HS256", "-a", "--signature-algorithm", help="HS256, HS384 or HS512."),
    output: Optional[pathlib.Path] = typer.Option(None, "-o", "--output",
                                                  help="Write the key to this file (mode 0600), not stdout."),
    b64: bool = typer.Option(False, "-b", "--base64", help="Write the key base64-encoded."),
) -> None:
    """A new random secret key for HS256 tokens (raw bytes, or base64 with --base64)."""
    from magnetar.auth import certs, tokens
    from magnetar.errors import MagnetarError

    try:
        key = tokens.create_secret_key(algorithm)
    except MagnetarError as err:
        _fail(str(err))
    data = base64.b64encode(key) if b64 else key
    if output is None:
        sys.stdout.buffer.write(data + (b"\n" if b64 else b""))
        sys.stdout.flush()
        return
    try:
        certs.write_private(output, data)
    except OSError as err:
        _fail(f"cannot write {output}: {err.strerror or err}")
    if b64:  # a setting takes the base64 text inline, not the file (file:// keys are raw bytes)
        typer.echo(f"secret key (base64) written to {output}; token_secret_key = \"data:;base64,<its content>\"",
                   err=True)
    else:
        typer.echo(f"secret key written to {output} (token_secret_key = \"{_key_url_hint(output)}\")", err=True)


@tokens_app.command("create-key-pair")
def create_key_pair(
    algorithm: str = typer.Option("RS256", "-a", "--signature-algorithm", "--algorithm",
                                  help="RS256, RS384, RS512, ES256, ES384 or ES512."),
    output_private_key: pathlib.Path = typer.Option(..., "--output-private-key",
                                                    help="File for the private key (mode 0600)."),
    output_public_key: pathlib.Path = typer.Option(..., "--output-public-key", help="File for the public key."),
    key_format: str = typer.Option("pem", "--format",
                                   help="pem, or der (what Pulsar's own tool writes and its brokers read)."),
) -> None:
    """A new key pair: sign tokens with the private key, brokers and proxies verify with the public key."""
    from cryptography.hazmat.primitives import serialization

    from magnetar.auth import certs, tokens
    from magnetar.errors import MagnetarError

    if key_format not in ("pem", "der"):
        _fail(f"--format must be pem or der, not {key_format!r}")
    try:
        private_pem, public_pem = tokens.create_key_pair(algorithm.upper())
    except MagnetarError as err:
        _fail(str(err))
    if key_format == "der":
        private = serialization.load_pem_private_key(private_pem, password=None)
        private_pem = private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption())
        public_pem = private.public_key().public_bytes(serialization.Encoding.DER,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        certs.write_private(output_private_key, private_pem, mode=0o600)
        certs.write_private(output_public_key, public_pem, mode=0o644)
    except OSError as err:
        _fail(f"cannot write the key pair: {err.strerror or err}")
    typer.echo(f"{algorithm.upper()} key pair written: private {output_private_key}, public {output_public_key} "
               f"(token_public_key = \"{_key_url_hint(output_public_key)}\")", err=True)


@tokens_app.command("create")
def create(
    subject: str = typer.Option(..., "-s", "--subject", help="The role (principal) the token authenticates."),
    secret_key: Optional[str] = typer.Option(None, "-sk", "--secret-key",
                                             help="Sign with this secret key (data:;base64,... or file:///...)."),
    private_key: Optional[str] = typer.Option(None, "-pk", "--private-key",
                                              help="Sign with this private key (data:;base64,... or file:///...)."),
    expiry_time: Optional[str] = typer.Option(None, "-e", "--expiry-time",
                                              help="Lifetime, e.g. 30m, 1h, 3d, 1y. Default: no expiry."),
    algorithm: Optional[str] = typer.Option(None, "-a", "--signature-algorithm",
                                            help="Default: HS256 for a secret key, from the private key's type."),
    audience: Optional[str] = typer.Option(None, "--audience", help="Audience (the server's token_audience)."),
    audience_claim: str = typer.Option("aud", "--audience-claim", help="Claim that holds the audience."),
    role_claim: str = typer.Option("sub", "--role-claim", help="Claim that holds the subject (token_auth_claim)."),
) -> None:
    """A signed token for SUBJECT, printed on stdout."""
    from magnetar.auth import tokens
    from magnetar.errors import MagnetarError

    if (secret_key is None) == (private_key is None):
        _fail("give exactly one of --secret-key and --private-key")
    expires_s = parse_expiry_s(expiry_time) if expiry_time is not None else None
    try:
        key = tokens.read_key(secret_key or private_key or "")
        if secret_key is not None:
            chosen = (algorithm or "HS256").upper()
        else:
            chosen = (algorithm or tokens.signing_algorithm_for(key)).upper()
            if tokens.signing_algorithm_for(key) == "HS256":
                _fail("--private-key is not a private key (PEM or DER PKCS#8); for a secret use --secret-key")
        token = tokens.create_token(subject, key=key, algorithm=chosen, expires_s=expires_s, audience=audience,
                                    role_claim=role_claim, audience_claim=audience_claim)
    except MagnetarError as err:
        _fail(str(err))
    typer.echo(token)


@tokens_app.command("show")
def show(token: Optional[str] = TokenArg, stdin: bool = StdinOpt,
         token_file: Optional[pathlib.Path] = TokenFileOpt) -> None:
    """Print a token's header and claims, without verifying it."""
    from magnetar.auth import tokens
    from magnetar.auth.errors import AuthenticationError

    try:
        header, claims = tokens.show_token(_read_token(token, stdin, token_file))
    except AuthenticationError as err:
        _fail(str(err))
    typer.echo(json.dumps(header))
    typer.echo("---")
    typer.echo(json.dumps(claims))


@tokens_app.command("validate")
def validate(
    token: Optional[str] = TokenArg, stdin: bool = StdinOpt, token_file: Optional[pathlib.Path] = TokenFileOpt,
    secret_key: Optional[str] = typer.Option(None, "-sk", "--secret-key", help="Verify with this secret key."),
    public_key: Optional[str] = typer.Option(None, "-pk", "--public-key", help="Verify with this public key."),
    audience: str = typer.Option("", "--audience", help="Require this audience (token_audience)."),
    audience_claim: str = typer.Option("aud", "--audience-claim", help="Claim that holds the audience."),
    role_claim: str = typer.Option("sub", "--role-claim", help="Claim that holds the role (token_auth_claim)."),
) -> None:
    """Verify a token as a server would (signature, expiry, audience, role); print its claims. Exit 1 when
    the token is refused."""
    from magnetar.auth import providers
    from magnetar.auth.errors import AuthenticationError
    from magnetar.errors import MagnetarError

    if (secret_key is None) == (public_key is None):
        _fail("give exactly one of --secret-key and --public-key")
    text = _read_token(token, stdin, token_file)
    try:
        provider = providers.TokenAuthenticationProvider(providers.TokenSettings(
            secret_key=secret_key or "", public_key=public_key or "", role_claim=role_claim,
            audience_claim=audience_claim, audience=audience))
        who = provider.authenticate(providers.Credentials(method="token", data=text.encode()))
    except AuthenticationError as err:
        _fail(f"token refused ({err.reason}): {err}", code=1)
    except MagnetarError as err:
        _fail(str(err))
    from magnetar.auth.tokens import iso_utc, show_token

    typer.echo(json.dumps(show_token(text)[1]))
    expiry = "never" if who.expires_at_s is None else iso_utc(who.expires_at_s)
    typer.echo(f"valid: role {who.role!r}, expires {expiry}", err=True)
