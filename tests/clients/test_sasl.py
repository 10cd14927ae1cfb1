"""SASL authentication (issue 15) with real clients over SASL_PLAINTEXT: kcat (librdkafka
2.0.2), confluent-kafka, kafka-python and the Java client 4.1, with PLAIN (static users from
`sasl_plain_users`) and SCRAM-SHA-512 / SCRAM-SHA-256 (credentials set with `strata user scram
set`, kept in the metadata log). Wrong passwords and clients that skip SASL are refused and
served nothing; sessions expire and re-authenticate (KIP-368)."""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

import kproto
from common import compile_java_checks
from harness import free_port, strata_bin

ADMIN = ("admin", "secret")
TIMEOUT_S = 60
JAVA_DIR = Path(__file__).resolve().parent / "java"
LIB = JAVA_DIR / "lib"

API_METADATA = 3
API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
SASL_AUTHENTICATION_FAILED = 58


@pytest.fixture
def sasl_env(monkeypatch):
    """A static PLAIN admin and every mechanism enabled, for the next broker."""
    monkeypatch.setenv("STRATA_SASL_PLAIN_USERS", f"{ADMIN[0]}:{ADMIN[1]}")
    monkeypatch.setenv("STRATA_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN")
    return monkeypatch


def start_sasl_broker(broker_factory):
    """A broker whose only listener is SASL_PLAINTEXT (Kafka's `listeners`)."""
    port = free_port()
    return broker_factory(port=port, extra_args=["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}"])


@pytest.fixture
def sasl_broker(sasl_env, broker_factory):
    return start_sasl_broker(broker_factory)


def cli_auth(mechanism: str = "PLAIN", user: str = ADMIN[0], password: str = ADMIN[1]) -> list[str]:
    return ["--sasl-mechanism", mechanism, "--sasl-username", user, "--sasl-password", password]


def strata(*args: str) -> str:
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=TIMEOUT_S)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, f"strata {' '.join(args)}: {out}"
    return r.stdout.decode()


def scram_set(bootstrap: str, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
    strata("user", "scram", "set", "--bootstrap", bootstrap, *cli_auth(), "--user", user,
           "--password", password, "--mechanism", mechanism)


def create_topic(bootstrap: str, topic: str) -> None:
    strata("topic", "create", topic, "--partitions", "1", "--bootstrap", bootstrap, *cli_auth())


def librdkafka_conf(bootstrap: str, mechanism: str, user: str, password: str, ca: Path | None = None) -> dict:
    """librdkafka's settings for SASL_PLAINTEXT, or SASL_SSL verifying the server against `ca`."""
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    if ca is not None:
        conf |= {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca)}
    return conf


# --- the four clients: each produces 5 records and reads them back -----------------------------

def confluent_round_trip(bootstrap, topic, mechanism, user, password, ca=None):
    conf = librdkafka_conf(bootstrap, mechanism, user, password, ca)
    p = Producer({**conf, "acks": "all"})
    for i in range(5):
        p.produce(topic, value=f"confluent {i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None and m.value().startswith(b"confluent"):
            got.append(m.value())
    c.close()
    assert got == [f"confluent {i}".encode() for i in range(5)]


def kcat_round_trip(bootstrap, topic, mechanism, user, password, ca=None):
    auth = [arg for k, v in librdkafka_conf(bootstrap, mechanism, user, password, ca).items()
            if k != "bootstrap.servers" for arg in ("-X", f"{k}={v}")]
    lines = "".join(f"kcat {i}\n" for i in range(5)).encode()
    r = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-X", "acks=all", *auth],
                       input=lines, capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", *auth],
                       capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    got = [line for line in r.stdout.decode().splitlines() if line.startswith("kcat")]
    assert got == [f"kcat {i}" for i in range(5)], r.stdout.decode()


def kafka_python_conf(bootstrap, mechanism, user, password, ca=None) -> dict:
    conf = dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                sasl_plain_username=user, sasl_plain_password=password)
    if ca is not None:
        conf |= dict(security_protocol="SASL_SSL", ssl_cafile=str(ca))
    return conf


def kafka_python_round_trip(bootstrap, topic, mechanism, user, password, ca=None):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    conf = kafka_python_conf(bootstrap, mechanism, user, password, ca)
    p = KafkaProducer(acks="all", **conf)
    for i in range(5):
        p.send(topic, value=f"kafka-python {i}".encode(), partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=10_000, **conf)
    c.assign([KTP(topic, 0)])
    c.seek_to_beginning()
    got = [m.value for m in c if m.value.startswith(b"kafka-python")][:5]
    c.close()
    assert got == [f"kafka-python {i}".encode() for i in range(5)]


@pytest.fixture(scope="module")
def java_build(tmp_path_factory) -> Path:
    return compile_java_checks(tmp_path_factory, "java-sasl", ["SaslCheck.java"])


def java(java_build, *args, timeout_s=180, ca: Path | None = None) -> str:
    """SaslCheck; with `ca`, over SASL_SSL trusting that CA (PEM truststore)."""
    tls = [f"-Dstrata.truststore={ca}"] if ca is not None else []
    r = subprocess.run(["java", *tls, "-cp", f"{LIB}/*:{java_build}", "SaslCheck", *args],
                       capture_output=True, timeout=timeout_s)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-5000:]
    return r.stdout.decode()


# --- raw protocol helpers (SaslHandshake v1, SaslAuthenticate v1) -------------------------------

def handshake(sock, mechanism: str, corr: int = 1) -> tuple[int, list[str]]:
    sock.sendall(kproto.request(API_SASL_HANDSHAKE, 1, corr, kproto.kstring(mechanism)))
    got, body = kproto.recv_response(sock)
    assert got == corr
    (err, n) = struct.unpack(">hi", body[:6])
    pos, mechs = 6, []
    for _ in range(n):
        (ln,) = struct.unpack(">h", body[pos:pos + 2])
        mechs.append(body[pos + 2:pos + 2 + ln].decode())
        pos += 2 + ln
    return err, mechs


def authenticate(sock, token: bytes, corr: int = 2) -> tuple[int, str | None, bytes, int]:
    """SaslAuthenticate v1: (error_code, error_message, auth_bytes, session_lifetime_ms)."""
    sock.sendall(kproto.request(API_SASL_AUTHENTICATE, 1, corr, struct.pack(">i", len(token)) + token))
    got, body = kproto.recv_response(sock)
    assert got == corr
    (err, mlen) = struct.unpack(">hh", body[:4])
    pos = 4
    msg = None
    if mlen >= 0:
        msg = body[pos:pos + mlen].decode()
        pos += mlen
    (blen,) = struct.unpack(">i", body[pos:pos + 4])
    auth = body[pos + 4:pos + 4 + blen]
    (lifetime,) = struct.unpack(">q", body[pos + 4 + blen:pos + 12 + blen])
    return err, msg, auth, lifetime


def plain_token(user: str, password: str) -> bytes:
    return b"\0" + user.encode() + b"\0" + password.encode()


def metadata_answered(sock, corr: int = 9) -> bool:
    """Sends Metadata v1 (all topics); True if answered, False if the broker closed."""
    try:
        sock.sendall(kproto.request(API_METADATA, 1, corr, struct.pack(">i", -1)))
        got, _ = kproto.recv_response(sock)
        return got == corr
    except TimeoutError:
        raise  # neither answered nor closed: the broker left the connection hanging
    # A reset, or over TLS an EOF without close_notify (ssl.SSLError is an OSError).
    except (kproto.ProtocolError, OSError):
        return False


# --- tests ---------------------------------------------------------------------------------------

def test_plain_with_every_client(sasl_broker, java_build):
    """Proves PLAIN over SASL_PLAINTEXT with a static user: kcat, confluent-kafka, kafka-python
    and the Java client each produce to and read back from the broker; Strata's own CLI
    authenticates too (it created the topic)."""
    b = sasl_broker.bootstrap
    for name, fn in [("kcat", kcat_round_trip), ("confluent", confluent_round_trip),
                     ("kafka-python", kafka_python_round_trip)]:
        topic = f"plain-{name}"
        create_topic(b, topic)
        fn(b, topic, "PLAIN", *ADMIN)
    create_topic(b, "plain-java")
    assert "OK" in java(java_build, b, "plain-java", "PLAIN", *ADMIN)


def test_scram_with_every_client(sasl_broker, java_build):
    """Proves SCRAM-SHA-512 (all four clients) and SCRAM-SHA-256 (confluent-kafka and kcat)
    with credentials set by `strata user scram set` on a running broker: a new connection
    authenticates with them at once; `strata user scram list` shows the mechanisms and
    iterations and never a key."""
    b = sasl_broker.bootstrap
    scram_set(b, "alice", "alice-pw")
    scram_set(b, "bob", "bob-pw", "SCRAM-SHA-256")
    listing = strata("user", "scram", "list", "--bootstrap", b, *cli_auth())
    assert "alice" in listing and "SCRAM-SHA-512" in listing and "8192" in listing, listing
    assert "bob" in listing and "SCRAM-SHA-256" in listing, listing
    for name, fn in [("kcat", kcat_round_trip), ("confluent", confluent_round_trip),
                     ("kafka-python", kafka_python_round_trip)]:
        topic = f"scram-{name}"
        create_topic(b, topic)
        fn(b, topic, "SCRAM-SHA-512", "alice", "alice-pw")
    create_topic(b, "scram-java")
    assert "OK" in java(java_build, b, "scram-java", "SCRAM-SHA-512", "alice", "alice-pw")
    create_topic(b, "scram256")
    confluent_round_trip(b, "scram256", "SCRAM-SHA-256", "bob", "bob-pw")
    # Strata's CLI authenticates with SCRAM as well.
    strata("topic", "list", "--bootstrap", b, *cli_auth("SCRAM-SHA-256", "bob", "bob-pw"))


def test_wrong_password_is_refused_by_every_client(sasl_broker, java_build):
    """Proves a wrong password (PLAIN and SCRAM) and an unknown user get the authentication
    error in each client and nothing is served: no topic metadata, no records."""
    b = sasl_broker.bootstrap
    scram_set(b, "alice", "alice-pw")
    create_topic(b, "secret-topic")
    # confluent-kafka: the error callback reports _AUTHENTICATION; metadata never arrives.
    for mechanism, user in [("PLAIN", "admin"), ("SCRAM-SHA-512", "alice"), ("SCRAM-SHA-512", "nobody")]:
        errors = []
        c = Consumer({**librdkafka_conf(b, mechanism, user, "wrong"), "group.id": "g",
                      "error_cb": lambda e: errors.append(e)})
        with pytest.raises(KafkaException):
            c.list_topics(timeout=5)
        c.close()
        assert any("Authentication failed" in e.str() or e.code() == -169 for e in errors), \
            [e.str() for e in errors]
    # kcat: exits with the authentication error.
    r = subprocess.run(["kcat", "-L", "-b", b, "-m", "5", "-X", "security.protocol=SASL_PLAINTEXT",
                        "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
                        "-X", "sasl.password=wrong"], capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode != 0 and b"secret-topic" not in r.stdout, r.stdout.decode()
    assert b"Authentication failed" in r.stderr or b"authentication" in r.stderr.lower(), r.stderr.decode()
    # kafka-python: the failed authentication surfaces as a bootstrap failure (3.0 retries it
    # until its timeout and reports no error code).
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError
    with pytest.raises(KafkaError) as info:
        c = KafkaConsumer(request_timeout_ms=5000,
                          **kafka_python_conf(b, "PLAIN", "admin", "wrong"))
        c.topics()
    assert any(w in repr(info.value) for w in ("Authentication", "NoBrokers", "bootstrap")), repr(info.value)
    # Java: SaslAuthenticationException.
    out = java(java_build, b, "secret-topic", "SCRAM-SHA-512", "alice", "wrong", "expect-fail")
    assert "REFUSED" in out and "Authentication failed" in out, out


def test_raw_failure_is_delayed_then_closed(sasl_broker):
    """Proves on the wire: ApiVersions is served before authentication; a wrong PLAIN
    password is answered SASL_AUTHENTICATION_FAILED (58) with Kafka's message no sooner than
    connection_failed_authentication_delay_ms (100), and the connection is then closed, so a
    following Metadata request gets nothing. An unknown mechanism gets
    UNSUPPORTED_SASL_MECHANISM (33) and the enabled list."""
    assert 17 in kproto.api_versions(sasl_broker.bootstrap)
    with kproto.connect(sasl_broker.bootstrap) as s:
        err, mechs = handshake(s, "GSSAPI")
        assert err == 33 and mechs == ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"]
    with kproto.connect(sasl_broker.bootstrap) as s:
        assert handshake(s, "PLAIN")[0] == 0
        t0 = time.monotonic()
        err, msg, _, _ = authenticate(s, plain_token("admin", "nope"))
        assert time.monotonic() - t0 >= 0.09
        assert err == SASL_AUTHENTICATION_FAILED and msg == "Authentication failed: Invalid username or password"
        assert not metadata_answered(s)
    log = sasl_broker.log_path.read_text(errors="replace")
    assert "SASL authentication failed" in log and "user=\"admin\"" in log and "nope" not in log


def test_client_skipping_sasl_is_closed_unserved(sasl_broker):
    """Proves a client that sends a request without authenticating is disconnected without
    an answer: a raw Metadata request, and librdkafka configured for PLAINTEXT (which never
    learns the topic list)."""
    create_topic(sasl_broker.bootstrap, "hidden")
    with kproto.connect(sasl_broker.bootstrap) as s:
        assert not metadata_answered(s)
    with kproto.connect(sasl_broker.bootstrap) as s:
        # A handshake alone is not enough either.
        assert handshake(s, "PLAIN")[0] == 0
        assert not metadata_answered(s)
    c = Consumer({"bootstrap.servers": sasl_broker.bootstrap, "group.id": "g"})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()


def test_scram_credentials_survive_restart_and_delete(sasl_env, broker_factory):
    """Proves SCRAM credentials live in the metadata log: set, then the broker restarts and
    the user authenticates on a new connection; after `strata user scram delete` it cannot."""
    broker = start_sasl_broker(broker_factory)
    b = broker.bootstrap
    scram_set(b, "carol", "carol-pw")
    create_topic(b, "restart-topic")
    broker.restart()
    confluent_round_trip(b, "restart-topic", "SCRAM-SHA-512", "carol", "carol-pw")
    strata("user", "scram", "delete", "--bootstrap", b, *cli_auth(), "--user", "carol")
    listing = strata("user", "scram", "list", "--bootstrap", b, *cli_auth())
    assert "carol" not in listing, listing
    errors = []
    c = Consumer({**librdkafka_conf(b, "SCRAM-SHA-512", "carol", "carol-pw"), "group.id": "g",
                  "error_cb": lambda e: errors.append(e)})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()


def test_session_expiry_and_reauthentication(sasl_env, broker_factory, java_build):
    """Proves KIP-368 with connections_max_reauth_ms=3000: SaslAuthenticate v1 answers
    session_lifetime_ms=3000; re-authenticating on the live connection extends the session;
    past its end the next request closes the connection. The Java client and kafka-python,
    which re-authenticate by themselves, keep one consumer connection serving for 6 s."""
    # 3 s sessions: each step below has >= 1 s of room on a loaded machine, and the Java
    # client (which re-authenticates 5-15 % before the end) still does so twice in 6 s.
    sasl_env.setenv("STRATA_CONNECTIONS_MAX_REAUTH_MS", "3000")
    broker = start_sasl_broker(broker_factory)
    b = broker.bootstrap
    with kproto.connect(b) as s:
        assert handshake(s, "PLAIN")[0] == 0
        t0 = time.monotonic()
        err, _, _, lifetime = authenticate(s, plain_token(*ADMIN))
        assert (err, lifetime) == (0, 3000)
        assert metadata_answered(s)
        time.sleep(1.5)
        assert handshake(s, "PLAIN", corr=3)[0] == 0
        err, _, _, _ = authenticate(s, plain_token(*ADMIN), corr=4)
        t1 = time.monotonic()
        assert err == 0
        time.sleep(max(0.0, t0 + 3.5 - time.monotonic()))  # past the first session's end
        assert metadata_answered(s, corr=5)
        time.sleep(max(0.0, t1 + 3.3 - time.monotonic()))  # past the second's
        assert not metadata_answered(s, corr=6)
    create_topic(b, "reauth-java")
    assert "OK" in java(java_build, b, "reauth-java", "PLAIN", *ADMIN, "ok", "6000")
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    create_topic(b, "reauth-py")
    kafka_python_round_trip(b, "reauth-py", "PLAIN", *ADMIN)
    c = KafkaConsumer(enable_auto_commit=False, **kafka_python_conf(b, "PLAIN", *ADMIN))
    tp = KTP("reauth-py", 0)
    c.assign([tp])
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        c.poll(timeout_ms=200)
    c.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 5 and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            got.extend(r.value for r in recs)
    c.close()
    assert len(got) == 5


# --- SASL_SSL: SASL inside TLS -------------------------------------------------------------------

def start_sasl_ssl_broker(broker_factory, monkeypatch, pki, *listeners: str):
    """A broker with a SASL_PLAINTEXT listener (the harness's readiness probe and the CLI) and
    a SASL_SSL one serving the test CA's server certificate; `b.tls_bootstrap` is the latter."""
    inner, outer = free_port(), free_port()
    monkeypatch.setenv("STRATA_SSL_CERTIFICATE_LOCATION", str(pki.server_cert))
    monkeypatch.setenv("STRATA_SSL_KEY_LOCATION", str(pki.server_key))
    b = broker_factory(port=inner, extra_args=[
        "--listeners", f"SASL_PLAINTEXT://127.0.0.1:{inner},SASL_SSL://127.0.0.1:{outer}", *listeners])
    b.tls_port = outer
    b.tls_bootstrap = f"127.0.0.1:{outer}"
    return b


@pytest.fixture
def pki(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    from test_tls import Pki
    return Pki(tmp_path / "pki")


def tls_connect(bootstrap: str, ca: Path) -> ssl.SSLSocket:
    host, port = bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection((host, int(port)), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def test_sasl_ssl_scram_with_every_client(sasl_env, broker_factory, monkeypatch, pki, java_build):
    """Proves SASL_SSL end to end: SCRAM-SHA-512 inside TLS (server verified against the test
    CA) with kcat, confluent-kafka, kafka-python and the Java client, each producing and
    reading back; Metadata on the SASL_SSL listener advertises the SASL_SSL port."""
    b = start_sasl_ssl_broker(broker_factory, monkeypatch, pki)
    scram_set(b.bootstrap, "alice", "alice-pw")
    tb = b.tls_bootstrap
    clients = [("confluent", confluent_round_trip), ("kafka-python", kafka_python_round_trip)]
    if shutil.which("kcat"):
        clients.insert(0, ("kcat", kcat_round_trip))
    for name, fn in clients:
        topic = f"sasl-ssl-{name}"
        create_topic(b.bootstrap, topic)
        fn(tb, topic, "SCRAM-SHA-512", "alice", "alice-pw", ca=pki.ca)
    create_topic(b.bootstrap, "sasl-ssl-java")
    assert "OK" in java(java_build, tb, "sasl-ssl-java", "SCRAM-SHA-512", "alice", "alice-pw", ca=pki.ca)
    from confluent_kafka.admin import AdminClient
    md = AdminClient(librdkafka_conf(tb, "SCRAM-SHA-512", "alice", "alice-pw", pki.ca)).list_topics(timeout=10)
    assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", b.tls_port)]
    # A wrong password inside TLS is refused as on SASL_PLAINTEXT.
    out = java(java_build, tb, "sasl-ssl-java", "SCRAM-SHA-512", "alice", "wrong", "expect-fail", ca=pki.ca)
    assert "REFUSED" in out and "Authentication failed" in out, out


def test_sasl_ssl_client_skipping_sasl_is_closed_unserved(sasl_env, broker_factory, monkeypatch, pki):
    """Proves a TLS client that completes the handshake but skips SASL on a SASL_SSL listener
    is closed with nothing served: a raw Metadata request over TLS gets no answer (ApiVersions
    still does, as Kafka), and librdkafka configured for SSL alone never learns the topics. A
    cleartext SASL client on the SASL_SSL port is refused too."""
    b = start_sasl_ssl_broker(broker_factory, monkeypatch, pki)
    create_topic(b.bootstrap, "tls-hidden")
    with tls_connect(b.tls_bootstrap, pki.ca) as s:
        s.sendall(kproto.request(18, 0, 1, b""))  # ApiVersions v0
        assert kproto.recv_response(s)[0] == 1
        assert not metadata_answered(s)
    with tls_connect(b.tls_bootstrap, pki.ca) as s:
        assert handshake(s, "SCRAM-SHA-512")[0] == 0
        assert not metadata_answered(s)
    errors = []
    c = Consumer({"bootstrap.servers": b.tls_bootstrap, "group.id": "g", "security.protocol": "ssl",
                  "ssl.ca.location": str(pki.ca), "error_cb": lambda e: errors.append(e)})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()
    # SASL without TLS on the TLS port: the TLS layer refuses the cleartext bytes.
    c = Consumer({**librdkafka_conf(b.tls_bootstrap, "PLAIN", *ADMIN), "group.id": "g"})
    with pytest.raises(KafkaException):
        c.list_topics(timeout=5)
    c.close()
    log = b.log_path.read_text(errors="replace")
    assert "panicked" not in log
    confluent_round_trip(b.tls_bootstrap, "tls-hidden", "PLAIN", *ADMIN, ca=pki.ca)


# --- The strata CLI's --command-config over SASL_SSL ---------------------------------------------

def strata_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=TIMEOUT_S)


def scram_command_config(path: Path, ca: Path, user: str, password: str) -> Path:
    """Kafka's client properties for SASL_SSL with SCRAM-SHA-512 and a PEM truststore, as
    kafka-acls.sh --command-config takes them."""
    path.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n")
    return path


def test_cli_command_config_sasl_ssl_scram(sasl_env, broker_factory, monkeypatch, pki, tmp_path):
    """Proves the strata CLI's --command-config over SASL_SSL with SCRAM-SHA-512 (server
    verified against the PEM truststore): `user scram set/list`, `topic create/list` and
    `acl add/list` work against the SASL_SSL listener; a wrong password fails as an
    authentication failure and a truststore of another CA as an untrusted certificate, each
    with a message that says so."""
    sasl_env.setenv("STRATA_AUTHORIZER", "acl")
    sasl_env.setenv("STRATA_SUPER_USERS", "User:admin")
    b = start_sasl_ssl_broker(broker_factory, monkeypatch, pki)
    scram_set(b.bootstrap, "admin", "admin-scram")
    cc = scram_command_config(tmp_path / "admin.properties", pki.ca, "admin", "admin-scram")
    on_tls = ["--bootstrap", b.tls_bootstrap, "--command-config", str(cc)]
    strata("user", "scram", "set", *on_tls, "--user", "carol", "--password", "carol-pw",
           "--mechanism", "SCRAM-SHA-512")
    listing = strata("user", "scram", "list", *on_tls)
    assert "carol" in listing and "admin" in listing and "SCRAM-SHA-512" in listing, listing
    strata("topic", "create", "cc-sasl-ssl", "--partitions", "1", *on_tls)
    assert "cc-sasl-ssl" in strata("topic", "list", *on_tls)
    strata("acl", "add", "--allow-principal", "User:carol", "--operation", "Read",
           "--topic", "cc-sasl-ssl", *on_tls)
    rows = [line.split() for line in strata("acl", "list", *on_tls).splitlines()[1:]]
    assert rows == [["TOPIC", "cc-sasl-ssl", "LITERAL", "User:carol", "*", "READ", "ALLOW"]], rows
    # The new user's credentials work at once, from a file of her own.
    carol = scram_command_config(tmp_path / "carol.properties", pki.ca, "carol", "carol-pw")
    assert "cc-sasl-ssl" in strata("topic", "list", "--bootstrap", b.tls_bootstrap,
                                   "--command-config", str(carol))

    wrong = scram_command_config(tmp_path / "wrong.properties", pki.ca, "admin", "wrong")
    r = strata_run("acl", "list", "--bootstrap", b.tls_bootstrap, "--command-config", str(wrong))
    err = r.stderr.decode()
    assert r.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in err, err
    assert "panicked" not in err

    from test_tls import Pki
    other = Pki(tmp_path / "other-pki")
    untrusted = scram_command_config(tmp_path / "untrusted.properties", other.ca, "admin", "admin-scram")
    r = strata_run("acl", "list", "--bootstrap", b.tls_bootstrap, "--command-config", str(untrusted))
    err = r.stderr.decode()
    # (The other CA has the same name, so rustls sees a bad signature, not an unknown issuer.)
    assert r.returncode != 0 and "TLS" in err and "certificate is not accepted" in err, err
    assert "ssl.truststore.location" in err and "panicked" not in err
    # A setting the client cannot honour is refused before connecting, naming its key.
    jks = tmp_path / "jks.properties"
    jks.write_text(cc.read_text().replace("ssl.truststore.type=PEM", "ssl.truststore.type=JKS"))
    r = strata_run("topic", "list", "--bootstrap", b.tls_bootstrap, "--command-config", str(jks))
    err = r.stderr.decode()
    assert r.returncode != 0 and "ssl.truststore.type=JKS" in err and "panicked" not in err, err
    assert "panicked" not in b.log_path.read_text(errors="replace")
