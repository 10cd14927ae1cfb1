"""ACL authorization (issue 15) with real clients over SASL_PLAINTEXT: a broker with
`authorizer = "acl"` and `super_users = "User:admin"`. kafka-python's and confluent-kafka's
admin clients create, describe and delete ACLs; alice, with no ACL, is refused with Kafka's
codes (TOPIC_AUTHORIZATION_FAILED producing and consuming, GROUP_AUTHORIZATION_FAILED in a
group, CLUSTER_AUTHORIZATION_FAILED creating ACLs: she cannot grant herself any) and sees no
topic in Metadata; once granted (a prefixed pattern, and a DENY that wins over it) she can do
exactly what she was granted. A client claiming a follower's replica id is refused. ACLs live
in the metadata log and survive a restart; `strata acl add|list|remove` and kcat round trip."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType)

import kproto
from harness import free_port, strata_bin

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
TIMEOUT_S = 60

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31

API_FETCH = 1


@pytest.fixture
def acl_broker(monkeypatch, broker_factory):
    """A SASL_PLAINTEXT broker with the ACL authorizer, admin a super user, static PLAIN
    users admin and alice."""
    monkeypatch.setenv("STRATA_SASL_PLAIN_USERS", f"{ADMIN[0]}:{ADMIN[1]},{ALICE[0]}:{ALICE[1]}")
    monkeypatch.setenv("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN,SCRAM-SHA-512")
    monkeypatch.setenv("STRATA_AUTHORIZER", "acl")
    monkeypatch.setenv("STRATA_SUPER_USERS", "User:admin")
    port = free_port()
    return broker_factory(port=port, extra_args=["--listeners", f"SASL_PLAINTEXT://127.0.0.1:{port}"])


def conf(bootstrap: str, who: tuple[str, str]) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": who[0], "sasl.password": who[1]}


def kp_conf(bootstrap: str, who: tuple[str, str]) -> dict:
    return dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                sasl_plain_username=who[0], sasl_plain_password=who[1])


def cli_auth(who: tuple[str, str] = ADMIN) -> list[str]:
    return ["--sasl-mechanism", "PLAIN", "--sasl-username", who[0], "--sasl-password", who[1]]


def strata(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=TIMEOUT_S)
    if ok:
        assert r.returncode == 0, f"strata {' '.join(args)}: {r.stdout.decode()}{r.stderr.decode()}"
    return r


def create_topics(bootstrap: str, *topics: str) -> None:
    for t in topics:
        strata("topic", "create", t, "--partitions", "1", "--bootstrap", bootstrap, *cli_auth())


def produce_error(bootstrap: str, who, topic: str) -> int | None:
    """Produces one record with confluent-kafka; the delivery error code, None when it landed."""
    p = Producer({**conf(bootstrap, who), "acks": "all", "message.timeout.ms": 10_000,
                  "enable.idempotence": False})
    result = []
    p.produce(topic, value=b"v", partition=0, on_delivery=lambda err, _m: result.append(err))
    p.flush(20)
    assert result, "no delivery report"
    err = result[0]
    return None if err is None else err.code()


def consume_error(bootstrap: str, who, topic: str, group: str | None) -> int | None:
    """Reads partition 0 from the start: in `group` with confluent-kafka, or without a group
    (assigned) with kafka-python (librdkafka looks its group's coordinator up even when
    assigned). The first error code the consumer reports, None when it got a record."""
    if group is None:
        return raw_fetch_error(bootstrap, who, topic)
    c = Consumer({**conf(bootstrap, who), "group.id": group or f"unused-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error().code()
            if group:
                c.commit(m, asynchronous=False)
            return None
        raise AssertionError("neither a record nor an error in 20 s")
    finally:
        c.close()


def raw_fetch_error(bootstrap: str, who, topic: str, replica_id: int = -1) -> int | None:
    """One Fetch v4 of partition 0 from offset 0 on a connection authenticated as `who`: its
    error code, None when it carried records. (kafka-python retries an unauthorized topic's
    metadata silently and librdkafka looks a group's coordinator up even when assigned, so
    the refusal of the fetch itself is checked on the wire.)"""
    body = kproto.fetch_v4_body(topic, 0, 0, 1 << 20, 1 << 20)
    with sasl_plain_socket(bootstrap, who) as sock:
        sock.sendall(kproto.request(API_FETCH, 4, 3, struct.pack(">i", replica_id) + body[4:]))
        _, resp = kproto.recv_response(sock)
    [(_, _, err, _, records)] = kproto.parse_fetch_v4(resp)
    if err == 0:
        assert records, "no error and no records"
        return None
    assert not records
    return err


def visible_topics(bootstrap: str, who) -> set[str]:
    md = AdminClient(conf(bootstrap, who)).list_topics(timeout=10)
    return set(md.topics)


def acl(principal, rtype, name, op, perm=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL):
    return AclBinding(rtype, name, pattern, principal, "*", op, perm)


def create_acls(bootstrap: str, who, bindings: list[AclBinding]) -> None:
    admin = AdminClient(conf(bootstrap, who))
    for f in admin.create_acls(bindings, request_timeout=10).values():
        f.result(timeout=20)


def describe_all(bootstrap: str) -> set[tuple]:
    admin = AdminClient(conf(bootstrap, ADMIN))
    f = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY), request_timeout=10)
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in f.result(timeout=20)}


def test_acls_refuse_then_grant_with_prefix_and_deny(acl_broker):
    """Alice without ACLs: refused with Kafka's codes everywhere and shown no topic; she cannot
    grant herself ACLs. After admin grants (a PREFIXED pay- WRITE+READ, READ on her group and
    a DENY READ on pay-secret) exactly those succeed; deleting the grants refuses her again."""
    b = acl_broker.bootstrap
    create_topics(b, "pay-eu", "pay-secret", "orders")
    # The super user is not subject to ACLs.
    assert produce_error(b, ADMIN, "orders") is None
    assert produce_error(b, ADMIN, "pay-eu") is None
    assert produce_error(b, ADMIN, "pay-secret") is None

    assert produce_error(b, ALICE, "pay-eu") == TOPIC_AUTHORIZATION_FAILED
    assert consume_error(b, ALICE, "pay-eu", None) == TOPIC_AUTHORIZATION_FAILED
    assert consume_error(b, ALICE, "pay-eu", "g-alice") == GROUP_AUTHORIZATION_FAILED
    assert not {"pay-eu", "pay-secret", "orders"} & visible_topics(b, ALICE)
    assert {"pay-eu", "pay-secret", "orders"} <= visible_topics(b, ADMIN)

    # A client granting itself ACLs is refused, and nothing is stored.
    with pytest.raises(Exception) as refused:
        create_acls(b, ALICE, [acl("User:alice", ResourceType.TOPIC, "*", AclOperation.ALL)])
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused.value) or "authoriz" in str(refused.value).lower()
    assert describe_all(b) == set()
    from kafka.admin import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern
    from kafka.admin import ACLResourcePatternType as KPattern
    from kafka.admin import ResourceType as KType
    ka = KafkaAdminClient(**kp_conf(b, ALICE))
    result = ka.create_acls([ACL("User:alice", "*", ACLOperation.ALL, ACLPermissionType.ALLOW,
                                 ResourcePattern(KType.CLUSTER, "kafka-cluster", KPattern.LITERAL))])
    assert [e.__name__ for e in result["failed"]] == ["ClusterAuthorizationFailedError"]
    ka.close()

    # Admin grants with kafka-python: a prefixed pattern, a group, and a DENY that wins.
    ka = KafkaAdminClient(**kp_conf(b, ADMIN))
    grants = [
        ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
            ResourcePattern(KType.TOPIC, "pay-", KPattern.PREFIXED)),
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KType.TOPIC, "pay-", KPattern.PREFIXED)),
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
            ResourcePattern(KType.GROUP, "g-alice", KPattern.LITERAL)),
        ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.DENY,
            ResourcePattern(KType.TOPIC, "pay-secret", KPattern.LITERAL)),
    ]
    result = ka.create_acls(grants)
    assert result["failed"] == [] and len(result["succeeded"]) == 4
    listed, err = ka.describe_acls(kafka_acl_filter(principal="User:alice"))
    assert len(listed) == 4, listed

    assert produce_error(b, ALICE, "pay-eu") is None
    assert consume_error(b, ALICE, "pay-eu", None) is None
    assert consume_error(b, ALICE, "pay-eu", "g-alice") is None
    assert consume_error(b, ALICE, "pay-eu", "g-other") == GROUP_AUTHORIZATION_FAILED
    # DENY READ wins over the prefixed ALLOW; WRITE on it is still allowed (a DENY implies
    # nothing else), and so is DESCRIBE (implied by WRITE): she sees the topic.
    assert consume_error(b, ALICE, "pay-secret", None) == TOPIC_AUTHORIZATION_FAILED
    assert produce_error(b, ALICE, "pay-secret") is None
    assert produce_error(b, ALICE, "orders") == TOPIC_AUTHORIZATION_FAILED
    seen = visible_topics(b, ALICE)
    assert {"pay-eu", "pay-secret"} <= seen and "orders" not in seen, seen

    # confluent-kafka's admin sees the same bindings and deletes the prefixed ones.
    assert len(describe_all(b)) == 4
    admin = AdminClient(conf(b, ADMIN))
    fs = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "pay-", ResourcePatternType.PREFIXED, None,
                                             None, AclOperation.ANY, AclPermissionType.ANY)],
                           request_timeout=10)
    deleted = [d for f in fs.values() for d in f.result(timeout=20)]
    assert sorted(d.operation for d in deleted) == sorted([AclOperation.READ, AclOperation.WRITE])
    assert len(describe_all(b)) == 2
    assert produce_error(b, ALICE, "pay-eu") == TOPIC_AUTHORIZATION_FAILED
    ka.close()


def kafka_acl_filter(principal=None):
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter
    from kafka.admin import ACLResourcePatternType as KPattern
    from kafka.admin import ResourceType as KType
    return ACLFilter(principal, None, ACLOperation.ANY, ACLPermissionType.ANY,
                     ResourcePatternFilter(KType.ANY, None, KPattern.ANY))


def sasl_plain_socket(bootstrap: str, who) -> socket.socket:
    """A raw connection authenticated with SaslHandshake v1 + SaslAuthenticate v1 (PLAIN)."""
    sock = kproto.connect(bootstrap, 10)
    kproto.sasl_plain_login(sock, *who)
    return sock


API_CREATE_TOPICS = 19


def raw_create_topic_v5(bootstrap: str, who, topic: str) -> dict:
    """CreateTopics v5 (flexible) of `topic` (1 partition, replication factor 1) on a
    connection authenticated as `who`, decoded by hand (no client library shows KIP-525's
    topic_config_error_code): its error code, topic_config_error_code (tag 0), partition
    count, replication factor and whether configs came back."""
    header = struct.pack(">hhi", API_CREATE_TOPICS, 5, 3) + kproto.kstring("strata-tests") + b"\0"
    body = (kproto.uvarint(2) + kproto.compact_string(topic) + struct.pack(">ih", 1, 1)
            + kproto.uvarint(1) + kproto.uvarint(1) + b"\0"  # no assignments, no configs, no tags
            + struct.pack(">ib", 30_000, 0) + b"\0")
    payload = header + body
    with sasl_plain_socket(bootstrap, who) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        _, resp = kproto.recv_response(sock)
    pos = 1 + 4  # response header tags, throttle_time_ms
    n, pos = kproto.read_uvarint(resp, pos)
    assert n == 2, n
    ln, pos = kproto.read_uvarint(resp, pos)
    assert resp[pos:pos + ln - 1].decode() == topic
    pos += ln - 1
    (error,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    ln, pos = kproto.read_uvarint(resp, pos)
    pos += max(ln - 1, 0)
    partitions, rf = struct.unpack_from(">ih", resp, pos)
    pos += 6
    nconfigs, pos = kproto.read_uvarint(resp, pos)
    for _ in range(max(nconfigs - 1, 0)):
        for _ in range(2):  # name, value
            ln, pos = kproto.read_uvarint(resp, pos)
            pos += max(ln - 1, 0)
        pos += 3  # read_only, config_source, is_sensitive
        ntags, pos = kproto.read_uvarint(resp, pos)
        assert ntags == 0
    config_error = 0
    ntags, pos = kproto.read_uvarint(resp, pos)
    for _ in range(ntags):
        tag, pos = kproto.read_uvarint(resp, pos)
        size, pos = kproto.read_uvarint(resp, pos)
        if tag == 0:
            (config_error,) = struct.unpack_from(">h", resp, pos)
        pos += size
    return {"error": error, "config error": config_error, "partitions": partitions,
            "replication factor": rf, "configs": nconfigs > 1}


def create_topics_configs_scenario(bootstrap: str) -> dict:
    """Alice may CREATE topics prefixed mine-, and DESCRIBE_CONFIGS only mine-shown: what
    CreateTopics v5 answers her for mine-hidden and mine-shown (KIP-525), and whether both
    were made. Run unchanged against Strata and Kafka."""
    create_acls(bootstrap, ADMIN, [
        acl("User:alice", ResourceType.TOPIC, "mine-", AclOperation.CREATE,
            pattern=ResourcePatternType.PREFIXED),
        acl("User:alice", ResourceType.TOPIC, "mine-shown", AclOperation.DESCRIBE_CONFIGS),
    ])
    time.sleep(1)
    seen = {t: raw_create_topic_v5(bootstrap, ALICE, t) for t in ("mine-hidden", "mine-shown")}
    seen["denied"] = raw_create_topic_v5(bootstrap, ALICE, "other")
    time.sleep(1)
    made = AdminClient(conf(bootstrap, ADMIN)).list_topics(timeout=10).topics
    seen["made"] = sorted(t for t in ("mine-hidden", "mine-shown", "other") if t in made)
    return seen


def test_create_topics_shows_configs_only_with_describe_configs(acl_broker):
    """CreateTopics v5+ (KIP-525) as Kafka answers it under ACLs: alice, allowed CREATE on
    mine-*, creates mine-hidden and mine-shown; for mine-shown, which she may
    DESCRIBE_CONFIGS, the answer carries the partition count, replication factor and
    configs; for mine-hidden only topic_config_error_code = TOPIC_AUTHORIZATION_FAILED (counts
    -1, no configs), and the topic is made all the same. A topic she may not create is
    TOPIC_AUTHORIZATION_FAILED and not made."""
    seen = create_topics_configs_scenario(acl_broker.bootstrap)
    assert seen["mine-shown"] == {"error": 0, "config error": 0, "partitions": 1,
                                  "replication factor": 1, "configs": True}, seen
    assert seen["mine-hidden"] == {"error": 0, "config error": TOPIC_AUTHORIZATION_FAILED,
                                   "partitions": -1, "replication factor": -1, "configs": False}, seen
    assert seen["denied"]["error"] == TOPIC_AUTHORIZATION_FAILED, seen
    assert seen["made"] == ["mine-hidden", "mine-shown"], seen


def test_client_claiming_replica_id_is_refused(acl_broker):
    """Fetch with replica_id 1 from alice, who may READ the topic but has no CLUSTER_ACTION:
    TOPIC_AUTHORIZATION_FAILED and no data (as Kafka), while her consumer fetch (-1) reads."""
    b = acl_broker.bootstrap
    create_topics(b, "t")
    assert produce_error(b, ADMIN, "t") is None
    create_acls(b, ADMIN, [acl("User:alice", ResourceType.TOPIC, "t", AclOperation.READ)])
    assert raw_fetch_error(b, ALICE, "t", replica_id=1) == TOPIC_AUTHORIZATION_FAILED
    assert raw_fetch_error(b, ALICE, "t") is None


def test_acls_survive_restart_and_cli_round_trip(acl_broker):
    """`strata acl add` (kafka-acls.sh flags) stores bindings in the metadata log: `list` shows
    them, they hold after a restart (alice produces with kcat), and `remove` deletes them."""
    b = acl_broker.bootstrap
    create_topics(b, "logs-app")
    # Alice cannot use the CLI to grant herself anything.
    r = strata("acl", "add", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "logs-",
               "--resource-pattern-type", "PREFIXED", "--bootstrap", b, *cli_auth(ALICE), ok=False)
    assert r.returncode != 0 and "CLUSTER_AUTHORIZATION_FAILED" in (r.stdout + r.stderr).decode()
    strata("acl", "add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Describe",
           "--topic", "logs-", "--resource-pattern-type", "PREFIXED", "--bootstrap", b, *cli_auth())
    out = strata("acl", "list", "--bootstrap", b, *cli_auth()).stdout.decode()
    rows = [line.split() for line in out.splitlines()[1:]]
    assert sorted(rows) == [["TOPIC", "logs-", "PREFIXED", "User:alice", "*", "DESCRIBE", "ALLOW"],
                            ["TOPIC", "logs-", "PREFIXED", "User:alice", "*", "WRITE", "ALLOW"]], out

    acl_broker.restart()
    out2 = strata("acl", "list", "--topic", "logs-", "--resource-pattern-type", "PREFIXED",
                  "--bootstrap", b, *cli_auth()).stdout.decode()
    assert out2 == out
    auth = [a for k, v in conf(b, ALICE).items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    r = subprocess.run(["kcat", "-P", "-b", b, "-t", "logs-app", "-p", "0", "-X", "acks=all", *auth],
                       input=b"from kcat\n", capture_output=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr.decode()
    # She may write but not read: kcat's consumer is refused (kcat reports the error and may
    # keep waiting for the partition's end, so it is stopped after a while).
    try:
        r = subprocess.run(["kcat", "-C", "-b", b, "-t", "logs-app", "-p", "0", "-o", "beginning", "-e",
                            *auth], capture_output=True, timeout=15)
        out, err = r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        out, err = e.stdout or b"", e.stderr or b""
    assert b"from kcat" not in out
    assert b"authorization failed" in (out + err).lower(), (out + err).decode()
    # The record landed: the super user reads it.
    admin_auth = [a for k, v in conf(b, ADMIN).items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    r = subprocess.run(["kcat", "-C", "-b", b, "-t", "logs-app", "-p", "0", "-o", "beginning", "-e",
                        *admin_auth], capture_output=True, timeout=TIMEOUT_S)
    assert r.stdout.decode().splitlines() == ["from kcat"], r.stderr.decode()

    out = strata("acl", "remove", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "logs-",
                 "--resource-pattern-type", "PREFIXED", "--bootstrap", b, *cli_auth()).stdout.decode()
    assert out.count("removed") == 1, out
    strata("acl", "remove", "--topic", "logs-", "--resource-pattern-type", "PREFIXED", "--bootstrap", b,
           *cli_auth())
    assert strata("acl", "list", "--bootstrap", b, *cli_auth()).stdout.decode().count("\n") == 1


def test_acl_apis_without_authorizer_are_security_disabled(broker):
    """With `authorizer` empty (the default) nothing is enforced, and the ACL APIs answer
    SECURITY_DISABLED as Kafka's broker without an authorizer does."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    fs = admin.create_acls([acl("User:alice", ResourceType.TOPIC, "t", AclOperation.READ)], request_timeout=10)
    with pytest.raises(Exception) as e:
        [f.result(timeout=20) for f in fs.values()]
    assert "SECURITY_DISABLED" in str(e.value) or "No Authorizer" in str(e.value)


@pytest.fixture(scope="module")
def java_build(tmp_path_factory):
    from common import compile_java_checks
    return compile_java_checks(tmp_path_factory, "java-acl", ["AclCheck.java"])


def test_java_client_acls(acl_broker, java_build):
    """The Java client 4.1: alice's (idempotent) producer is refused without ACLs, her Admin
    cannot create ACLs (ClusterAuthorizationException); the admin's Admin creates a PREFIXED
    WRITE, describes and deletes it, and alice produces while it stands."""
    from common import JAVA_LIB
    r = subprocess.run(["java", "-cp", f"{JAVA_LIB}/*:{java_build}", "AclCheck", acl_broker.bootstrap,
                        ADMIN[1], ALICE[1]], capture_output=True, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-5000:]
    assert r.stdout.decode().splitlines()[-1] == "OK", out[-3000:]


# --- the same scenario against Apache Kafka 4.1 (StandardAuthorizer) ----------------------------

def acl_scenario(bootstrap: str) -> dict:
    """What alice's clients see before and after the admin's grants (a PREFIXED WRITE and
    READ on pay-, READ on group g-alice, a DENY READ on pay-secret), as error codes and the
    topics Metadata shows her; run unchanged against Strata and Kafka."""
    admin = AdminClient(conf(bootstrap, ADMIN))
    from confluent_kafka.admin import NewTopic
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("pay-eu", "pay-secret", "orders")]).values():
        f.result(timeout=30)
    time.sleep(1)
    for t in ("pay-eu", "pay-secret", "orders"):
        assert produce_error(bootstrap, ADMIN, t) is None
    seen: dict = {}

    def probe(when: str) -> None:
        seen[when] = {
            "produce pay-eu": produce_error(bootstrap, ALICE, "pay-eu"),
            "produce pay-secret": produce_error(bootstrap, ALICE, "pay-secret"),
            "produce orders": produce_error(bootstrap, ALICE, "orders"),
            "fetch pay-eu": raw_fetch_error(bootstrap, ALICE, "pay-eu"),
            "fetch pay-secret": raw_fetch_error(bootstrap, ALICE, "pay-secret"),
            "fetch pay-eu as replica 1": raw_fetch_error(bootstrap, ALICE, "pay-eu", replica_id=1),
            "group g-alice": consume_error(bootstrap, ALICE, "pay-eu", "g-alice"),
            "topics": sorted(t for t in visible_topics(bootstrap, ALICE) if not t.startswith("__")),
        }
        try:
            create_acls(bootstrap, ALICE, [acl("User:alice", ResourceType.TOPIC, "*", AclOperation.ALL)])
            seen[when]["create acls"] = None
        except Exception as e:
            seen[when]["create acls"] = e.args[0].code() if e.args and hasattr(e.args[0], "code") else repr(e)

    probe("before")
    create_acls(bootstrap, ADMIN, [
        acl("User:alice", ResourceType.TOPIC, "pay-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        acl("User:alice", ResourceType.TOPIC, "pay-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl("User:alice", ResourceType.GROUP, "g-alice", AclOperation.READ),
        acl("User:alice", ResourceType.TOPIC, "pay-secret", AclOperation.READ, perm=AclPermissionType.DENY),
    ])
    time.sleep(1)
    probe("after")
    seen["create topics v5"] = create_topics_configs_scenario(bootstrap)
    return seen


@pytest.mark.reference_kafka
def test_acl_codes_match_reference_kafka(acl_broker, tmp_path_factory):
    """The scenario's error codes and visible topics are Kafka's own: Apache Kafka 4.1 with
    SASL_PLAINTEXT (PLAIN), StandardAuthorizer and super.users=User:admin answers alice's
    clients exactly as Strata does, before and after the grants."""
    import os
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))
    import reference_kafka
    if not reference_kafka.jars_present():
        reason = f"no Kafka jars in {reference_kafka.LIB}; run tests/fetch-jars.sh kafka"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN[0]}" password="{ADMIN[1]}" '
            f'user_{ADMIN[0]}="{ADMIN[1]}" user_{ALICE[0]}="{ALICE[1]}";')
    k = reference_kafka.ReferenceKafka(tmp_path_factory.mktemp("reference-kafka-acl"), heap="512m", overrides={
        # The listener keeps its name PLAINTEXT but speaks SASL_PLAINTEXT, brokers included.
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.plaintext.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The controller listener is PLAINTEXT: its peers are ANONYMOUS.
        "super.users": "User:admin;User:ANONYMOUS",
    })
    try:
        k.start()
        kafka_seen = acl_scenario(k.bootstrap)
    finally:
        try:
            k.stop()
        finally:
            k.kill9()
    strata_seen = acl_scenario(acl_broker.bootstrap)
    assert strata_seen == kafka_seen
    assert kafka_seen["before"]["fetch pay-eu"] == TOPIC_AUTHORIZATION_FAILED
    assert kafka_seen["after"]["fetch pay-eu"] is None
