"""SASL/OAUTHBEARER (KIP-255, RFC 7628) with JWTs validated as Kafka's broker validates them
(KIP-768): keys from a JWKS file (`sasl_oauthbearer_jwks_endpoint_url = "file:///..."`),
exp/nbf/iat, the expected issuer and audience, the principal from the `sub` claim, and the
session ending at the token's exp (KIP-368). The tokens are signed here with `openssl` (RS256
and ES256), so the test needs no JWT library. Real clients: confluent-kafka (librdkafka's
`oauth_cb`), kafka-python (a token provider), the Java client 4.1 (its own login callback
handler reading the token from a file) and kcat (librdkafka's unsecured JWT, which Kafka and
Strata refuse)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

import kproto
from harness import REPO_ROOT, broker_kind, free_port, strata_bin

pytestmark = [
    pytest.mark.skipif(broker_kind() != "strata", reason="strata's OAUTHBEARER settings"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed"),
]

ISSUER = "https://issuer.strata.test"
AUDIENCE = "strata"
ADMIN = ("admin", "secret")
INVALID_TOKEN = b'{"status":"invalid_token"}'
API_METADATA, API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE = 3, 17, 36
SASL_AUTHENTICATION_FAILED = 58
RUN_CLASS = REPO_ROOT / "tests" / "kafka" / "run-class.sh"
KAFKA_LIB = REPO_ROOT / "tests" / "kafka" / "lib"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def openssl(*args: str, data: bytes | None = None) -> bytes:
    r = subprocess.run(["openssl", *args], input=data, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout


def der_ecdsa_to_raw(der: bytes, size: int = 32) -> bytes:
    """An ECDSA-Sig-Value (SEQUENCE of two INTEGERs, what openssl writes) as JWS's r || s."""
    assert der[0] == 0x30
    pos = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    out = b""
    for _ in range(2):
        assert der[pos] == 0x02
        n = der[pos + 1]
        out += der[pos + 2:pos + 2 + n].lstrip(b"\0").rjust(size, b"\0")
        pos += 2 + n
    return out


class Key:
    """A signing key made by openssl (RSA 2048 for RS256, P-256 for ES256) and its JWK."""

    def __init__(self, root: Path, kid: str, alg: str):
        self.kid, self.alg = kid, alg
        self.pem = root / f"{kid}.pem"
        if alg == "RS256":
            openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.pem))
            modulus = openssl("rsa", "-in", str(self.pem), "-noout", "-modulus").decode().strip()
            n = bytes.fromhex(modulus.split("=", 1)[1])
            self.jwk = {"kty": "RSA", "kid": kid, "use": "sig", "alg": alg, "n": b64url(n), "e": "AQAB"}
        else:
            openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(self.pem))
            point = openssl("pkey", "-in", str(self.pem), "-pubout", "-outform", "DER")[-65:]
            assert point[0] == 4
            self.jwk = {"kty": "EC", "crv": "P-256", "kid": kid, "x": b64url(point[1:33]), "y": b64url(point[33:])}

    def sign(self, claims: dict, kid: str | None = "") -> str:
        """A compact JWS; `kid` defaults to this key's, None leaves it out."""
        header = {"alg": self.alg, "typ": "JWT"}
        if kid is not None:
            header["kid"] = kid or self.kid
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
        sig = openssl("dgst", "-sha256", "-sign", str(self.pem), data=signing_input.encode())
        if self.alg == "ES256":
            sig = der_ecdsa_to_raw(sig)
        return f"{signing_input}.{b64url(sig)}"


def claims(sub: str, lifetime_s: int = 3600, **extra) -> dict:
    now = int(time.time())
    return {"sub": sub, "iss": ISSUER, "aud": [AUDIENCE, "other"], "iat": now, "exp": now + lifetime_s,
            "scope": "kafka", **extra}


class Idp:
    """An identity provider's keys: an RSA and an EC key published in a JWKS file, and a
    rogue key that is not published."""

    def __init__(self, root: Path):
        root.mkdir(parents=True, exist_ok=True)
        self.rsa = Key(root, "rsa-1", "RS256")
        self.ec = Key(root, "ec-1", "ES256")
        self.rogue = Key(root, "rogue", "RS256")
        self.jwks = root / "jwks.json"
        self.publish([self.rsa, self.ec])

    def publish(self, keys: list[Key]) -> None:
        staged = self.jwks.with_suffix(".new")
        staged.write_text(json.dumps({"keys": [k.jwk for k in keys]}))
        os.replace(staged, self.jwks)


@pytest.fixture
def idp(tmp_path) -> Idp:
    return Idp(tmp_path / "idp")


def oauth_broker(broker_factory, monkeypatch, idp: Idp, **env: str):
    """A SASL_PLAINTEXT broker offering OAUTHBEARER (and PLAIN for the admin CLI)."""
    monkeypatch.setenv("STRATA_SASL_ENABLED_MECHANISMS", "OAUTHBEARER,PLAIN")
    monkeypatch.setenv("STRATA_SASL_PLAIN_USERS", f"{ADMIN[0]}:{ADMIN[1]}")
    monkeypatch.setenv("STRATA_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL", f"file://{idp.jwks}")
    monkeypatch.setenv("STRATA_SASL_OAUTHBEARER_EXPECTED_ISSUER", ISSUER)
    monkeypatch.setenv("STRATA_SASL_OAUTHBEARER_EXPECTED_AUDIENCE", AUDIENCE)
    monkeypatch.setenv("STRATA_LOG", "info,strata::server::dispatch=debug")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    port = free_port()
    return broker_factory(port=port, extra_args=["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}"])


def create_topic(bootstrap: str, topic: str) -> None:
    r = subprocess.run([str(strata_bin()), "topic", "create", topic, "--partitions", "1", "--bootstrap", bootstrap,
                        "--sasl-mechanism", "PLAIN", "--sasl-username", ADMIN[0], "--sasl-password", ADMIN[1]],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()


def librdkafka_conf(bootstrap: str, token: str, principal: str = "alice", errors: list | None = None) -> dict:
    def oauth_cb(_config):
        # (token, expiry in seconds since the epoch, principal, extensions)
        return token, time.time() + 3600, principal, {"traceId": "t1"}
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "OAUTHBEARER", "oauth_cb": oauth_cb}
    if errors is not None:
        conf["error_cb"] = errors.append
    return conf


def confluent_round_trip(bootstrap: str, topic: str, token: str) -> None:
    conf = librdkafka_conf(bootstrap, token)
    p = Producer({**conf, "acks": "all"})
    for i in range(5):
        p.produce(topic, value=f"oauth {i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"oauth {i}".encode() for i in range(5)]


def confluent_refused(bootstrap: str, token: str) -> list:
    """librdkafka with `token`: the broker must refuse it; returns the errors reported."""
    errors: list = []
    c = Consumer({**librdkafka_conf(bootstrap, token, errors=errors), "group.id": "g"})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()
    return errors


# --- raw protocol: SaslHandshake v1 and SaslAuthenticate v1 --------------------------------------

def handshake(sock, mechanism: str, corr: int = 1) -> int:
    sock.sendall(kproto.request(API_SASL_HANDSHAKE, 1, corr, kproto.kstring(mechanism)))
    got, body = kproto.recv_response(sock)
    assert got == corr
    return struct.unpack(">h", body[:2])[0]


def authenticate(sock, token: bytes, corr: int = 2) -> tuple[int, str | None, bytes, int]:
    sock.sendall(kproto.request(API_SASL_AUTHENTICATE, 1, corr, struct.pack(">i", len(token)) + token))
    got, body = kproto.recv_response(sock)
    assert got == corr
    (err, mlen) = struct.unpack(">hh", body[:4])
    pos, msg = 4, None
    if mlen >= 0:
        msg = body[pos:pos + mlen].decode()
        pos += mlen
    (blen,) = struct.unpack(">i", body[pos:pos + 4])
    auth = body[pos + 4:pos + 4 + blen]
    (lifetime,) = struct.unpack(">q", body[pos + 4 + blen:pos + 12 + blen])
    return err, msg, auth, lifetime


def bearer(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def metadata_answered(sock, corr: int = 9) -> bool:
    try:
        sock.sendall(kproto.request(API_METADATA, 1, corr, struct.pack(">i", -1)))
        got, _ = kproto.recv_response(sock)
        return got == corr
    except TimeoutError:
        raise
    except (kproto.ProtocolError, OSError):
        return False


# --- tests ---------------------------------------------------------------------------------------

def test_oauthbearer_with_real_clients(broker_factory, monkeypatch, idp, tmp_path):
    """Proves OAUTHBEARER with signed JWTs: confluent-kafka (oauth_cb with an RS256 token, and
    one with an ES256 token found without a kid), kafka-python (a token provider) and the Java
    client (OAuthBearerLoginCallbackHandler reading the token from a file: URL) each produce
    and read back; the broker's principal is the token's sub (User:alice)."""
    b = oauth_broker(broker_factory, monkeypatch, idp)
    create_topic(b.bootstrap, "oauth-confluent")
    confluent_round_trip(b.bootstrap, "oauth-confluent", idp.rsa.sign(claims("alice")))
    create_topic(b.bootstrap, "oauth-es256")
    confluent_round_trip(b.bootstrap, "oauth-es256", idp.ec.sign(claims("alice"), kid=None))

    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return idp.rsa.sign(claims("alice"))

    conf = dict(bootstrap_servers=b.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=Provider())
    create_topic(b.bootstrap, "oauth-kafka-python")
    p = KafkaProducer(acks="all", **conf)
    for i in range(5):
        p.send("oauth-kafka-python", value=f"kp {i}".encode(), partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=10_000, **conf)
    c.assign([KTP("oauth-kafka-python", 0)])
    c.seek_to_beginning()
    got = [m.value for m in c][:5]
    c.close()
    assert got == [f"kp {i}".encode() for i in range(5)]

    java_round_trip(b.bootstrap, "oauth-java", idp.rsa.sign(claims("alice")), tmp_path)

    log = b.log_path.read_text(errors="replace")
    assert 'SASL authenticated' in log and 'user=alice' in log, log[-3000:]


def java_round_trip(bootstrap: str, topic: str, token: str, tmp: Path) -> None:
    """Kafka's ProducerPerformance and ConsumerPerformance with the Java client's own
    OAUTHBEARER login: the token comes from a file (sasl.oauthbearer.token.endpoint.url)."""
    if shutil.which("java") is None or not list(KAFKA_LIB.glob("kafka-clients-*.jar")):
        reason = "java or the Kafka jars (tests/fetch-jars.sh kafka) missing"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    token_file = tmp / "token.jwt"
    token_file.write_text(token)
    config = tmp / "oauth.properties"
    config.write_text("\n".join([
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanism=OAUTHBEARER",
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
        "sasl.login.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        f"sasl.oauthbearer.token.endpoint.url=file://{token_file}",
    ]) + "\n")
    env = {**os.environ, "KAFKA_OPTS": f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=file://{token_file}"}
    r = subprocess.run([str(RUN_CLASS), "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                        "--num-records", "500", "--record-size", "100", "--throughput", "-1",
                        "--producer.config", str(config),
                        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all"],
                       capture_output=True, timeout=180, env=env)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and "500 records sent" in out, out[-3000:]
    r = subprocess.run([str(RUN_CLASS), "org.apache.kafka.tools.ConsumerPerformance", "--topic", topic,
                        "--bootstrap-server", bootstrap, "--messages", "500", "--timeout", "60000",
                        "--consumer.config", str(config)],
                       capture_output=True, timeout=180, env=env)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-3000:]
    data = [line for line in r.stdout.decode().splitlines() if line[:1].isdigit()]
    assert data and int(data[-1].split(",")[4].strip()) == 500, out[-3000:]


def test_invalid_tokens_refused_as_kafka(broker_factory, monkeypatch, idp):
    """Proves each bad token is refused as Kafka refuses it, nothing served: on the wire the
    token is answered with the `{"status":"invalid_token"}` challenge (error 0), the client's
    0x01 with SASL_AUTHENTICATION_FAILED carrying that JSON, and the connection then closes.
    Expired, wrong issuer, wrong audience, signed by an unpublished key, a forged payload, and
    librdkafka's unsecured (alg none) token via kcat; confluent-kafka reports the failure for
    each. The log says why, never the token."""
    b = oauth_broker(broker_factory, monkeypatch, idp)
    create_topic(b.bootstrap, "oauth-secret")
    good = idp.rsa.sign(claims("alice"))
    header, _, sig = good.split(".")
    bad = {
        "expired": idp.rsa.sign(claims("alice", lifetime_s=-120)),
        "issuer": idp.rsa.sign(claims("alice", iss="https://evil.test")),
        "audience": idp.rsa.sign(claims("alice", aud="someone-else")),
        "signature": idp.rogue.sign(claims("alice"), kid="rsa-1"),
        "forged": f"{header}.{b64url(json.dumps(claims('root')).encode())}.{sig}",
        "unknown-kid": idp.rogue.sign(claims("alice")),
    }
    for name, token in bad.items():
        # Failures are logged at most once a second per shard: space them so each is.
        time.sleep(1.1)
        with kproto.connect(b.bootstrap) as s:
            assert handshake(s, "OAUTHBEARER") == 0
            err, msg, challenge, _ = authenticate(s, bearer(token))
            assert (err, challenge) == (0, INVALID_TOKEN), (name, err, msg, challenge)
            t0 = time.monotonic()
            err, msg, _, _ = authenticate(s, b"\x01", corr=3)
            assert err == SASL_AUTHENTICATION_FAILED and msg == INVALID_TOKEN.decode(), (name, err, msg)
            assert time.monotonic() - t0 >= 0.09  # connection_failed_authentication_delay_ms
            assert not metadata_answered(s), name
    for name, token in bad.items():
        errors = confluent_refused(b.bootstrap, token)
        assert any("invalid_token" in e.str() or "uthentication" in e.str() for e in errors), \
            (name, [e.str() for e in errors])
    # A malformed initial response fails at once with Kafka's generic message.
    with kproto.connect(b.bootstrap) as s:
        assert handshake(s, "OAUTHBEARER") == 0
        err, msg, _, _ = authenticate(s, b"n,,\x01auth=Basic dXNlcg==\x01\x01")
        assert err == SASL_AUTHENTICATION_FAILED, (err, msg)
        assert msg == ("Authentication failed during authentication due to invalid credentials with "
                       "SASL mechanism OAUTHBEARER"), msg
    # kcat with librdkafka's unsecured JWT (alg none): refused, no metadata.
    time.sleep(1.1)
    if shutil.which("kcat"):
        r = subprocess.run(["kcat", "-L", "-b", b.bootstrap, "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT",
                            "-X", "sasl.mechanisms=OAUTHBEARER", "-X", "enable.sasl.oauthbearer.unsecure.jwt=true",
                            "-X", "sasl.oauthbearer.config=principal=alice"], capture_output=True, timeout=60)
        assert r.returncode != 0 and b"oauth-secret" not in r.stdout, r.stdout.decode() + r.stderr.decode()
    log = b.log_path.read_text(errors="replace")
    whys = ["token expired", "issuer", "audience", "signature does not verify", "no key in the JWKS"]
    if shutil.which("kcat"):
        whys.append("JWS algorithm `none`")
    for why in whys:
        assert why in log, (why, log[-4000:])
    for token in bad.values():
        assert token not in log and token.split(".")[2] not in log


def test_session_ends_at_token_expiry(broker_factory, monkeypatch, idp):
    """Proves KIP-368 with OAUTHBEARER: SaslAuthenticate answers session_lifetime_ms as the
    token's time to exp (here ~8 s, with no clock skew allowed), requests are served until then
    and the next request after exp closes the connection; a token with a longer life than
    connections_max_reauth_ms gets the latter."""
    b = oauth_broker(broker_factory, monkeypatch, idp, STRATA_SASL_OAUTHBEARER_CLOCK_SKEW_SECONDS="0",
                     STRATA_CONNECTIONS_MAX_REAUTH_MS="60000")
    # exp is whole seconds: 7-8 s left now, so the lifetime check has ~3 s of room for the
    # connect and the authentication on a loaded machine.
    exp = int(time.time()) + 8
    token = idp.ec.sign({**claims("alice"), "exp": exp})
    with kproto.connect(b.bootstrap) as s:
        assert handshake(s, "OAUTHBEARER") == 0
        err, msg, auth, lifetime = authenticate(s, bearer(token))
        assert (err, auth) == (0, b""), (err, msg, auth)
        assert 4000 < lifetime <= 8000, lifetime
        assert metadata_answered(s)
        time.sleep(max(0.0, exp - time.time() + 0.3))
        assert not metadata_answered(s, corr=10)
    with kproto.connect(b.bootstrap) as s:
        assert handshake(s, "OAUTHBEARER") == 0
        err, _, _, lifetime = authenticate(s, bearer(idp.rsa.sign(claims("alice"))))
        assert (err, lifetime) == (0, 60000)


def test_jwks_file_reloaded_on_change(broker_factory, monkeypatch, idp, tmp_path):
    """Proves key rotation without a restart: a token signed by a new key is refused until the
    JWKS file is replaced to publish that key, then accepted (within the 1 s check interval);
    a broken replacement is logged and the last good keys stay in use."""
    b = oauth_broker(broker_factory, monkeypatch, idp)
    new = Key(tmp_path / "idp", "rsa-2", "RS256")
    token = new.sign(claims("carol"))
    confluent_refused(b.bootstrap, token)
    idp.publish([idp.rsa, new])
    create_topic(b.bootstrap, "oauth-rotated")
    deadline = time.monotonic() + 15
    while True:
        with kproto.connect(b.bootstrap) as s:
            assert handshake(s, "OAUTHBEARER") == 0
            if authenticate(s, bearer(token))[2] == b"":
                break
        assert time.monotonic() < deadline, "the new key was never taken"
        time.sleep(0.3)
    confluent_round_trip(b.bootstrap, "oauth-rotated", token)
    # Each shard reads the keys on its own, at an authentication at most once a second
    # (src/server/oauth.rs), and the kernel picks a connection's shard: a shard that has
    # authenticated nobody since the change would meet the broken file below first. Past
    # the interval, every shard takes the new key at its next authentication; 16 of them
    # reach both shards of this broker but for a chance of 2^-15.
    time.sleep(1.1)
    for _ in range(16):
        with kproto.connect(b.bootstrap) as s:
            assert handshake(s, "OAUTHBEARER") == 0
            err, msg, challenge, _ = authenticate(s, bearer(token))
            assert (err, challenge) == (0, b""), (err, msg)
    idp.jwks.write_text("{not json")
    time.sleep(1.5)
    with kproto.connect(b.bootstrap) as s:
        assert handshake(s, "OAUTHBEARER") == 0
        err, _, challenge, _ = authenticate(s, bearer(token))
        assert (err, challenge) == (0, b"")
    assert "OAUTHBEARER keys changed but cannot be loaded" in b.log_path.read_text(errors="replace")
