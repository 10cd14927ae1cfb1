"""Consumer groups with real clients: kafka-python, confluent-kafka (cooperative-sticky and
static membership) and kafkajs, against a real `strata serve`; plus raw-frame bad input.

Consumers run as subprocesses (group_worker.py) so a test can kill -9 one. Each logs every
processed record as `R <partition> <offset>` and commits after processing, so the logs tell
exactly what was consumed, and how often. Waits are polls with deadlines, never fixed sleeps.
The broker runs with a 100 ms initial rebalance delay and a 1 s minimum session timeout.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

import kproto
from common import create_topic

HERE = Path(__file__).resolve().parent
WORKER = HERE / "group_worker.py"
PARTS = 6
SESSION_MS = 6000
DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def group_env(monkeypatch):
    monkeypatch.setenv("STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS", "100")
    monkeypatch.setenv("STRATA_GROUP_MIN_SESSION_TIMEOUT_MS", "1000")
    yield
    _admins.clear()


def wait_for(what: str, cond, timeout_s: float = DEADLINE_S, interval_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    """`count` records spread round-robin over the partitions, acked by the broker."""
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
    for i in range(start, start + count):
        p.send(topic, value=f"v{i}".encode(), partition=i % PARTS)
    p.flush(30)
    p.close()


class Worker:
    def __init__(self, tmp: Path, name: str, lib: str, bootstrap: str, topic: str, group: str,
                 *extra: str):
        self.name = name
        self.out = tmp / f"{name}.log"
        self.args = [sys.executable, str(WORKER), lib, bootstrap, topic, group, str(self.out),
                     "--session-ms", str(SESSION_MS), *extra]
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Worker":
        err = open(self.out.with_suffix(".stderr"), "ab")
        self.proc = subprocess.Popen(self.args, stdout=err, stderr=err, stdin=subprocess.DEVNULL)
        err.close()
        return self

    def lines(self) -> list[str]:
        try:
            return self.out.read_text().splitlines()
        except FileNotFoundError:
            return []

    def records(self) -> list[tuple[int, int]]:
        out = []
        for line in self.lines():
            if line.startswith("R "):
                _, p, o = line.split()
                out.append((int(p), int(o)))
        return out

    def assignment(self) -> set[int] | None:
        last = None
        for line in self.lines():
            if line.startswith("A"):
                rest = line[1:].strip()
                last = {int(x) for x in rest.split(",") if x}
        return last

    def assign_events(self) -> int:
        return sum(1 for line in self.lines() if line.startswith(("A", "+", "-")))

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()


@pytest.fixture
def workers():
    made: list[Worker] = []
    yield made
    for w in made:
        w.kill9()


_admins: dict[str, AdminClient] = {}


def admin(bootstrap: str) -> AdminClient:
    """One AdminClient per broker address, kept alive: librdkafka never resolves the futures
    of a client that has been garbage-collected."""
    if bootstrap not in _admins:
        _admins[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _admins[bootstrap]


_retired: list[AdminClient] = []


def renew_admin(bootstrap: str) -> None:
    """Replaces the kept AdminClient of `bootstrap` with a new one at its next use. A client
    that lived through its only broker's restart re-bootstraps (librdkafka 2.10+), and in that
    window librdkafka can drop the coordinator lookup of an admin request on a decommissioned
    broker handle and never retry it (its log: "FindCoordinatorRequest failed: Local: Broker
    handle destroyed without termination"): the request then hangs for socket.timeout.ms
    while the broker answers everything it is sent. The old client is kept alive (see
    `admin`)."""
    old = _admins.pop(bootstrap, None)
    if old is not None:
        _retired.append(old)


def describe(bootstrap: str, group: str):
    return admin(bootstrap).describe_consumer_groups([group])[group].result(timeout=15)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTS)])]
    res = admin(bootstrap).list_consumer_group_offsets(req)[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in res.topic_partitions}


def stable_assignment(bootstrap: str, group: str, members: int) -> dict[str, set[int]] | None:
    """The group's assignment if it is Stable with `members` members covering every partition
    exactly once; else None."""
    try:
        d = describe(bootstrap, group)
    except Exception:
        return None
    if str(d.state).split(".")[-1] != "STABLE" or len(d.members) != members:
        return None
    seen: list[int] = []
    by_member = {}
    for m in d.members:
        parts = {tp.partition for tp in m.assignment.topic_partitions}
        by_member[m.member_id] = parts
        seen.extend(parts)
    if sorted(seen) != list(range(PARTS)):
        return None
    return by_member


def all_consumed(ws: list[Worker], total: int):
    got = set()
    for w in ws:
        got.update(w.records())
    return len(got) >= total


def expected(total: int) -> set[tuple[int, int]]:
    """(partition, offset) of records 0..total-1 produced round-robin from an empty topic."""
    out = set()
    for i in range(total):
        out.add((i % PARTS, i // PARTS))
    return out


def test_three_kafka_python_consumers_exactly_once(broker, tmp_path, workers):
    """Proves three kafka-python members split a 6-partition topic (each partition to exactly
    one member, checked via DescribeGroups and the members' own callbacks) and consume every
    record exactly once when committing after processing."""
    topic, group = "grp-kp", "g-kp"
    create_topic(broker.bootstrap, topic, PARTS)
    for i in range(3):
        workers.append(Worker(tmp_path, f"kp{i}", "kafka-python", broker.bootstrap, topic, group).start())
    wait_for("a stable group of 3", lambda: stable_assignment(broker.bootstrap, group, 3))
    wait_for("members see their assignment",
             lambda: sorted(p for w in workers for p in (w.assignment() or set())) == list(range(PARTS)))
    total = 600
    produce(broker.bootstrap, topic, total)
    wait_for("all records consumed", lambda: all_consumed(workers, total))
    counts = Counter(r for w in workers for r in w.records())
    assert set(counts) == expected(total)
    dups = {r: c for r, c in counts.items() if c > 1}
    assert not dups, f"records consumed more than once: {list(dups.items())[:10]}"
    wait_for("commits reach the end",
             lambda: committed(broker.bootstrap, group, topic) == {p: total // PARTS for p in range(PARTS)})
    for w in workers:
        w.stop()
    wait_for("group empty after members leave",
             lambda: str(describe(broker.bootstrap, group).state).endswith("EMPTY"))


def test_kill9_member_partitions_move_to_survivors(broker, tmp_path, workers):
    """Proves that after kill -9 of one member its partitions move to the survivors once its
    session times out, and consumption resumes from the committed offsets: every record is
    consumed, duplicates only of work the dead member had not committed."""
    topic, group = "grp-kill", "g-kill"
    create_topic(broker.bootstrap, topic, PARTS)
    for i in range(3):
        workers.append(Worker(tmp_path, f"k{i}", "kafka-python", broker.bootstrap, topic, group).start())
    wait_for("a stable group of 3", lambda: stable_assignment(broker.bootstrap, group, 3))
    produce(broker.bootstrap, topic, 300)
    wait_for("first half consumed", lambda: all_consumed(workers, 300))
    victim = workers[0]
    victim_parts = victim.assignment() or set()
    assert victim_parts
    victim.kill9()
    before_commit = committed(broker.bootstrap, group, topic)
    produce(broker.bootstrap, topic, 300, start=300)
    survivors = workers[1:]
    assignment = wait_for("survivors own every partition",
                          lambda: stable_assignment(broker.bootstrap, group, 2), timeout_s=SESSION_MS / 1000 + 40)
    assert sorted(p for ps in assignment.values() for p in ps) == list(range(PARTS))
    wait_for("all records consumed", lambda: all_consumed(survivors + [victim], 600))
    counts = Counter(r for w in workers for r in w.records())
    assert set(counts) == expected(600), "no gaps"
    # Survivors re-read the dead member's partitions only from its last committed offsets:
    # a duplicate is always uncommitted work of the victim.
    for (p, o), c in counts.items():
        if c > 1:
            assert p in victim_parts and o >= before_commit.get(p, 0), (p, o, c)


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_broker_restart_keeps_committed_offsets(persistent_broker, tmp_path, workers, how):
    """Proves committed offsets survive a broker restart (SIGTERM, or kill -9: a commit is
    acknowledged only once durable; same data dir and port): they read back identical after
    the restart, and the consumers resume past them (nothing below a pre-restart committed
    offset is consumed again)."""
    broker = persistent_broker
    topic, group = "grp-restart", "g-restart"
    create_topic(broker.bootstrap, topic, PARTS)
    for i in range(2):
        workers.append(Worker(tmp_path, f"r{i}", "kafka-python", broker.bootstrap, topic, group).start())
    wait_for("a stable group of 2", lambda: stable_assignment(broker.bootstrap, group, 2))
    produce(broker.bootstrap, topic, 240)
    wait_for("consumed", lambda: all_consumed(workers, 240))
    full = {p: 40 for p in range(PARTS)}
    wait_for("committed", lambda: committed(broker.bootstrap, group, topic) == full)
    lines_before = [len(w.lines()) for w in workers]
    if how == "kill9":
        broker.kill9()
        broker.start()
    else:
        broker.restart()
    renew_admin(broker.bootstrap)
    assert committed(broker.bootstrap, group, topic) == full, "offsets survive the restart"
    produce(broker.bootstrap, topic, 240, start=240)
    wait_for("consumed after restart", lambda: all_consumed(workers, 480))
    for w, n in zip(workers, lines_before):
        for line in w.lines()[n:]:
            if line.startswith("R "):
                _, p, o = line.split()
                assert int(o) >= full[int(p)], f"{w.name} re-read {line} after the restart"
    wait_for("committed to the end",
             lambda: committed(broker.bootstrap, group, topic) == {p: 80 for p in range(PARTS)})


def test_confluent_cooperative_sticky(broker, tmp_path, workers):
    """Proves librdkafka's cooperative-sticky (incremental) rebalancing works: three members
    join one after another, end with every partition owned exactly once, consume every record
    exactly once, and a leaving member's partitions are taken over incrementally."""
    topic, group = "grp-coop", "g-coop"
    create_topic(broker.bootstrap, topic, PARTS)
    for i in range(3):
        workers.append(Worker(tmp_path, f"c{i}", "confluent", broker.bootstrap, topic, group,
                              "--strategy", "cooperative-sticky").start())
    wait_for("a stable group of 3", lambda: stable_assignment(broker.bootstrap, group, 3))
    wait_for("members see their assignment",
             lambda: sorted(p for w in workers for p in (w.assignment() or set())) == list(range(PARTS)))
    d = describe(broker.bootstrap, group)
    assert d.partition_assignor == "cooperative-sticky"
    produce(broker.bootstrap, topic, 300)
    wait_for("all consumed", lambda: all_consumed(workers, 300))
    counts = Counter(r for w in workers for r in w.records())
    assert set(counts) == expected(300)
    assert max(counts.values()) == 1
    workers[2].stop()
    wait_for("two members own everything", lambda: stable_assignment(broker.bootstrap, group, 2))
    produce(broker.bootstrap, topic, 120, start=300)
    wait_for("all consumed", lambda: all_consumed(workers, 420))


def test_static_member_restart_keeps_assignment(broker, tmp_path, workers):
    """Proves KIP-345: a static member (group.instance.id) killed and restarted within its
    session timeout gets its old partitions back with no rebalance: the other members'
    assignment callbacks do not fire and their member ids stay."""
    topic, group = "grp-static", "g-static"
    create_topic(broker.bootstrap, topic, PARTS)
    for i in range(3):
        workers.append(Worker(tmp_path, f"s{i}", "confluent", broker.bootstrap, topic, group,
                              "--instance", f"inst-{i}").start())
    before = wait_for("a stable group of 3", lambda: stable_assignment(broker.bootstrap, group, 3))
    wait_for("members see their assignment",
             lambda: sorted(p for w in workers for p in (w.assignment() or set())) == list(range(PARTS)))
    events = [w.assign_events() for w in workers]
    d = describe(broker.bootstrap, group)
    ids = {m.group_instance_id: m.member_id for m in d.members}
    old_parts = workers[0].assignment()
    workers[0].kill9()
    restarted = Worker(tmp_path, "s0-again", "confluent", broker.bootstrap, topic, group,
                       "--instance", "inst-0").start()
    workers.append(restarted)
    wait_for("restarted member has its partitions", lambda: restarted.assignment() == old_parts, timeout_s=30)
    d = describe(broker.bootstrap, group)
    assert str(d.state).endswith("STABLE")
    now_ids = {m.group_instance_id: m.member_id for m in d.members}
    assert now_ids["inst-1"] == ids["inst-1"] and now_ids["inst-2"] == ids["inst-2"]
    assert now_ids["inst-0"] != ids["inst-0"], "the restarted member got a new member id"
    after = stable_assignment(broker.bootstrap, group, 3)
    assert sorted(after.values(), key=sorted) == sorted(before.values(), key=sorted)
    time.sleep(1.0)  # give a (wrong) rebalance the chance to show up in the callbacks
    assert [w.assign_events() for w in workers[1:3]] == events[1:3], "others did not rebalance"
    produce(broker.bootstrap, topic, 120)
    wait_for("all consumed", lambda: all_consumed(workers, 120))


def test_kafkajs_group(broker, tmp_path):
    """Proves kafkajs's group consumer (two members in one node process) splits the topic
    between them, consumes every record (produced once both own partitions) exactly once, and
    commits to the end."""
    js = HERE / "js"
    if not (js / "node_modules" / "kafkajs").exists():
        pytest.skip("kafkajs not installed (npm ci in tests/clients/js)")
    topic, group = "grp-js", "g-js"
    create_topic(broker.bootstrap, topic, PARTS)
    res = subprocess.run(
        ["node", str(js / "group.mjs"), broker.bootstrap, topic, group, "300"],
        cwd=js, capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout, res.stdout + res.stderr


# ---------------------------------------------------------------- raw frames

ERR_NONE = 0
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_INVALID_TOPIC = 17
ERR_ILLEGAL_GENERATION = 22
ERR_INCONSISTENT_GROUP_PROTOCOL = 23
ERR_UNKNOWN_MEMBER_ID = 25
ERR_REBALANCE_IN_PROGRESS = 27
ERR_MEMBER_ID_REQUIRED = 79

API_OFFSET_COMMIT, API_OFFSET_FETCH, API_JOIN, API_HEARTBEAT, API_SYNC = 8, 9, 11, 12, 14


class Raw:
    """One connection sending hand-built non-flexible group requests."""

    def __init__(self, bootstrap: str):
        self.sock = kproto.connect(bootstrap, timeout_s=15)
        self.corr = 0

    def call(self, api: int, version: int, body: bytes) -> bytes:
        self.corr += 1
        self.sock.sendall(kproto.request(api, version, self.corr, body))
        corr, resp = kproto.recv_response(self.sock)
        assert corr == self.corr
        return resp

    def join(self, group: str, member: str, ptype: str = "consumer", protocols=(("range", b"m"),)):
        body = (kproto.kstring(group) + struct.pack(">ii", 6000, 6000) + kproto.kstring(member)
                + kproto.kstring(None) + kproto.kstring(ptype) + struct.pack(">i", len(protocols)))
        for name, meta in protocols:
            body += kproto.kstring(name) + struct.pack(">i", len(meta)) + meta
        r = Reader(self.call(API_JOIN, 5, body))
        r.i32()  # throttle
        err, generation = r.i16(), r.i32()
        _protocol, leader, member_id = r.str(), r.str(), r.str()
        return err, generation, leader, member_id

    def sync(self, group: str, generation: int, member: str, assignments=()):
        body = (kproto.kstring(group) + struct.pack(">i", generation) + kproto.kstring(member)
                + kproto.kstring(None) + struct.pack(">i", len(assignments)))
        for m, a in assignments:
            body += kproto.kstring(m) + struct.pack(">i", len(a)) + a
        r = Reader(self.call(API_SYNC, 3, body))
        r.i32()
        return r.i16()

    def heartbeat(self, group: str, generation: int, member: str) -> int:
        body = kproto.kstring(group) + struct.pack(">i", generation) + kproto.kstring(member) + kproto.kstring(None)
        r = Reader(self.call(API_HEARTBEAT, 3, body))
        r.i32()
        return r.i16()

    def commit(self, group: str, generation: int, member: str, parts) -> dict:
        topics: dict[str, list] = {}
        for t, p, o in parts:
            topics.setdefault(t, []).append((p, o))
        body = (kproto.kstring(group) + struct.pack(">i", generation) + kproto.kstring(member)
                + kproto.kstring(None) + struct.pack(">i", len(topics)))
        for t, ps in topics.items():
            body += kproto.kstring(t) + struct.pack(">i", len(ps))
            for p, o in ps:
                body += struct.pack(">iqi", p, o, -1) + kproto.kstring("")
        r = Reader(self.call(API_OFFSET_COMMIT, 7, body))
        r.i32()
        out = {}
        for _ in range(r.i32()):
            t = r.str()
            for _ in range(r.i32()):
                p = r.i32()
                out[(t, p)] = r.i16()
        return out

    def fetch(self, group: str, topic: str, partitions) -> dict:
        body = (kproto.kstring(group) + struct.pack(">i", 1) + kproto.kstring(topic)
                + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions))
        r = Reader(self.call(API_OFFSET_FETCH, 5, body))
        r.i32()
        out = {}
        for _ in range(r.i32()):
            t = r.str()
            for _ in range(r.i32()):
                p, o, _epoch = r.i32(), r.i64(), r.i32()
                r.str()
                out[(t, p)] = (o, r.i16())
        return out


class Reader:
    def __init__(self, b: bytes):
        self.b, self.i = b, 0

    def take(self, n: int) -> bytes:
        v = self.b[self.i:self.i + n]
        assert len(v) == n, "response truncated"
        self.i += n
        return v

    def i16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self.take(8))[0]

    def str(self) -> str:
        n = self.i16()
        return "" if n < 0 else self.take(n).decode()


def test_bad_group_input_gets_kafka_errors(broker):
    """Proves Kafka's error codes for bad group requests — unknown protocol type, no common
    protocol, stale generation, unknown member, commits for unknown topics/partitions,
    producing to __consumer_offsets — and that the group keeps working afterwards."""
    topic, group = "grp-bad", "g-bad"
    create_topic(broker.bootstrap, topic, 2)
    c = Raw(broker.bootstrap)
    # Valid ConsumerProtocol subscription and assignment (v0), so DescribeGroups decodes them.
    subscription = struct.pack(">hi", 0, 1) + kproto.kstring(topic) + struct.pack(">i", -1)
    assignment = struct.pack(">hi", 0, 1) + kproto.kstring(topic) + struct.pack(">iiii", 2, 0, 1, -1)
    protocols = (("range", subscription),)
    err, _, _, member = c.join(group, "", protocols=protocols)
    assert err == ERR_MEMBER_ID_REQUIRED and member
    err, generation, leader, member2 = c.join(group, member, protocols=protocols)
    assert (err, member2, leader) == (ERR_NONE, member, member)
    assert c.sync(group, generation, member, [(member, assignment)]) == ERR_NONE
    other = Raw(broker.bootstrap)
    assert other.join(group, "", ptype="connect")[0] == ERR_INCONSISTENT_GROUP_PROTOCOL
    assert other.join(group, "", protocols=(("nope", b""),))[0] == ERR_INCONSISTENT_GROUP_PROTOCOL
    assert other.join(group, "made-up-member")[0] == ERR_UNKNOWN_MEMBER_ID
    assert c.heartbeat(group, generation + 5, member) == ERR_ILLEGAL_GENERATION
    assert c.heartbeat(group, generation, "ghost") == ERR_UNKNOWN_MEMBER_ID
    assert c.sync(group, generation - 1, member) == ERR_ILLEGAL_GENERATION
    res = c.commit(group, generation, member, [(topic, 0, 5), (topic, 7, 1), ("no-such-topic", 0, 1)])
    assert res == {(topic, 0): ERR_NONE, (topic, 7): ERR_UNKNOWN_TOPIC_OR_PARTITION,
                   ("no-such-topic", 0): ERR_UNKNOWN_TOPIC_OR_PARTITION}
    assert c.commit(group, generation + 1, member, [(topic, 1, 1)]) == {(topic, 1): ERR_ILLEGAL_GENERATION}
    assert c.commit(group, generation, "ghost", [(topic, 1, 1)]) == {(topic, 1): ERR_UNKNOWN_MEMBER_ID}
    # The group still works: heartbeats, commits and fetches succeed.
    assert c.heartbeat(group, generation, member) == ERR_NONE
    assert c.commit(group, generation, member, [(topic, 1, 9)]) == {(topic, 1): ERR_NONE}
    assert c.fetch(group, topic, [0, 1]) == {(topic, 0): (5, 0), (topic, 1): (9, 0)}
    assert str(describe(broker.bootstrap, group).state).endswith("STABLE")
    # Clients may not write the coordinator's log.
    results = kproto.produce_raw(broker.bootstrap, "__consumer_offsets", 0, kproto.record_batch([(b"k", b"v")]))
    assert results[0][2] == ERR_INVALID_TOPIC


def strata_cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    from harness import strata_bin
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=60, text=True)
    if ok:
        assert r.returncode == 0, f"strata {' '.join(args)}: {r.stderr}"
    return r


def test_strata_group_cli(broker, tmp_path, workers):
    """Proves `strata group list|describe|reset-offsets|delete`: describe shows the member and
    its decoded assignment, committed offsets, log end and lag; reset-offsets is refused while
    the group has members, prints a plan with --dry-run, and commits earliest/offset/latest/
    datetime targets; delete removes an empty group."""
    topic, group = "grp-cli", "g-cli"
    b = ["--bootstrap", broker.bootstrap]
    create_topic(broker.bootstrap, topic, PARTS)
    w = Worker(tmp_path, "cli0", "kafka-python", broker.bootstrap, topic, group).start()
    workers.append(w)
    wait_for("a stable group of 1", lambda: stable_assignment(broker.bootstrap, group, 1))
    produce(broker.bootstrap, topic, 60)
    wait_for("consumed", lambda: all_consumed([w], 60))
    wait_for("committed", lambda: committed(broker.bootstrap, group, topic) == {p: 10 for p in range(PARTS)})
    produce(broker.bootstrap, topic, 6, start=60)  # may or may not be consumed yet: lag 0 or 1
    assert group in strata_cli("group", "list", *b).stdout
    out = strata_cli("group", "describe", group, *b).stdout
    assert "State: Stable" in out and "Members: 1" in out
    assert f"assignment={topic}:0,1,2,3,4,5" in out, out
    rows = [line.split("\t") for line in out.splitlines() if line.startswith(topic + "\t")]
    assert len(rows) == PARTS and all(r[3] == "11" for r in rows), out
    r = strata_cli("group", "reset-offsets", group, "--to-earliest", *b, ok=False)
    assert r.returncode != 0 and "active member" in r.stderr
    w.stop()
    wait_for("group empty", lambda: str(describe(broker.bootstrap, group).state).endswith("EMPTY"))
    plan = strata_cli("group", "reset-offsets", group, "--to-earliest", "--dry-run", *b).stdout
    assert "dry run" in plan and committed(broker.bootstrap, group, topic)[0] >= 10
    strata_cli("group", "reset-offsets", group, "--to-earliest", *b)
    assert committed(broker.bootstrap, group, topic) == {p: 0 for p in range(PARTS)}
    strata_cli("group", "reset-offsets", group, "--topic", topic, "--to-offset", "4", *b)
    assert committed(broker.bootstrap, group, topic) == {p: 4 for p in range(PARTS)}
    strata_cli("group", "reset-offsets", group, "--to-latest", *b)
    assert committed(broker.bootstrap, group, topic) == {p: 11 for p in range(PARTS)}
    strata_cli("group", "reset-offsets", group, "--to-datetime", "0", *b)
    assert committed(broker.bootstrap, group, topic) == {p: 0 for p in range(PARTS)}
    strata_cli("group", "delete", group, *b)
    assert group not in strata_cli("group", "list", *b).stdout
