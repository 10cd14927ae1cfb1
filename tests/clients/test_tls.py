"""TLS listeners (rustls): kcat, confluent-kafka, kafka-python and the Java client over SSL
and over mutual TLS, a PLAINTEXT and an SSL listener at once, certificates reloaded without a
restart, and clients speaking the wrong protocol refused. The CA, server and client
certificates are made in each test with `openssl`."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

import kproto
from harness import REPO_ROOT, broker_kind, free_port

pytestmark = [
    pytest.mark.skipif(broker_kind() != "strata", reason="strata's listener settings"),
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed"),
]

RUN_CLASS = REPO_ROOT / "tests" / "kafka" / "run-class.sh"
KAFKA_LIB = REPO_ROOT / "tests" / "kafka" / "lib"


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()


class Pki:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate
    (CN=client,O=test), all keys PKCS#8 PEM."""

    def __init__(self, root: Path):
        self.dir = root
        root.mkdir(parents=True, exist_ok=True)
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                "-days", "2", "-subj", "/O=test/CN=Test CA", cwd=root)
        self.ca = root / "ca.pem"
        self.server_cert, self.server_key = self.issue("server", "/O=test/CN=localhost", serial=0x1001,
                                                       san="IP:127.0.0.1,DNS:localhost")
        self.client_cert, self.client_key = self.issue("client", "/O=test/CN=client", serial=0x2001)

    def issue(self, name: str, subject: str, serial: int, san: str | None = None,
              ca: str = "ca") -> tuple[Path, Path]:
        d = self.dir
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key", cwd=d)
        openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
                "-set_serial", str(serial), "-days", "2", "-out", f"{name}.pem", "-extfile", str(ext), cwd=d)
        return d / f"{name}.pem", d / f"{name}.key"

    def keystore(self) -> Path:
        """The client's key then certificate in one PEM file (Java's PEM keystore)."""
        path = self.dir / "client-keystore.pem"
        path.write_text(self.client_key.read_text() + self.client_cert.read_text())
        return path


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path / "pki")


def tls_broker(broker_factory, monkeypatch, pki: Pki, client_auth: str = "none", **env: str):
    """A broker with a PLAINTEXT listener (the harness's readiness probe) and an SSL one."""
    plain, secure = free_port(), free_port()
    monkeypatch.setenv("STRATA_SSL_CERTIFICATE_LOCATION", str(pki.server_cert))
    monkeypatch.setenv("STRATA_SSL_KEY_LOCATION", str(pki.server_key))
    monkeypatch.setenv("STRATA_SSL_TRUSTSTORE_LOCATION", str(pki.ca))
    monkeypatch.setenv("STRATA_SSL_CLIENT_AUTH", client_auth)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    b = broker_factory(port=plain, extra_args=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{secure}"])
    b.ssl_port = secure
    b.ssl_bootstrap = f"127.0.0.1:{secure}"
    return b


def librdkafka_ssl(pki: Pki, with_cert: bool) -> dict:
    conf = {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca)}
    if with_cert:
        conf |= {"ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
    return conf


def confluent_round_trip(bootstrap: str, topic: str, conf: dict, n: int = 50) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=f"{topic}-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", **conf})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m.value().decode())
    c.close()
    assert got == [f"{topic}-{i}" for i in range(n)]


def kcat_round_trip(bootstrap: str, topic: str, args: list[str]) -> None:
    lines = "".join(f"kcat-{i}\n" for i in range(20))
    r = subprocess.run(["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", "-X", "acks=all", *args],
                       input=lines.encode(), capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q", *args],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode() == lines


def kafka_python_round_trip(bootstrap: str, topic: str, pki: Pki, with_cert: bool) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    conf = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca)}
    if with_cert:
        conf |= {"ssl_certfile": str(pki.client_cert), "ssl_keyfile": str(pki.client_key)}
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
    for i in range(20):
        p.send(topic, value=f"kp-{i}".encode(), partition=0).get(timeout=30)
    p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000, **conf)
    c.assign([KTP(topic, 0)])
    c.seek_to_beginning()
    got = [m.value.decode() for m in c]
    c.close()
    assert got[:20] == [f"kp-{i}" for i in range(20)]


def java_round_trip(bootstrap: str, topic: str, pki: Pki, with_cert: bool, tmp: Path) -> None:
    """Kafka's own ProducerPerformance and ConsumerPerformance (the Java client 4.1) with the
    SSL settings in their config file."""
    if shutil.which("java") is None or not list(KAFKA_LIB.glob("kafka-clients-*.jar")):
        reason = "java or the Kafka jars (tests/fetch-jars.sh kafka) missing"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    props = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}"]
    if with_cert:
        props += ["ssl.keystore.type=PEM", f"ssl.keystore.location={pki.keystore()}"]
    config = tmp / f"java-{topic}.properties"
    config.write_text("\n".join(props) + "\n")
    r = subprocess.run([str(RUN_CLASS), "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                        "--num-records", "2000", "--record-size", "100", "--throughput", "-1",
                        "--producer.config", str(config),
                        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all"],
                       capture_output=True, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and "2000 records sent" in out, out[-3000:]
    r = subprocess.run([str(RUN_CLASS), "org.apache.kafka.tools.ConsumerPerformance", "--topic", topic,
                        "--bootstrap-server", bootstrap, "--messages", "2000", "--timeout", "60000",
                        "--consumer.config", str(config)],
                       capture_output=True, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-3000:]
    # The data line: start, end, MB, MB/s, records, ... (records is the fifth field).
    data = [line for line in r.stdout.decode().splitlines() if line[:1].isdigit()]
    assert data and int(data[-1].split(",")[4].strip()) == 2000, out[-3000:]


def served_certificate_serial(port: int) -> int:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as s:
            der = s.getpeercert(binary_form=True)
    pem = ssl.DER_cert_to_PEM_cert(der)
    r = subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem.encode(), capture_output=True, timeout=30)
    return int(r.stdout.decode().strip().split("=")[1], 16)


def test_ssl_listener_serves_every_client(broker_factory, monkeypatch, pki, tmp_path):
    """Proves one broker serving a PLAINTEXT and an SSL listener at once: kcat,
    confluent-kafka, kafka-python and the Java client each produce and consume over SSL
    (verifying the server against the test CA), and a plaintext client keeps working beside."""
    b = tls_broker(broker_factory, monkeypatch, pki)
    if shutil.which("kcat"):
        kcat_round_trip(b.ssl_bootstrap, "tls-kcat", ["-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca}"])
    confluent_round_trip(b.ssl_bootstrap, "tls-confluent", librdkafka_ssl(pki, with_cert=False))
    kafka_python_round_trip(b.ssl_bootstrap, "tls-kafka-python", pki, with_cert=False)
    java_round_trip(b.ssl_bootstrap, "tls-java", pki, with_cert=False, tmp=tmp_path)
    confluent_round_trip(b.bootstrap, "plain-beside-tls", {})
    # Metadata on the SSL listener names the SSL port; on the PLAINTEXT one, the plaintext port.
    md = AdminClient({"bootstrap.servers": b.ssl_bootstrap, **librdkafka_ssl(pki, False)}).list_topics(timeout=10)
    assert [(x.host, x.port) for x in md.brokers.values()] == [("127.0.0.1", b.ssl_port)]


def test_mutual_tls_required(broker_factory, monkeypatch, pki, tmp_path):
    """Proves ssl_client_auth=required: every client with the CA-signed client certificate is
    served (kcat, confluent-kafka, kafka-python, Java), its principal is the certificate's
    subject as Kafka formats it (`User:CN=client,O=test`); a client without a certificate, or
    with one from another CA, is refused at the handshake and nothing is served."""
    b = tls_broker(broker_factory, monkeypatch, pki, client_auth="required",
                   STRATA_LOG="info,strata::server::tls=debug")
    if shutil.which("kcat"):
        kcat_round_trip(b.ssl_bootstrap, "mtls-kcat", [
            "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca}",
            "-X", f"ssl.certificate.location={pki.client_cert}", "-X", f"ssl.key.location={pki.client_key}"])
    confluent_round_trip(b.ssl_bootstrap, "mtls-confluent", librdkafka_ssl(pki, with_cert=True))
    kafka_python_round_trip(b.ssl_bootstrap, "mtls-kafka-python", pki, with_cert=True)
    java_round_trip(b.ssl_bootstrap, "mtls-java", pki, with_cert=True, tmp=tmp_path)
    assert "principal=User:CN=client,O=test" in b.log_path.read_text()

    # Without a certificate: the handshake fails, no metadata comes back.
    admin = AdminClient({"bootstrap.servers": b.ssl_bootstrap, **librdkafka_ssl(pki, with_cert=False)})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    if shutil.which("kcat"):
        r = subprocess.run(["kcat", "-L", "-b", b.ssl_bootstrap, "-X", "security.protocol=ssl",
                            "-X", f"ssl.ca.location={pki.ca}", "-m", "5"], capture_output=True, timeout=60)
        assert r.returncode != 0
    # A certificate from another CA.
    other = Pki(tmp_path / "other-pki")
    conf = {"security.protocol": "ssl", "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(other.client_cert), "ssl.key.location": str(other.client_key)}
    with pytest.raises(KafkaException):
        AdminClient({"bootstrap.servers": b.ssl_bootstrap, **conf}).list_topics(timeout=5)
    assert "TLS handshake failed" in b.log_path.read_text()


def test_certificates_reload_without_restart(broker_factory, monkeypatch, pki):
    """Proves certificate reload: the server certificate and key files are replaced while the
    broker runs, and a new connection (after the 1 s check interval) is served the new
    certificate's serial; a broken replacement is refused with an error logged, and the last
    good certificate stays in use."""
    b = tls_broker(broker_factory, monkeypatch, pki)
    assert served_certificate_serial(b.ssl_port) == 0x1001
    cert, key = pki.issue("server2", "/O=test/CN=localhost", serial=0x1002, san="IP:127.0.0.1,DNS:localhost")
    # Replace by rename, as cert managers do, so no reader sees half a file.
    staged_key = pki.server_key.with_suffix(".key.new")
    staged_key.write_bytes(key.read_bytes())
    staged_cert = pki.server_cert.with_suffix(".pem.new")
    staged_cert.write_bytes(cert.read_bytes())
    os.replace(staged_key, pki.server_key)
    os.replace(staged_cert, pki.server_cert)
    deadline = time.monotonic() + 15
    while served_certificate_serial(b.ssl_port) != 0x1002:
        assert time.monotonic() < deadline, "the new certificate was never served"
        time.sleep(0.3)
    confluent_round_trip(b.ssl_bootstrap, "after-reload", librdkafka_ssl(pki, with_cert=False), n=5)
    # Each shard reloads on its own, on its next accept (src/server/tls.rs), and the kernel
    # picks the shard of a connection: accept until every shard has logged its reload, or a
    # shard that accepted nothing since the change would still hold 0x1001 when the broken
    # file below comes, and rightly keep it.
    deadline = time.monotonic() + 30
    while len(set(re.findall(r"TLS certificates reloaded shard=(\d+)", b.log_path.read_text()))) < b.shards:
        assert time.monotonic() < deadline, "not every shard reloaded the new certificate"
        served_certificate_serial(b.ssl_port)  # one more accept (a shard checks once a second)
        time.sleep(0.2)

    pki.server_cert.write_text("not a certificate\n")
    time.sleep(1.5)
    for _ in range(3):
        assert served_certificate_serial(b.ssl_port) == 0x1002
    log = b.log_path.read_text()
    assert "TLS certificates changed but cannot be loaded" in log, log[-3000:]


def test_wrong_protocol_refused(broker_factory, monkeypatch, pki):
    """Proves a cleartext Kafka client on the SSL port and a TLS client on the PLAINTEXT port
    each get their connection closed with a clear log line, nothing served, the broker
    unharmed."""
    b = tls_broker(broker_factory, monkeypatch, pki)
    with pytest.raises((OSError, kproto.ProtocolError)):
        kproto.api_versions(b.ssl_bootstrap, timeout_s=5)
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", b.port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                s.recv(1)
    time.sleep(0.5)
    log = b.log_path.read_text()
    assert "not TLS" in log and "cleartext" in log, log[-3000:]
    assert "TLS client on a plaintext listener" in log, log[-3000:]
    assert "panicked" not in log
    kproto.api_versions(b.bootstrap)
    assert served_certificate_serial(b.ssl_port) == 0x1001


def ssl_failures(metrics_port: int) -> dict[str, float]:
    """strata_authentication_failures_total per listener/mechanism (non-zero only)."""
    import re
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^strata_authentication_failures_total\{listener="([^"]+)",mechanism="([^"]+)"\} (\S+)$',
                         text, re.M):
        if float(m.group(3)):
            out[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3))
    return out


def test_tls_failures_are_counted_per_listener(broker_factory, monkeypatch, pki):
    """Proves failed TLS authentications are counted by listener under mechanism `SSL`
    (strata_authentication_failures_total): with ssl_client_auth=required, a cleartext client
    on the SSL port and a TLS client without a certificate count one each; a client with
    the certificate and a plaintext client on PLAINTEXT count nothing."""
    metrics_port = free_port()
    monkeypatch.setenv("STRATA_METRICS_LISTEN", f"127.0.0.1:{metrics_port}")
    b = tls_broker(broker_factory, monkeypatch, pki, client_auth="required")
    kproto.api_versions(b.bootstrap)
    ctx = ssl.create_default_context(cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with socket.create_connection(("127.0.0.1", b.ssl_port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(kproto.request(18, 0, 1, b""))
            assert kproto.recv_response(s)[0] == 1
    assert ssl_failures(metrics_port) == {}
    with pytest.raises((OSError, kproto.ProtocolError)):
        kproto.api_versions(b.ssl_bootstrap, timeout_s=5)
    no_cert = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", b.ssl_port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, OSError)):
            with no_cert.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(kproto.request(18, 0, 1, b""))
                kproto.recv_response(s)
    deadline = time.monotonic() + 10
    while ssl_failures(metrics_port) != {"SSL/SSL": 2} and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ssl_failures(metrics_port) == {"SSL/SSL": 2}


def test_cli_command_config_mutual_tls(broker_factory, monkeypatch, pki, tmp_path):
    """Proves the strata CLI's --command-config on an SSL listener with ssl_client_auth=required:
    with the client certificate in a PEM keystore (Kafka's ssl.keystore.location) or split
    librdkafka-style (ssl.certificate.location + ssl.key.location), `topic create/list`,
    `acl add/list` and `user scram set/list` run as the certificate's principal (a super
    user); without a certificate, or trusting another CA, the CLI fails with a message that
    names the TLS cause, and the broker serves nothing."""
    from harness import strata_bin
    b = tls_broker(broker_factory, monkeypatch, pki, client_auth="required",
                   STRATA_AUTHORIZER="acl", STRATA_SUPER_USERS="User:CN=client,O=test",
                   STRATA_LOG="info,strata::server::tls=debug")
    trust = f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\n"
    keystore = tmp_path / "keystore.properties"
    keystore.write_text(trust + f"ssl.keystore.type=PEM\nssl.keystore.location={pki.keystore()}\n")
    split = tmp_path / "split.properties"
    split.write_text(f"security.protocol=ssl\nssl.ca.location={pki.ca}\n"
                     f"ssl.certificate.location={pki.client_cert}\nssl.key.location={pki.client_key}\n")

    def strata(cc: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([str(strata_bin()), *args, "--bootstrap", b.ssl_bootstrap, "--command-config", str(cc)],
                           capture_output=True, timeout=60)
        if ok:
            assert r.returncode == 0, f"strata {' '.join(args)}: {r.stdout.decode()}{r.stderr.decode()}"
        assert "panicked" not in r.stderr.decode()
        return r

    strata(keystore, "topic", "create", "cc-mtls", "--partitions", "1")
    assert "cc-mtls" in strata(split, "topic", "list").stdout.decode()
    strata(keystore, "acl", "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "cc-mtls")
    rows = [line.split() for line in strata(split, "acl", "list").stdout.decode().splitlines()[1:]]
    assert rows == [["TOPIC", "cc-mtls", "LITERAL", "User:alice", "*", "WRITE", "ALLOW"]], rows
    strata(keystore, "user", "scram", "set", "--user", "dave", "--password", "dave-pw", "--mechanism", "SCRAM-SHA-256")
    assert "dave" in strata(split, "user", "scram", "list").stdout.decode()
    assert "principal=User:CN=client,O=test" in b.log_path.read_text()

    # No client certificate: the broker refuses the handshake and the CLI says so.
    bare = tmp_path / "bare.properties"
    bare.write_text(trust)
    err = strata(bare, "topic", "list", ok=False).stderr.decode()
    assert "TLS" in err and "refused the handshake" in err, err
    # The broker's certificate checked against another CA.
    other = Pki(tmp_path / "other-pki")
    untrusted = tmp_path / "untrusted.properties"
    untrusted.write_text(keystore.read_text().replace(str(pki.ca), str(other.ca)))
    err = strata(untrusted, "topic", "list", ok=False).stderr.decode()
    assert "certificate is not accepted" in err and "ssl.truststore.location" in err, err


def test_cli_command_config_host_name_check(broker_factory, monkeypatch, pki, tmp_path):
    """Proves the CLI checks the broker certificate's name against the host it connects to
    (Kafka's default ssl.endpoint.identification.algorithm=https) and skips only that check,
    not the CA's, when the setting is empty."""
    from harness import strata_bin
    pki.server_cert, pki.server_key = pki.issue("elsewhere", "/O=test/CN=elsewhere", serial=0x1002,
                                                san="DNS:broker.invalid")
    b = tls_broker(broker_factory, monkeypatch, pki)
    cc = tmp_path / "client.properties"

    def topic_list(text: str) -> subprocess.CompletedProcess:
        cc.write_text(text)
        r = subprocess.run([str(strata_bin()), "topic", "list", "--bootstrap", b.ssl_bootstrap,
                            "--command-config", str(cc)], capture_output=True, timeout=60)
        assert "panicked" not in r.stderr.decode()
        return r

    trust = f"security.protocol=SSL\nssl.ca.location={pki.ca}\n"
    r = topic_list(trust)
    assert r.returncode != 0 and "not for the host" in r.stderr.decode(), r.stderr.decode()
    r = topic_list(trust + "ssl.endpoint.identification.algorithm=\n")
    assert r.returncode == 0, r.stderr.decode()
    other = Pki(tmp_path / "other-pki")
    r = topic_list(f"security.protocol=SSL\nssl.ca.location={other.ca}\nssl.endpoint.identification.algorithm=\n")
    assert r.returncode != 0 and "certificate is not accepted" in r.stderr.decode(), r.stderr.decode()
