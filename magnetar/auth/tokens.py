"""JSON Web Tokens as Pulsar's token authentication uses them (PyJWT, ``cryptography``).

Keys, as Pulsar's ``tokenSecretKey`` / ``tokenPublicKey`` and its ``pulsar tokens`` tool take them, are named by
a string (``read_key``): ``data:;base64,<base64>`` (the key inline), ``file:///path`` (raw bytes of a file), a
plain path to an existing file, or bare base64. A secret key is raw bytes (HS256 needs at least 32 of them, as
Pulsar's JJWT insists); a public key is an X.509 SubjectPublicKeyInfo in PEM or DER (Pulsar's tool writes DER,
``create_key_pair`` writes PEM: both are read); a private key is PKCS#8 (or traditional) PEM or DER.

Verification (``verify_token``) is Pulsar's: the key decides the algorithms it verifies (a secret key HS256..
HS512 by its length, an RSA key RS*/PS*, an EC key the ES* of its curve), so a token signed with HS256 is never
checked against a public key used as an HMAC secret (the algorithm-confusion attack) and ``alg: none`` is
refused outright; ``exp`` and ``nbf`` are checked without leeway, ``iat`` is not (clock skew between the issuer
and the server must not refuse fresh tokens); the audience is checked only when one is configured. Every
failure, whatever the input, is an ``AuthenticationError`` with a reason label and a message a person can act
on; nothing about the key or the token's signature is put in the message.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import math
import os
import re
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from magnetar.auth.errors import AuthenticationError
from magnetar.errors import ConfigError

MAX_TOKEN_CHARS = 64 * 1024  # far above any real JWT; bounds the work a hostile client can ask for
_HMAC_MIN_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_RSA_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_RSA_MIN_BITS = 2048
_EC_ALGORITHM_BY_CURVE = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
_EC_CURVE_BY_ALGORITHM = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}
KEY_PAIR_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
SECRET_KEY_ALGORITHMS = tuple(_HMAC_MIN_BYTES)
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]+$")

# Claims are checked here (exp/nbf/aud) with precise messages; PyJWT only verifies the signature.
_DECODE_OPTIONS = {
    "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
    "verify_aud": False, "verify_iss": False, "verify_sub": False, "verify_jti": False, "require": [],
}


# --- keys ----------------------------------------------------------------------------------------------------


def read_key(url: str) -> bytes:
    """The bytes of a key named as Pulsar names them: ``data:[<type>][;base64],<data>``, ``file:///path``, a
    path to an existing file, or bare base64.

    Raises:
        ConfigError: the name is none of these, the file cannot be read, or the data does not decode.
    """
    text = url.strip()
    if not text:
        raise ConfigError("no key given: use data:;base64,<base64> or file:///path/to/key")
    if text.startswith("data:"):
        header, sep, data = text[len("data:"):].partition(",")
        if not sep:
            raise ConfigError("a data: key needs a comma before its data, as in data:;base64,<base64>")
        if header.endswith(";base64"):
            return _b64decode(data, "the data: key")
        return urllib.parse.unquote_to_bytes(data)
    if text.startswith("file:"):
        parsed = urllib.parse.urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"key URL {text!r} names host {parsed.netloc!r}; use file:///absolute/path")
        return _read_file(urllib.parse.unquote(parsed.path))
    if os.path.isfile(text) or text.startswith(("/", "./", "../", "~")):
        try:
            return _read_file(os.path.expanduser(text))
        except ConfigError as err:
            # One random key in 64 has base64 starting with "/": it reads as a path (never as a key, so that a
            # mistyped path cannot become a key made of its own letters); say how to give such a key.
            if text.startswith("/") and _is_base64(text):
                raise ConfigError(f"{err} (a base64 key that starts with \"/\" is read as a path: give it as "
                                  f"data:;base64,<key>)") from None
            raise
    try:
        return _b64decode(text, "the key")
    except ConfigError:
        raise ConfigError(f"key {text[:40]!r} is not data:;base64,..., file:///path, an existing file, "
                          f"nor base64") from None


def _is_base64(text: str) -> bool:
    try:
        _b64decode(text, "the key")
    except ConfigError:
        return False
    return True


def _read_file(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ConfigError(f"cannot read key file {path}: {err.strerror or err}") from None


def _b64decode(data: str, what: str) -> bytes:
    compact = "".join(data.split()).rstrip("=")
    if not _BASE64.match(compact):
        raise ConfigError(f"{what} is not valid base64")
    if "-" in compact or "_" in compact:  # the URL-safe alphabet, as some tools write it
        compact = compact.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what} is not valid base64") from None


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """Random bytes for an HMAC key, as long as ``algorithm`` needs (32 for HS256, 48 HS384, 64 HS512)."""
    if algorithm not in _HMAC_MIN_BYTES:
        raise ConfigError(f"secret keys are for {', '.join(_HMAC_MIN_BYTES)}, not {algorithm!r}")
    return secrets.token_bytes(_HMAC_MIN_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """A new key pair for ``algorithm``: (PKCS#8 private key PEM, SubjectPublicKeyInfo public key PEM)."""
    if algorithm.startswith("RS"):
        if algorithm not in KEY_PAIR_ALGORITHMS:
            raise ConfigError(f"key pairs are for {', '.join(KEY_PAIR_ALGORITHMS)}, not {algorithm!r}")
        private = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_MIN_BITS)
    elif algorithm in _EC_CURVE_BY_ALGORITHM:
        private = ec.generate_private_key(_EC_CURVE_BY_ALGORITHM[algorithm]())
    else:
        raise ConfigError(f"key pairs are for {', '.join(KEY_PAIR_ALGORITHMS)}, not {algorithm!r}")
    private_pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
    public_pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                                   serialization.PublicFormat.SubjectPublicKeyInfo)
    return private_pem, public_pem


def _load_private_key(key: bytes) -> Any:
    """A private key from PEM or DER bytes, or None when the bytes are not one (then: an HMAC secret)."""
    try:
        if key.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_private_key(key, password=None)
        return serialization.load_der_private_key(key, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _load_public_key(key: bytes) -> Any:
    try:
        if key.lstrip().startswith(b"-----BEGIN"):
            return serialization.load_pem_public_key(key)
        return serialization.load_der_public_key(key)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError("the token public key is not a PEM or DER public key (SubjectPublicKeyInfo); make "
                          "one with: magnetar tokens create-key-pair") from None


def _algorithms_of_public_key(public_key: Any) -> tuple[str, ...]:
    if isinstance(public_key, rsa.RSAPublicKey):
        if public_key.key_size < _RSA_MIN_BITS:
            raise ConfigError(f"the RSA token key has {public_key.key_size} bits; at least {_RSA_MIN_BITS} "
                              f"are needed")
        return _RSA_ALGORITHMS
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        algorithm = _EC_ALGORITHM_BY_CURVE.get(public_key.curve.name)
        if algorithm is None:
            raise ConfigError(f"the EC token key is on curve {public_key.curve.name}; JWT signs with P-256, "
                              f"P-384 or P-521")
        return (algorithm,)
    raise ConfigError("the token public key must be an RSA or EC key")


def signing_algorithm_for(key: bytes) -> str:
    """The algorithm Pulsar's tool would sign with given these key bytes: RS256 for an RSA private key, the
    ES* of an EC key's curve, else HS256 (the bytes are an HMAC secret)."""
    private = _load_private_key(key)
    if private is None:
        return "HS256"
    return _algorithms_of_public_key(private.public_key())[0]


@dataclass(frozen=True)
class VerificationKey:
    """A key that verifies tokens and the algorithms it verifies (never ``none``, never HS* for a public key).

    Attributes:
        key: the HMAC secret (bytes) or a ``cryptography`` public key.
        algorithms: the JWS ``alg`` values accepted with this key.
        kind: "secret" or "public", for messages.
    """

    key: Any
    algorithms: tuple[str, ...]
    kind: str

    @classmethod
    def secret(cls, key: bytes) -> "VerificationKey":
        """An HMAC secret: HS256 from 32 bytes, HS384 from 48, HS512 from 64 (as JJWT's key strength rule)."""
        if len(key) < _HMAC_MIN_BYTES["HS256"]:
            raise ConfigError(f"the token secret key has {len(key)} bytes; HS256 needs at least 32 (make one "
                              f"with: magnetar tokens create-secret-key)")
        try:  # PyJWT refuses PEM/DER key material as an HMAC secret: say so now, not at each token
            jwt.algorithms.HMACAlgorithm(jwt.algorithms.HMACAlgorithm.SHA256).prepare_key(bytes(key))
        except jwt.InvalidKeyError:
            raise ConfigError("the token secret key is a public or private key; give a public key as "
                              "token_public_key, and a secret made with: magnetar tokens create-secret-key") from None
        return cls(bytes(key), tuple(a for a, n in _HMAC_MIN_BYTES.items() if len(key) >= n), "secret")

    @classmethod
    def public(cls, key: bytes) -> "VerificationKey":
        """An RSA or EC public key, PEM or DER."""
        public_key = _load_public_key(key)
        return cls(public_key, _algorithms_of_public_key(public_key), "public")

    @classmethod
    def from_settings(cls, *, secret_key: str = "", public_key: str = "") -> "VerificationKey":
        """The key of ``token_secret_key`` (preferred, as in Pulsar) or ``token_public_key`` (key names)."""
        if secret_key.strip():
            return cls.secret(read_key(secret_key))
        if public_key.strip():
            return cls.public(read_key(public_key))
        raise ConfigError("token authentication needs token_secret_key or token_public_key")


# --- tokens --------------------------------------------------------------------------------------------------


def create_token(subject: str, *, key: bytes, algorithm: str, expires_s: Optional[float] = None,
                 audience: Optional[str] = None, role_claim: str = "sub", audience_claim: str = "aud",
                 now_s: Optional[float] = None) -> str:
    """A signed token whose ``role_claim`` is ``subject``.

    Args:
        key: the HMAC secret (HS*) or a private key PEM/DER (RS*, PS*, ES*).
        expires_s: lifetime in seconds from now (``exp``); None: the token never expires, as Pulsar's default.
            Negative values make an already expired token (for tests).
        audience: put in ``audience_claim`` when given.
        now_s: the current time (epoch seconds); None reads the clock.
    """
    if not subject:
        raise ConfigError("a token needs a subject (the role it authenticates)")
    if algorithm in _HMAC_MIN_BYTES:
        if _load_private_key(key) is not None:
            raise ConfigError(f"{algorithm} signs with a secret key, and this is a private key")
        if len(key) < _HMAC_MIN_BYTES[algorithm]:
            raise ConfigError(f"{algorithm} needs a secret key of at least {_HMAC_MIN_BYTES[algorithm]} bytes, "
                              f"this one has {len(key)}")
        signing_key: Any = key
    else:
        signing_key = _load_private_key(key)
        if signing_key is None:
            raise ConfigError(f"{algorithm} signs with a private key (PEM or DER), and this is not one")
        allowed = _algorithms_of_public_key(signing_key.public_key())
        if algorithm not in allowed:
            raise ConfigError(f"this private key signs {', '.join(allowed)}, not {algorithm}")
    claims: dict[str, Any] = {role_claim: subject}
    if expires_s is not None:
        claims["exp"] = int((time.time() if now_s is None else now_s) + expires_s)
    if audience:
        claims[audience_claim] = audience
    try:
        return jwt.encode(claims, signing_key, algorithm=algorithm)
    except (jwt.PyJWTError, ValueError, TypeError) as err:  # e.g. a public key given as an HMAC secret
        raise ConfigError(f"cannot sign a {algorithm} token with this key: {err}") from None


def iso_utc(epoch_s: float) -> str:
    """``2026-11-25T15:00:00Z``: how expiry times appear in messages."""
    try:
        moment = datetime.datetime.fromtimestamp(epoch_s, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"{epoch_s!r} (epoch seconds)"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64url_json(segment: str, what: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise AuthenticationError(f"malformed token: its {what} is not base64url JSON",
                                  reason="malformed") from None
    if not isinstance(value, dict):
        raise AuthenticationError(f"malformed token: its {what} is not a JSON object", reason="malformed")
    return value


def show_token(token: str) -> tuple[dict, dict]:
    """(header, claims) of a token, without verifying anything (``magnetar tokens show``)."""
    text = _token_text(token)
    parts = text.split(".")
    if len(parts) != 3:
        raise AuthenticationError(f"malformed token: a JWT has 3 dot-separated parts, this one has {len(parts)}",
                                  reason="malformed")
    return _b64url_json(parts[0], "header"), _b64url_json(parts[1], "payload")


def _token_text(token: "str | bytes") -> str:
    if isinstance(token, (bytes, bytearray, memoryview)):
        try:
            token = bytes(token).decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationError("malformed token: not ASCII text", reason="malformed") from None
    text = token.strip()
    if not text:
        raise AuthenticationError("no token given", reason="no_credentials")
    if len(text) > MAX_TOKEN_CHARS:
        raise AuthenticationError(f"malformed token: {len(text)} characters, more than {MAX_TOKEN_CHARS}",
                                  reason="malformed")
    return text


def verify_token(token: "str | bytes", key: VerificationKey, *, audience_claim: str = "aud", audience: str = "",
                 now_s: Optional[float] = None) -> dict:
    """The claims of a token whose signature ``key`` verifies, that is in its validity window, and whose
    ``audience_claim`` contains ``audience`` when one is given.

    Raises:
        AuthenticationError: always this, for any input (reasons: no_credentials, malformed, bad_signature,
            expired, wrong_audience).
    """
    text = _token_text(token)
    header, _ = show_token(text)
    algorithm = header.get("alg")
    if not isinstance(algorithm, str) or not algorithm:
        raise AuthenticationError("malformed token: its header names no algorithm (alg)", reason="malformed")
    if algorithm.lower() == "none":
        raise AuthenticationError("unsigned token (alg none) refused: tokens must be signed",
                                  reason="bad_signature")
    if algorithm not in key.algorithms:
        shown = re.sub(r"[^A-Za-z0-9_-]", "?", algorithm[:20])
        raise AuthenticationError(f"token signed with {shown}, but this server verifies {'/'.join(key.algorithms)} "
                                  f"tokens with its {key.kind} key", reason="bad_signature")
    try:
        claims = jwt.decode(text, key.key, algorithms=list(key.algorithms), options=_DECODE_OPTIONS)
    except jwt.InvalidSignatureError:
        raise AuthenticationError("token signed with another key (its signature does not verify with this "
                                  "server's key)", reason="bad_signature") from None
    except jwt.InvalidAlgorithmError as err:
        raise AuthenticationError(f"token refused: {err}", reason="bad_signature") from None
    except jwt.PyJWTError as err:
        raise AuthenticationError(f"malformed token: {err}", reason="malformed") from None
    except Exception:  # PyJWT on hostile input (huge numbers, odd JSON types): still only a refusal
        raise AuthenticationError("malformed token", reason="malformed") from None
    check_validity_window(claims, time.time() if now_s is None else now_s)
    if audience:
        check_audience(claims, audience_claim=audience_claim, audience=audience)
    return claims


def _epoch_claim(claims: Mapping[str, Any], name: str) -> Optional[float]:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AuthenticationError(f"malformed token: claim {name!r} must be a number (epoch seconds)",
                                  reason="malformed")
    return float(value)


def expires_at_s(claims: Mapping[str, Any]) -> Optional[float]:
    """A verified token's ``exp`` as epoch seconds, or None when it does not expire."""
    return _epoch_claim(claims, "exp")


def check_validity_window(claims: Mapping[str, Any], now_s: float) -> None:
    """``exp`` (expired at or after it) and ``nbf`` (not valid before it), no leeway, as Pulsar's JJWT."""
    expires = _epoch_claim(claims, "exp")
    if expires is not None and now_s >= expires:
        raise AuthenticationError(f"token expired at {iso_utc(expires)}; get a new token", reason="expired")
    not_before = _epoch_claim(claims, "nbf")
    if not_before is not None and now_s < not_before:
        raise AuthenticationError(f"token not valid before {iso_utc(not_before)}", reason="expired")


def check_audience(claims: Mapping[str, Any], *, audience_claim: str, audience: str) -> None:
    """Pulsar's rule: the claim (a string or a list of strings) must contain this server's audience."""
    value = claims.get(audience_claim)
    if value is None:
        raise AuthenticationError(f"token has no {audience_claim!r} claim; this server requires audience "
                                  f"{audience!r}", reason="wrong_audience")
    if isinstance(value, str):
        found = [value]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        found = value
    else:
        raise AuthenticationError(f"token's {audience_claim!r} claim must be a string or a list of strings",
                                  reason="wrong_audience")
    if audience not in found:
        shown = ", ".join(repr(v[:60]) for v in found[:5])
        raise AuthenticationError(f"token is for audience [{shown}], not this server's {audience!r}",
                                  reason="wrong_audience")


def role_of(claims: Mapping[str, Any], role_claim: str = "sub") -> Optional[str]:
    """The role a token names: its ``role_claim`` as a string, or the first element when it is a list of
    strings (Pulsar's rule); None when there is none."""
    value = claims.get(role_claim)
    if isinstance(value, list) and value:
        value = value[0]
    if isinstance(value, str) and value:
        return value
    return None
