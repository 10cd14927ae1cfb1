"""Inter-broker security (issue 15): a three-node cluster whose only listeners are SASL_SSL,
with the ACL authorizer, `allow_everyone_if_no_acl_found = false` and `super_users =
User:admin;User:broker`. The brokers reach each other on that listener as Kafka's do: TLS
checked against the CA, then SASL as `broker` (PLAIN, or SCRAM whose credential is created
through the admin API once the cluster runs). So:

- an acks=all produce by admin to an RF3 topic succeeds, and every replica stays in the ISR
  (followers fetch, authorized as User:broker with CLUSTER_ACTION);
- alice, allowed to READ the topic but no super user, claiming replica id 1 in a raw Fetch is
  refused as Kafka refuses it (TOPIC_AUTHORIZATION_FAILED, no records), while her consumer
  fetch reads;
- a broker with a wrong inter-broker password never gets its followers into the ISR, and says
  why in its log (an authentication error naming the user, never the password);
- with `controller_listener_security_protocol = SASL_SSL`, the controller quorum's port takes
  only TLS connections that log in as a broker principal: the quorum elects, creates topics and
  survives a kill -9 of its active controller, while a raw plaintext client, a TLS client with
  a wrong password and a TLS client logged in as a non-broker user are closed unserved;
- with `SSL`, the nodes show each other their certificates (mTLS, the certificate's principal a
  super user), and a TLS client without one is closed unserved.
- certificate files rotated to a new CA while the brokers run are used by their connections
  to each other without a restart, as by their listeners, on the inter-broker listener and on
  the controller quorum's port alike;
- with an SSL-only listener and `ssl_client_auth = required` (no SASL at all), the brokers
  replicate as their certificate's principal (a super user), a client's certificate for
  another name cannot claim a replica id, and a TLS client without a certificate is refused.

The certificates are made with `openssl` (one broker certificate for 127.0.0.1, the nodes'
loopback address)."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, NewTopic,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo,
                                   ScramMechanism, UserScramCredentialUpsertion)

from harness import Cluster, require_cluster_support
import kproto  # after harness, which puts tests/clients on sys.path

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed"),
]

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BROKER_PASSWORD = "broker-Secret-4711"
WRONG_PASSWORD = "not-the-broker-Secret-0815"
TOPIC = "secured"
RECORDS = 200

TOPIC_AUTHORIZATION_FAILED = 29
API_FETCH = 1
API_API_VERSIONS = 18


def openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr.decode()


def make_pki(d: Path) -> dict[str, Path]:
    """A CA and one broker certificate for 127.0.0.1 (PKCS#8 key)."""
    d.mkdir(parents=True, exist_ok=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/O=test/CN=Test CA", cwd=d)
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "broker.key", cwd=d)
    openssl("req", "-new", "-key", "broker.key", "-out", "broker.csr", "-subj", "/O=test/CN=broker", cwd=d)
    (d / "broker.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "4097",
            "-days", "2", "-out", "broker.pem", "-extfile", "broker.ext", cwd=d)
    return {"ca": d / "ca.pem", "cert": d / "broker.pem", "key": d / "broker.key"}


def tls_socket(address: str, ca: Path, timeout_s: float = 10.0) -> ssl.SSLSocket:
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock = ctx.wrap_socket(raw, server_hostname=host)
    sock.settimeout(timeout_s)
    return sock


def tls_probe(ca: Path):
    """Node.probe for a SASL_SSL-only node: ApiVersions v0 over TLS (allowed before SASL)."""
    def probe(address: str) -> None:
        with tls_socket(address, ca, 2.0) as sock:
            sock.sendall(kproto.request(API_API_VERSIONS, 0, 7, b""))
            _, body = kproto.recv_response(sock)
        assert struct.unpack(">h", body[:2])[0] == 0
    return probe


def sasl_ssl_socket(address: str, ca: Path, who) -> ssl.SSLSocket:
    """A raw TLS connection authenticated with SaslHandshake v1 + SaslAuthenticate v1 (PLAIN)."""
    sock = tls_socket(address, ca)
    kproto.sasl_plain_login(sock, *who)
    return sock


def raw_fetch(address: str, ca: Path, who, replica_id: int) -> tuple[int, bytes]:
    """One Fetch v4 of partition 0 from offset 0 as `who`, claiming `replica_id`: (error, records)."""
    body = kproto.fetch_v4_body(TOPIC, 0, 0, 1 << 20, 1 << 20)
    with sasl_ssl_socket(address, ca, who) as sock:
        sock.sendall(kproto.request(API_FETCH, 4, 3, struct.pack(">i", replica_id) + body[4:]))
        _, resp = kproto.recv_response(sock)
    [(_, _, err, _, records)] = kproto.parse_fetch_v4(resp)
    return err, records


def client_conf(ca: Path, who) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca), "sasl.mechanisms": "PLAIN",
            "sasl.username": who[0], "sasl.password": who[1]}


def secured_cluster(cluster_factory, tmp_path: Path, mechanism: str = "PLAIN",
                    passwords: dict[int, str] | None = None,
                    controller_protocol: str | None = None,
                    extra_env: dict[str, str] | None = None) -> tuple[Cluster, dict[str, Path]]:
    """Three nodes, SASL_SSL only, ACLs on; node n logs in to the others as `broker` with
    passwords.get(n, BROKER_PASSWORD). Started, all registered."""
    pki = make_pki(tmp_path / "pki")
    env = {
        "STRATA_SSL_CERTIFICATE_LOCATION": str(pki["cert"]),
        "STRATA_SSL_KEY_LOCATION": str(pki["key"]),
        "STRATA_SSL_TRUSTSTORE_LOCATION": str(pki["ca"]),
        "STRATA_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256",
        # With SCRAM, `broker` is no PLAIN user: its credential is made by the admin API.
        "STRATA_SASL_PLAIN_USERS": ",".join(f"{u}:{p}" for u, p in [ADMIN, ALICE]
                                            + ([("broker", BROKER_PASSWORD)] if mechanism == "PLAIN" else [])),
        "STRATA_SASL_MECHANISM_INTER_BROKER_PROTOCOL": mechanism,
        "STRATA_INTER_BROKER_SASL_USERNAME": "broker",
        "STRATA_AUTHORIZER": "acl",
        "STRATA_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false",
        "STRATA_SUPER_USERS": "User:admin;User:broker",
    }
    if controller_protocol is not None:
        env["STRATA_CONTROLLER_LISTENER_SECURITY_PROTOCOL"] = controller_protocol
    env.update(extra_env or {})
    require_cluster_support()
    c: Cluster = cluster_factory(start=False, env=env)
    c.client_conf = client_conf(pki["ca"], ADMIN)
    for n, node in c.nodes.items():
        node.listeners = f"SASL_SSL://{node.address}"
        node.env["STRATA_INTER_BROKER_SASL_PASSWORD"] = (passwords or {}).get(n, BROKER_PASSWORD)
        node.probe = tls_probe(pki["ca"])
    c.start()
    return c, pki


def create_topic(c: Cluster, partitions: int = 1) -> None:
    admin = c.admin()  # kept: a collected client cancels its futures
    for f in admin.create_topics([NewTopic(TOPIC, partitions, 3)]).values():
        f.result(30)


def isr(c: Cluster, partition: int = 0) -> list[int]:
    p = c.partitions(TOPIC)[partition]
    return sorted(p.isrs) if p.error is None and p.leader > 0 else []


def produce(c: Cluster, ca: Path, partitions: tuple[int, ...] = (0,)) -> None:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.timeout.ms": 30000,
                  **client_conf(ca, ADMIN)})
    failed = []
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=partitions[i % len(partitions)],
                  on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert p.flush(60) == 0
    assert not failed, failed[:3]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_followers_replicate_as_broker_and_no_client_can_claim_a_replica_id(cluster_factory, tmp_path, mechanism):
    c, pki = secured_cluster(cluster_factory, tmp_path, mechanism)
    if mechanism != "PLAIN":
        # The credential travels in the metadata log, which the controller quorum carries on
        # its own port: every broker learns it, and the fetchers' retries log in.
        upsert = UserScramCredentialUpsertion("broker", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              BROKER_PASSWORD.encode())
        admin = c.admin()  # kept: a collected client cancels its futures
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(30)
    create_topic(c)
    c.poll_until("full ISR", lambda: isr(c) == [1, 2, 3], 30)
    produce(c, pki["ca"])
    # Two lag windows after the produce: a follower that could not fetch would be out by now.
    time.sleep(2 * 3.0 + 1)
    # Polled, not read once: a follower that was only slow for a moment (three TLS brokers
    # on two cores) comes back; one that cannot fetch never does.
    c.poll_until("ISR still full", lambda: isr(c) == [1, 2, 3], 30)
    leader = c.partitions(TOPIC)[0].leader

    # alice may read the topic, and does, as a consumer; as "replica 1" she is refused.
    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin = c.admin()
    for f in admin.create_acls([binding]).values():
        f.result(30)
    address = c.nodes[leader].address
    err, records = c.poll_until("alice reads", lambda: (lambda r: r if r[0] == 0 else None)(
        raw_fetch(address, pki["ca"], ALICE, -1)), 15)
    assert records, "a consumer fetch of a produced partition carried nothing"
    err, records = raw_fetch(address, pki["ca"], ALICE, 1)
    assert (err, records) == (TOPIC_AUTHORIZATION_FAILED, b"")

    for n, node in c.nodes.items():
        log = node.log_path.read_text(errors="replace")
        assert "cannot connect: TLS" not in log, (n, node.log_tail())
        # (With SCRAM a fetcher may race the credential's record to a leader and retry.)
        assert mechanism != "PLAIN" or "cannot connect: SASL" not in log, (n, node.log_tail())
        assert BROKER_PASSWORD not in log


def test_wrong_inter_broker_password_keeps_followers_out_and_is_logged(cluster_factory, tmp_path):
    c, pki = secured_cluster(cluster_factory, tmp_path, passwords={3: WRONG_PASSWORD})
    # Three partitions, leaders spread: where node 3 follows, it cannot log in to the leader
    # and falls out of the ISR; where it leads, nodes 1 and 2 follow it as usual.
    create_topic(c, partitions=3)
    parts = c.wait_topic(TOPIC, 3)
    followed = tuple(i for i, p in parts.items() if p.leader != 3)
    assert followed, parts
    c.poll_until("node 3 out of the ISRs it follows in",
                 lambda: all(isr(c, i) == [1, 2] for i in followed), 30)
    produce(c, pki["ca"], followed)  # acks=all with min.insync.replicas=2: the other follows
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert all(3 not in isr(c, i) for i in followed), "node 3 joined an ISR without valid credentials"
        time.sleep(0.5)

    log3 = c.nodes[3].log_path.read_text(errors="replace")
    lines = [line for line in log3.splitlines() if "replica fetcher cannot connect" in line]
    assert lines, c.nodes[3].log_tail()
    assert "SASL authentication with" in lines[0] and "as broker" in lines[0], lines[0]
    assert WRONG_PASSWORD not in log3 and BROKER_PASSWORD not in log3
    # The leader refused it, and says so without the password either.
    log1 = c.nodes[1].log_path.read_text(errors="replace")
    assert "SASL authentication failed" in log1, c.nodes[1].log_tail()
    assert WRONG_PASSWORD not in log1


# The controller quorum's frames (src/cluster/raft/transport.rs, secure.rs): [u32 LE length]
# [u8 kind][payload]. An observer's Fetch of the metadata log is answered by a FetchReply on
# the same connection; the SASL exchange comes first on a SASL port.
KIND_FETCH = 4
KIND_FETCH_REPLY = 5
KIND_SASL = 7
KIND_SASL_REPLY = 8
SASL_DONE = 0
SASL_REFUSED = 2


def quorum_frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IB", len(payload), kind) + payload


def read_quorum_frame(sock) -> tuple[int, bytes] | None:
    """The next frame, or None when the connection is closed first."""
    def exactly(n: int) -> bytes | None:
        out = b""
        while len(out) < n:
            try:
                chunk = sock.recv(n - len(out))
            except (ConnectionError, ssl.SSLError):
                return None
            if not chunk:
                return None
            out += chunk
        return out
    header = exactly(5)
    if header is None:
        return None
    length, kind = struct.unpack("<IB", header)
    payload = exactly(length)
    return None if payload is None else (kind, payload)


def closed_unserved(sock) -> bool:
    """The peer closes without answering: nothing but (at most) a TLS alert comes back."""
    got = b""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except (ConnectionError, ssl.SSLError):
            break
        except socket.timeout:
            return False  # still open, not closed
        if not chunk:
            break
        got += chunk
    return got == b"" or got[0] == 0x15  # 0x15: a TLS alert record


def quorum_login(address: str, ca: Path, user: str, password: str):
    """A TLS connection to a controller port that sends a PLAIN login: (socket, reply)."""
    sock = tls_socket(address, ca)
    sock.sendall(quorum_frame(KIND_SASL, b"\0" + user.encode() + b"\0" + password.encode()))
    return sock, read_quorum_frame(sock)


def metadata_fetch(sock) -> tuple[int, bytes] | None:
    sock.sendall(quorum_frame(KIND_FETCH, struct.pack("<Q", 1)))
    return read_quorum_frame(sock)


def cluster_state(c: Cluster) -> tuple:
    md = c.metadata()
    return sorted(md.brokers), sorted(t for t in md.topics if not t.startswith("__"))


def test_controller_listener_sasl_ssl_elects_survives_kill_and_refuses_strangers(cluster_factory, tmp_path):
    c, pki = secured_cluster(cluster_factory, tmp_path, controller_protocol="SASL_SSL")
    create_topic(c)
    c.poll_until("full ISR", lambda: isr(c) == [1, 2, 3], 30)
    produce(c, pki["ca"])
    cid = c.controller_id()
    port = c.nodes[cid].controller_address
    before = cluster_state(c)

    # The test speaks the protocol right: a broker's login is served (a metadata log fetch).
    sock, reply = quorum_login(port, pki["ca"], "broker", BROKER_PASSWORD)
    with sock:
        assert reply is not None and reply[0] == KIND_SASL_REPLY and reply[1][:1] == bytes([SASL_DONE]), reply
        answer = metadata_fetch(sock)
        assert answer is not None and answer[0] == KIND_FETCH_REPLY, answer

    # A raw plaintext client: its bytes are no TLS handshake; closed, nothing served.
    host, port_number = port.rsplit(":", 1)
    with socket.create_connection((host, int(port_number)), timeout=10) as raw:
        raw.sendall(quorum_frame(KIND_FETCH, struct.pack("<Q", 1)))
        assert closed_unserved(raw)
    # TLS with a wrong password, and TLS as a valid user who is no broker: refused, closed.
    for user, password in [("broker", WRONG_PASSWORD), ALICE]:
        sock, reply = quorum_login(port, pki["ca"], user, password)
        with sock:
            assert reply is not None and reply[0] == KIND_SASL_REPLY, reply
            assert reply[1][:1] == bytes([SASL_REFUSED]), reply
            try:
                sock.sendall(quorum_frame(KIND_FETCH, struct.pack("<Q", 1)))
            except (ConnectionError, ssl.SSLError):
                pass
            assert closed_unserved(sock)
    assert cluster_state(c) == before
    log = c.nodes[cid].log_path.read_text(errors="replace")
    assert "controller listener (SASL_SSL): connection refused" in log, c.nodes[cid].log_tail()
    assert WRONG_PASSWORD not in log and ALICE[1] not in log and BROKER_PASSWORD not in log
    for n, node in c.nodes.items():
        assert "cannot connect to the controller quorum's port" not in node.log_path.read_text(errors="replace"), \
            (n, node.log_tail())

    # kill -9 of the active controller: another is elected over the secured port, topics are
    # created, and produce and consume go on.
    c.kill9(cid)
    new = c.controller_id(not_on=cid)
    assert new != cid
    c.create_topic("after-kill", 1, 2, full_isr=False)
    produce(c, pki["ca"])
    consumer = Consumer({"bootstrap.servers": c.live_bootstrap(), "group.id": "after-kill",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **client_conf(pki["ca"], ADMIN)})
    try:
        consumer.subscribe([TOPIC])
        got = 0
        deadline = time.monotonic() + 60
        while got < 2 * RECORDS and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                got += 1
        assert got == 2 * RECORDS, got
    finally:
        consumer.close()


def test_controller_listener_ssl_needs_a_broker_certificate(cluster_factory, tmp_path):
    # The nodes' certificate maps to User:CN=broker,O=test (the DEFAULT mapping rule).
    c, pki = secured_cluster(cluster_factory, tmp_path, controller_protocol="SSL",
                             extra_env={"STRATA_SUPER_USERS": "User:admin;User:broker;User:CN=broker,O=test"})
    create_topic(c)
    c.poll_until("full ISR", lambda: isr(c) == [1, 2, 3], 30)
    cid = c.controller_id()
    before = cluster_state(c)
    try:
        sock = tls_socket(c.nodes[cid].controller_address, pki["ca"])
    except (ConnectionError, ssl.SSLError):
        pass  # refused during the handshake (TLS 1.2); with TLS 1.3 right after it
    else:
        with sock:
            try:
                sock.sendall(quorum_frame(KIND_FETCH, struct.pack("<Q", 1)))
            except (ConnectionError, ssl.SSLError):
                pass
            assert closed_unserved(sock)
    assert cluster_state(c) == before
    log = c.nodes[cid].log_path.read_text(errors="replace")
    assert "controller listener (SSL): connection refused" in log, c.nodes[cid].log_tail()
    for n, node in c.nodes.items():
        assert "cannot connect to the controller quorum's port" not in node.log_path.read_text(errors="replace"), \
            (n, node.log_tail())


def rotate_to_new_ca_while_node_3_is_down(c: Cluster, pki: dict[str, Path], tmp_path: Path) -> None:
    """Stops node 3, replaces the CA, certificate and key files every node uses by a new CA's
    (by rename, as certificate managers do) while nodes 1 and 2 run on, and restarts node 3 on
    them: it trusts only the new CA."""
    c.nodes[3].stop()
    new = make_pki(tmp_path / "pki2")
    for kind in ("key", "cert", "ca"):
        os.replace(new[kind], pki[kind])
    c.restart(3)


def test_inter_broker_certificates_reload_without_restart(cluster_factory, tmp_path):
    """Proves a broker's connections to the other brokers pick up rotated certificate files
    without a restart, as its listeners do: with node 3 stopped, the CA, certificate and key
    files all nodes use are replaced by a new CA's (the truststore then trusts only the new
    CA) while nodes 1 and 2 run on; node 3 starts on the new files. Nodes 1 and 2 follow the
    partitions node 3 leads over new connections to it, which serves the new CA's
    certificate: an acks=all produce to every partition succeeds and they stay in those ISRs
    only if their inter-broker TLS client reloaded its truststore, which their logs also
    say."""
    c, pki = secured_cluster(cluster_factory, tmp_path)
    rotate_to_new_ca_while_node_3_is_down(c, pki, tmp_path)
    create_topic(c, partitions=3)
    parts = c.wait_topic(TOPIC, 3)
    led_by_3 = [i for i, p in parts.items() if p.leader == 3]
    assert led_by_3, parts
    # A connection made in the second after a check may still use the old files (the check
    # interval), so a first failure is allowed: the followers retry.
    c.poll_until("full ISR of every partition", lambda: all(isr(c, i) == [1, 2, 3] for i in parts), 30)
    produce(c, pki["ca"], tuple(parts))
    # A new partition's ISR starts full: two lag windows after the produce, a follower that
    # could not fetch from node 3 would be out of it by now.
    time.sleep(2 * 3.0 + 1)
    c.poll_until("every ISR still full", lambda: all(isr(c, i) == [1, 2, 3] for i in parts), 30)
    for n in (1, 2):
        log = c.nodes[n].log_path.read_text(errors="replace")
        assert "inter-broker TLS certificates reloaded" in log, (n, c.nodes[n].log_tail())


def test_controller_port_certificates_reload_without_restart(cluster_factory, tmp_path):
    """Proves the controller quorum's port (SSL, mTLS) picks up rotated certificate files
    without a restart, on both its sides: with node 3 stopped, every node's CA, certificate and
    key files are replaced by a new CA's while nodes 1 and 2 run on; node 3 starts on the new
    files and trusts only the new CA. It can rejoin the quorum only if nodes 1 and 2 now serve
    the new certificate on their controller ports and accept its new one, and it then learns
    a topic created after its restart from the metadata log."""
    c, pki = secured_cluster(cluster_factory, tmp_path, controller_protocol="SSL",
                             extra_env={"STRATA_SUPER_USERS": "User:admin;User:broker;User:CN=broker,O=test"})
    rotate_to_new_ca_while_node_3_is_down(c, pki, tmp_path)
    create_topic(c, partitions=3)
    # The topic's replicas on node 3 exist only once node 3 has read its record from the
    # metadata log over the controller port; the full ISRs say they do and follow.
    c.poll_until("full ISR of every partition",
                 lambda: all(isr(c, i) == [1, 2, 3] for i in range(3)), 30)
    # The active controller talks to node 3 both ways: it dials it and is dialled by it.
    cid = c.controller_id()
    assert cid in (1, 2), cid
    log = c.nodes[cid].log_path.read_text(errors="replace")
    for side in ("controller listener", "controller quorum"):
        assert f"{side} TLS certificates reloaded" in log, (cid, c.nodes[cid].log_tail())


def make_client_cert(pki: dict[str, Path], name: str) -> dict[str, Path]:
    """A client certificate for CN=`name`,O=test signed by the test CA (PKCS#8 key)."""
    d = pki["ca"].parent
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", f"{name}.key", cwd=d)
    openssl("req", "-new", "-key", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/O=test/CN={name}", cwd=d)
    # An extension makes it an X.509 v3 certificate: webpki refuses v1.
    (d / f"{name}.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "4098",
            "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=d)
    return {"ca": pki["ca"], "cert": d / f"{name}.pem", "key": d / f"{name}.key"}


def mtls_socket(address: str, identity: dict[str, Path] | None, timeout_s: float = 10.0) -> ssl.SSLSocket:
    """A TLS connection offering `identity`'s certificate (None: none)."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(identity["ca"] if identity else MTLS_CA[0]))
    if identity is not None:
        ctx.load_cert_chain(str(identity["cert"]), str(identity["key"]))
    raw = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock = ctx.wrap_socket(raw, server_hostname=host)
    sock.settimeout(timeout_s)
    return sock


MTLS_CA: list[Path] = []  # the CA of the running mTLS test, for a client offering no certificate


def test_mtls_only_inter_broker_replicates_as_certificate_principal(cluster_factory, tmp_path):
    """Proves the brokers of a cluster whose only listener is SSL with required client
    certificates (no SASL configured) follow each other as their certificate's principal,
    User:CN=broker,O=test (a super user, the DEFAULT mapping rule): an RF3 acks=all produce
    succeeds and the ISR stays full. alice, whose certificate lets her READ the topic, reads
    as a consumer but is refused as "replica 1"; a TLS client that offers no certificate is
    closed without an answer."""
    pki = make_pki(tmp_path / "pki")
    MTLS_CA[:] = [pki["ca"]]
    alice = make_client_cert(pki, "alice")
    env = {
        "STRATA_SSL_CERTIFICATE_LOCATION": str(pki["cert"]),
        "STRATA_SSL_KEY_LOCATION": str(pki["key"]),
        "STRATA_SSL_TRUSTSTORE_LOCATION": str(pki["ca"]),
        "STRATA_SSL_CLIENT_AUTH": "required",
        "STRATA_AUTHORIZER": "acl",
        "STRATA_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "false",
        "STRATA_SUPER_USERS": "User:CN=broker,O=test",
    }
    require_cluster_support()
    c: Cluster = cluster_factory(start=False, env=env)
    # The test's admin is the brokers' own certificate: a super user.
    c.client_conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["ca"]),
                     "ssl.certificate.location": str(pki["cert"]), "ssl.key.location": str(pki["key"])}

    def probe(address: str) -> None:
        with mtls_socket(address, pki, 2.0) as sock:
            sock.sendall(kproto.request(API_API_VERSIONS, 0, 7, b""))
            _, body = kproto.recv_response(sock)
        assert struct.unpack(">h", body[:2])[0] == 0

    for node in c.nodes.values():
        node.listeners = f"SSL://{node.address}"
        node.probe = probe
    c.start()
    create_topic(c)
    c.poll_until("full ISR", lambda: isr(c) == [1, 2, 3], 30)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.timeout.ms": 30000,
                  **c.client_conf})
    failed = []
    for i in range(RECORDS):
        p.produce(TOPIC, value=f"v{i}".encode(), partition=0,
                  on_delivery=lambda err, _msg: err is not None and failed.append(err))
    assert p.flush(60) == 0
    assert not failed, failed[:3]
    time.sleep(2 * 3.0 + 1)  # two lag windows: a follower that could not fetch is out by now
    c.poll_until("ISR still full", lambda: isr(c) == [1, 2, 3], 30)

    binding = AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:CN=alice,O=test", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin = c.admin()  # kept: a collected client cancels its futures
    for f in admin.create_acls([binding]).values():
        f.result(30)
    address = c.nodes[c.partitions(TOPIC)[0].leader].address

    def fetch_as_alice(replica_id: int) -> tuple[int, bytes]:
        body = kproto.fetch_v4_body(TOPIC, 0, 0, 1 << 20, 1 << 20)
        with mtls_socket(address, alice) as sock:
            sock.sendall(kproto.request(API_FETCH, 4, 3, struct.pack(">i", replica_id) + body[4:]))
            _, resp = kproto.recv_response(sock)
        [(_, _, err, _, records)] = kproto.parse_fetch_v4(resp)
        return err, records

    err, records = c.poll_until("alice reads", lambda: (lambda r: r if r[0] == 0 else None)(fetch_as_alice(-1)), 15)
    assert records, "a consumer fetch of a produced partition carried nothing"
    assert fetch_as_alice(1) == (TOPIC_AUTHORIZATION_FAILED, b"")

    # No certificate: refused in the handshake (TLS 1.2) or right after it (TLS 1.3).
    try:
        sock = mtls_socket(address, None)
    except (ConnectionError, ssl.SSLError):
        pass
    else:
        with sock:
            try:
                sock.sendall(kproto.request(API_API_VERSIONS, 0, 7, b""))
            except (ConnectionError, ssl.SSLError):
                pass
            assert closed_unserved(sock)
    for n, node in c.nodes.items():
        assert "cannot connect: TLS" not in node.log_path.read_text(errors="replace"), (n, node.log_tail())
