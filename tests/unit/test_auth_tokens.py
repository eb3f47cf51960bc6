"""Token authentication as Pulsar's AuthenticationProviderToken decides it, with real keys and PyJWT.

Round trips for HS256/RS256/ES256; refusals with their reason labels (expired, not yet valid, another key,
another algorithm including the HS256-with-a-public-key confusion, ``alg: none``, audience, role claim,
malformed input); keys named as ``data:;base64,`` and ``file://``; and a property: any bytes give either a role
or an AuthenticationError, never another exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings, strategies as st

from magnetar.auth import tokens
from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import Credentials, TokenAuthenticationProvider, TokenSettings
from magnetar.errors import ConfigError, MagnetarError


def data_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


def provider(**settings) -> TokenAuthenticationProvider:
    return TokenAuthenticationProvider(TokenSettings(**settings))


def authenticate(p: TokenAuthenticationProvider, token: "str | bytes"):
    data = token.encode() if isinstance(token, str) else token
    return p.authenticate(Credentials(method="token", data=data))


def refused(p: TokenAuthenticationProvider, token: "str | bytes") -> AuthenticationError:
    with pytest.raises(AuthenticationError) as info:
        authenticate(p, token)
    return info.value


@pytest.fixture(scope="module")
def secret() -> bytes:
    return tokens.create_secret_key()


@pytest.fixture(scope="module")
def rsa_pair() -> tuple[bytes, bytes]:
    return tokens.create_key_pair("RS256")


@pytest.fixture(scope="module")
def ec_pair() -> tuple[bytes, bytes]:
    return tokens.create_key_pair("ES256")


# --- round trips ---------------------------------------------------------------------------------------------


def test_hs256_round_trip_with_expiry(secret: bytes) -> None:
    before = time.time()
    token = tokens.create_token("alice", key=secret, algorithm="HS256", expires_s=3600)
    who = authenticate(provider(secret_key=data_url(secret)), token)
    assert (who.role, who.method) == ("alice", "token")
    assert before + 3590 <= who.expires_at_s <= time.time() + 3600
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_round_trip(algorithm: str, rsa_pair, ec_pair) -> None:
    private, public = rsa_pair if algorithm == "RS256" else ec_pair
    assert private.startswith(b"-----BEGIN PRIVATE KEY-----") and public.startswith(b"-----BEGIN PUBLIC KEY-----")
    token = tokens.create_token("svc-1", key=private, algorithm=algorithm)
    who = authenticate(provider(public_key=data_url(public)), token)
    assert (who.role, who.expires_at_s) == ("svc-1", None)
    assert jwt.get_unverified_header(token)["alg"] == algorithm
    assert tokens.signing_algorithm_for(private) == algorithm


def test_a_pulsar_style_der_public_key_verifies(rsa_pair, tmp_path) -> None:
    """Pulsar's own tool writes DER keys; a broker configured with one must accept its tokens."""
    private, public = rsa_pair
    der = serialization.load_pem_public_key(public).public_bytes(serialization.Encoding.DER,
                                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.der").write_bytes(der)
    token = tokens.create_token("bob", key=private, algorithm="RS256")
    assert authenticate(provider(public_key=f"file://{tmp_path}/public.der"), token).role == "bob"


def test_keys_as_data_and_file_urls(secret: bytes, tmp_path) -> None:
    if base64.b64encode(secret).startswith(b"/"):  # bare base64 must not start with "/" (test below)
        secret = b"\x00" + secret[1:]
    (tmp_path / "secret.key").write_bytes(secret)
    token = tokens.create_token("carol", key=secret, algorithm="HS256")
    for name in (data_url(secret), f"file://{tmp_path}/secret.key", f"file:{tmp_path}/secret.key",
                 str(tmp_path / "secret.key"), base64.b64encode(secret).decode()):
        assert tokens.read_key(name) == secret, name
        assert authenticate(provider(secret_key=name), token).role == "carol"


def test_bare_base64_starting_with_a_slash_is_read_as_a_path_and_the_error_says_how_to_give_it() -> None:
    """One random key in 64 has base64 starting with "/" (the test above drew one once, with a random key: it now
    uses one that does not). Such a name stays a path, never a key made of a mistyped path's letters."""
    secret = b"\xfc" + bytes(range(1, 40))
    name = base64.b64encode(secret).decode()
    assert name.startswith("/")
    with pytest.raises(ConfigError, match=r"cannot read key file .*give it as data:;base64,<key>"):
        tokens.read_key(name)
    assert tokens.read_key(f"data:;base64,{name}") == secret
    with pytest.raises(ConfigError, match="cannot read key file /no/such/dir/key"):
        tokens.read_key("/no/such/dir/key")


@pytest.mark.parametrize("name, message", [
    ("file:///no/such/key", "cannot read key file /no/such/key"),
    ("data:;base64,%%%", "not valid base64"),
    ("data:;base64", "needs a comma"),
    ("", "no key given"),
    ("not a key!", "is not data:;base64"),
])
def test_unreadable_key_names_are_config_errors(name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tokens.read_key(name)


def test_weak_or_missing_keys_refused_at_configuration(rsa_pair) -> None:
    with pytest.raises(ConfigError, match="at least 32"):
        provider(secret_key=data_url(b"short"))
    with pytest.raises(ConfigError, match="token_secret_key or token_public_key"):
        provider()
    with pytest.raises(ConfigError, match="not a PEM or DER public key"):
        provider(public_key=data_url(b"garbage" * 10))
    with pytest.raises(ConfigError):  # a private key is not what verifies
        provider(public_key=data_url(rsa_pair[0]))
    with pytest.raises(ConfigError, match="give a public key as token_public_key"):
        provider(secret_key=data_url(rsa_pair[1]))


def test_secret_key_length_decides_hmac_algorithms() -> None:
    assert tokens.VerificationKey.secret(b"k" * 32).algorithms == ("HS256",)
    assert tokens.VerificationKey.secret(b"k" * 64).algorithms == ("HS256", "HS384", "HS512")
    key = tokens.create_secret_key("HS512")
    token = tokens.create_token("dave", key=key, algorithm="HS512")
    assert authenticate(provider(secret_key=data_url(key)), token).role == "dave"
    with pytest.raises(ConfigError, match="at least 64"):
        tokens.create_token("dave", key=b"k" * 32, algorithm="HS512")


# --- refusals ------------------------------------------------------------------------------------------------


def test_expired_token_says_when(secret: bytes) -> None:
    token = jwt.encode({"sub": "alice", "exp": 1795618800}, secret, algorithm="HS256")  # 2026-11-25T15:00:00Z
    p = TokenAuthenticationProvider(TokenSettings(secret_key=data_url(secret)), clock=lambda: 1795618800.5)
    err = refused(p, token)
    assert err.reason == "expired"
    assert str(err) == "token expired at 2026-11-25T15:00:00Z; get a new token"
    live = TokenAuthenticationProvider(TokenSettings(secret_key=data_url(secret)), clock=lambda: 1795618799.0)
    assert authenticate(live, token).expires_at_s == 1795618800.0
    assert refused(provider(secret_key=data_url(secret)),
                   tokens.create_token("a", key=secret, algorithm="HS256", expires_s=-1)).reason == "expired"


def test_not_yet_valid_token(secret: bytes) -> None:
    token = jwt.encode({"sub": "alice", "nbf": int(time.time()) + 3600}, secret, algorithm="HS256")
    err = refused(provider(secret_key=data_url(secret)), token)
    assert err.reason == "expired" and "not valid before" in str(err)


def test_issued_in_the_future_is_accepted(secret: bytes) -> None:
    """Pulsar does not check ``iat``: an issuer whose clock runs ahead must not lock clients out."""
    token = jwt.encode({"sub": "alice", "iat": int(time.time()) + 600}, secret, algorithm="HS256")
    assert authenticate(provider(secret_key=data_url(secret)), token).role == "alice"


def test_signed_with_another_key(secret: bytes, rsa_pair) -> None:
    other = tokens.create_secret_key()
    err = refused(provider(secret_key=data_url(secret)), tokens.create_token("x", key=other, algorithm="HS256"))
    assert err.reason == "bad_signature" and "signed with another key" in str(err)
    other_private, _ = tokens.create_key_pair("RS256")
    err = refused(provider(public_key=data_url(rsa_pair[1])),
                  tokens.create_token("x", key=other_private, algorithm="RS256"))
    assert err.reason == "bad_signature"


def test_algorithm_confusion_hs256_with_the_public_key_as_secret_is_refused(rsa_pair) -> None:
    """The classic attack: sign HS256 with the server's *public* key bytes as the HMAC secret."""
    public_pem = rsa_pair[1]
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(b'{"sub":"admin"}').rstrip(b"=").decode()
    signature = base64.urlsafe_b64encode(hmac.new(public_pem, f"{header}.{payload}".encode(),
                                                  hashlib.sha256).digest()).rstrip(b"=").decode()
    err = refused(provider(public_key=data_url(public_pem)), f"{header}.{payload}.{signature}")
    assert err.reason == "bad_signature"
    assert "signed with HS256" in str(err) and "RS256" in str(err)


def test_wrong_key_type_algorithms(rsa_pair, ec_pair) -> None:
    es_token = tokens.create_token("x", key=ec_pair[0], algorithm="ES256")
    assert refused(provider(public_key=data_url(rsa_pair[1])), es_token).reason == "bad_signature"
    rs_token = tokens.create_token("x", key=rsa_pair[0], algorithm="RS256")
    assert refused(provider(public_key=data_url(ec_pair[1])), rs_token).reason == "bad_signature"
    with pytest.raises(ConfigError, match="signs ES256"):
        tokens.create_token("x", key=ec_pair[0], algorithm="ES384")


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
def test_unsigned_tokens_refused(alg: str, secret: bytes) -> None:
    header = base64.urlsafe_b64encode(json.dumps({"alg": alg, "typ": "JWT"}).encode()).rstrip(b"=").decode()
    payload = base64.urlsafe_b64encode(b'{"sub":"root"}').rstrip(b"=").decode()
    for token in (f"{header}.{payload}.", f"{header}.{payload}"):
        err = refused(provider(secret_key=data_url(secret)), token)
        assert err.reason in ("bad_signature", "malformed")
    assert refused(provider(secret_key=data_url(secret)), f"{header}.{payload}.").reason == "bad_signature"


def test_audience(secret: bytes) -> None:
    p = provider(secret_key=data_url(secret), audience="region-a")
    ok = tokens.create_token("alice", key=secret, algorithm="HS256", audience="region-a")
    assert authenticate(p, ok).role == "alice"
    listed = jwt.encode({"sub": "alice", "aud": ["other", "region-a"]}, secret, algorithm="HS256")
    assert authenticate(p, listed).role == "alice"
    wrong = refused(p, tokens.create_token("alice", key=secret, algorithm="HS256", audience="region-b"))
    assert wrong.reason == "wrong_audience" and "'region-b'" in str(wrong) and "'region-a'" in str(wrong)
    missing = refused(p, tokens.create_token("alice", key=secret, algorithm="HS256"))
    assert missing.reason == "wrong_audience" and "no 'aud' claim" in str(missing)
    odd = refused(p, jwt.encode({"sub": "alice", "aud": {"x": 1}}, secret, algorithm="HS256"))
    assert odd.reason == "wrong_audience"
    # without a configured audience, none is checked (Pulsar's default)
    other = tokens.create_token("alice", key=secret, algorithm="HS256", audience="region-b")
    assert authenticate(provider(secret_key=data_url(secret)), other).role == "alice"


def test_custom_audience_claim(secret: bytes) -> None:
    p = provider(secret_key=data_url(secret), audience_claim="brokers", audience="b1")
    token = tokens.create_token("alice", key=secret, algorithm="HS256", audience="b1", audience_claim="brokers")
    assert authenticate(p, token).role == "alice"
    assert refused(p, tokens.create_token("alice", key=secret, algorithm="HS256", audience="b1")).reason == \
        "wrong_audience"


def test_role_claim(secret: bytes) -> None:
    err = refused(provider(secret_key=data_url(secret)), jwt.encode({"exp": 2**33}, secret, algorithm="HS256"))
    assert err.reason == "no_role" and "'sub'" in str(err)
    assert refused(provider(secret_key=data_url(secret)),
                   jwt.encode({"sub": ""}, secret, algorithm="HS256")).reason == "no_role"
    custom = provider(secret_key=data_url(secret), role_claim="principal")
    token = tokens.create_token("svc", key=secret, algorithm="HS256", role_claim="principal")
    assert authenticate(custom, token).role == "svc"
    assert refused(custom, tokens.create_token("svc", key=secret, algorithm="HS256")).reason == "no_role"
    listed = jwt.encode({"principal": ["first", "second"]}, secret, algorithm="HS256")
    assert authenticate(custom, listed).role == "first"  # Pulsar takes a list's first string
    assert refused(custom, jwt.encode({"principal": [1]}, secret, algorithm="HS256")).reason == "no_role"


@pytest.mark.parametrize("token, reason", [
    (b"", "no_credentials"),
    (b"   \n", "no_credentials"),
    (b"not-a-jwt", "malformed"),
    (b"a.b.c", "malformed"),
    (b"\xff\xfe.\x00.x", "malformed"),
    (b"e30.e30.", "malformed"),  # {} header: no alg
    (b"W10.e30.sig", "malformed"),  # [] header
    (b"x" * (tokens.MAX_TOKEN_CHARS + 1), "malformed"),
])
def test_malformed_tokens(token: bytes, reason: str, secret: bytes) -> None:
    assert refused(provider(secret_key=data_url(secret)), token).reason == reason


def test_hostile_claim_values_are_refusals(secret: bytes) -> None:
    p = provider(secret_key=data_url(secret))
    for claims in ({"sub": "a", "exp": "tomorrow"}, {"sub": "a", "exp": True}, {"sub": "a", "nbf": [1]}):
        assert refused(p, jwt.encode(claims, secret, algorithm="HS256")).reason == "malformed", claims
    # a huge number: JSON reads it as infinity (a token that would never expire)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=")
    payload = base64.urlsafe_b64encode(b'{"sub":"a","exp":1e999}').rstrip(b"=")
    sig = base64.urlsafe_b64encode(hmac.new(secret, header + b"." + payload, hashlib.sha256).digest()).rstrip(b"=")
    assert refused(p, header + b"." + payload + b"." + sig).reason == "malformed"


def test_token_with_surrounding_whitespace_from_a_file(secret: bytes) -> None:
    token = tokens.create_token("alice", key=secret, algorithm="HS256")
    assert authenticate(provider(secret_key=data_url(secret)), f"{token}\n").role == "alice"


def test_show_token_does_not_verify(secret: bytes) -> None:
    token = tokens.create_token("alice", key=b"z" * 32, algorithm="HS256", expires_s=60)
    header, claims = tokens.show_token(token)
    assert header["alg"] == "HS256" and claims["sub"] == "alice" and "exp" in claims
    with pytest.raises(AuthenticationError):
        tokens.show_token("only.two")


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=300),
    st.lists(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=", max_size=60),
             min_size=1, max_size=5).map(".".join).map(str.encode),
    st.dictionaries(st.sampled_from(["alg", "typ", "kid", "crit", "b64", "jku"]),
                    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                              st.lists(st.integers(), max_size=2), st.just({"a": 1})), max_size=4)
    .map(lambda h: base64.urlsafe_b64encode(json.dumps(h).encode()).rstrip(b"=") + b".e30.c2ln"),
))
def test_any_input_is_a_role_or_an_authentication_error(data: bytes) -> None:
    p = _PROPERTY_PROVIDER
    try:
        who = p.authenticate(Credentials(method="token", data=data))
    except AuthenticationError as err:
        assert err.reason in ("no_credentials", "malformed", "bad_signature", "expired", "wrong_audience",
                              "no_role")
    else:
        pytest.fail(f"random input authenticated as {who}")


_PROPERTY_PROVIDER = TokenAuthenticationProvider(TokenSettings(secret_key=data_url(b"p" * 32), audience="x"))


def test_errors_are_magnetar_errors() -> None:
    assert issubclass(AuthenticationError, MagnetarError)
    with pytest.raises(ValueError):
        AuthenticationError("x", reason="not-a-label")
