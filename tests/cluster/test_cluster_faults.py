"""Fault tests of a 3-node Strata cluster under load, each ending in the checker (verify.py).

Every fault test: a topic with 3 partitions, replication factor 3, min.insync.replicas=2;
two acks=all producers (idempotence off, then on) and an observing consumer run throughout;
the fault is injected, healed, the ISR becomes full again, and the checker proves no
acknowledged write was lost, nothing was invented, committed reads never changed, and all
replicas hold the same records up to the high watermark. The smoke test checks the basic
replication contract step by step.

Select with `-m cluster`; the partition test also carries `netns`. Each test fails (never
skips) when the binary has no cluster flags yet.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from checker import History, Op, Workload, check_history, read_topic
from harness import BROKER_SESSION_TIMEOUT_MS, Cluster, require_cluster_support
import kproto  # after harness, which puts tests/clients on sys.path
from verify import verify_cluster

pytestmark = [pytest.mark.cluster]

TOPIC = "jepsen"
PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
SESSION_S = BROKER_SESSION_TIMEOUT_MS / 1000
FAILOVER_TIMEOUT_S = 20  # session timeout + election + metadata propagation, with slack
IDEMPOTENCE = pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])


@pytest.fixture
def cluster_under_load(cluster_factory):
    """(start(network, idempotent) -> (cluster, workload)); the workload is stopped on failure."""
    workloads: list[Workload] = []

    def start(idempotent: bool, network: str = "loopback") -> tuple[Cluster, Workload]:
        require_cluster_support()
        c = cluster_factory(network=network)
        c.create_topic(TOPIC, PARTITIONS, 3, TOPIC_CONFIG)
        w = Workload(c.bootstrap, TOPIC, PARTITIONS, idempotent=idempotent).start()
        workloads.append(w)
        w.wait_acked(200)
        return c, w

    yield start
    for w in workloads:
        w.stopping.set()


def progress(w: Workload, n: int = 100, timeout_s: float = FAILOVER_TIMEOUT_S) -> None:
    """The producers get `n` more acks: the cluster serves writes again."""
    w.wait_acked(w.acked() + n, timeout_s=timeout_s)


def leader_not_in(c: Cluster, avoid: set[int]) -> tuple[int, int]:
    """(partition, leader) for a partition whose leader is not in `avoid` (else any)."""
    leaders = {p: c.leader(TOPIC, p) for p in range(PARTITIONS)}
    for p, n in leaders.items():
        if n not in avoid:
            return p, n
    return 0, leaders[0]


@pytest.mark.faults
@IDEMPOTENCE
def test_kill9_leader_repeatedly(cluster_under_load, idempotent, request):
    """Proves leader crash failover: three times, kill -9 the leader of a partition (a
    different broker each time when possible), require an ISR follower to take over and writes
    to continue, restart the dead broker on its dirs and wait for a full ISR; then check."""
    c, w = cluster_under_load(idempotent)
    killed: set[int] = set()
    for _ in range(3):
        p, old = leader_not_in(c, killed)
        c.kill9(old)
        killed.add(old)
        new = c.leader(TOPIC, p, timeout_s=FAILOVER_TIMEOUT_S, not_on=old)
        assert new != old
        progress(w)
        c.restart(old)
        c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=60)
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, killed=sorted(killed))


@pytest.mark.faults
@IDEMPOTENCE
def test_sigstop_leader_beyond_session_timeout(cluster_under_load, idempotent, request):
    """Proves a paused (zombie) leader is fenced: SIGSTOP the leader of partition 0 for twice
    the broker session timeout, require a new leader and continued writes meanwhile, SIGCONT
    it; the old leader must not keep or serve writes the new one does not have (checker)."""
    c, w = cluster_under_load(idempotent)
    old = c.leader(TOPIC, 0)
    c.pause(old)
    try:
        new = c.leader(TOPIC, 0, timeout_s=FAILOVER_TIMEOUT_S, not_on=old)
        assert new != old
        progress(w)
        time.sleep(max(0.0, 2 * SESSION_S - 1))
    finally:
        c.resume(old)
    c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=60)
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, paused=old)


@pytest.mark.faults
@pytest.mark.netns
@IDEMPOTENCE
def test_partition_isolates_leader(cluster_under_load, idempotent, request):
    """Proves the split-brain case: the leader of partition 0 is cut off from both peers (but
    not from clients) for well over the session timeout. The majority side must elect a new
    leader and keep acking; the isolated one must not ack acks=all writes on its own (it
    cannot reach min.insync.replicas=2 with a real ISR). Heal, full ISR, then check."""
    c, w = cluster_under_load(idempotent, network="netns")
    old = c.leader(TOPIC, 0)
    c.isolate(old, allow_client=True)
    try:
        new = c.leader(TOPIC, 0, timeout_s=FAILOVER_TIMEOUT_S, not_on=old)
        assert new != old
        progress(w)
        time.sleep(2 * SESSION_S)
    finally:
        c.heal(old)
    c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=60)
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, isolated=old)


@pytest.mark.faults
@IDEMPOTENCE
def test_kill9_active_controller(cluster_under_load, idempotent, request):
    """Proves controller failover: twice, kill -9 the active controller (Metadata's
    controller_id), require another voter to become controller, the data path to keep acking
    and a topic creation (RF 2, as one broker is down) to succeed through the new controller;
    restart the old one. Check."""
    c, w = cluster_under_load(idempotent)
    killed = []
    for round_ in range(2):
        old = c.controller_id()
        c.kill9(old)
        killed.append(old)
        new = c.controller_id(timeout_s=FAILOVER_TIMEOUT_S, not_on=old)
        assert new != old
        progress(w)
        # RF 2: a KRaft controller places replicas on live (unfenced) brokers only.
        c.create_topic(f"after-controller-failover-{round_}", 1, 2, TOPIC_CONFIG, full_isr=False)
        c.restart(old)
        c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=60)
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, killed=killed)


# ---- smoke -------------------------------------------------------------------------------------

class Sender:
    """Synchronous acks=all sends recorded as checker Ops (producer 0, one session)."""

    def __init__(self, bootstrap: str, history: History, retries: bool = True, timeout_ms: int = 10000):
        self.history = history
        self.p = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
            "retries": 2147483647 if retries else 0, "message.timeout.ms": timeout_ms,
            "request.timeout.ms": min(timeout_ms, 5000), "linger.ms": 0,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
        })
        self.seq = len(history.ops)

    def send(self, topic: str, n: int, partition: int = 0) -> list[Op]:
        ops = []
        # Several Senders may share one history: continue after its last value.
        self.seq = max(self.seq, len(self.history.ops))
        for _ in range(n):
            op = Op(0, 1, self.seq, partition, f"p0-{self.seq}")
            self.seq += 1
            self.history.add(op)
            ops.append(op)

            def done(err, msg, op=op):
                if err is None:
                    off = msg.offset()
                    op.outcome, op.offset = "ok", (off if off is not None and off >= 0 else None)
                else:
                    op.outcome, op.error = "failed", err.name()
            self.p.produce(topic, value=op.value.encode(), partition=partition, on_delivery=done)
        self.p.flush(60)
        return ops


def wait_isr(c: Cluster, topic: str, want: set[int], timeout_s: float = FAILOVER_TIMEOUT_S) -> None:
    def check():
        p = c.partitions(topic)[0]
        return set(p.isrs) == want and p.leader in want
    c.poll_until(f"{topic}-0 ISR == {sorted(want)}", check, timeout_s)


def test_smoke_replication_and_min_insync(cluster_factory):
    """Proves the replication contract step by step on one partition (RF=3, min ISR 2):
    Metadata shows 3 replicas all in sync; a non-leader answers NOT_LEADER_OR_FOLLOWER;
    acks=all works; with one follower dead the ISR shrinks to 2 and acks=all still works;
    a min ISR 3 topic then refuses with NOT_ENOUGH_REPLICAS; with both followers dead nothing
    is acknowledged; after restarts the ISR is full and everything acked is there."""
    require_cluster_support()
    c = cluster_factory()
    c.create_topic("smoke", 1, 3, {"min.insync.replicas": "2"})
    c.create_topic("smoke-strict", 1, 3, {"min.insync.replicas": "3"})
    part = c.partitions("smoke")[0]
    assert sorted(part.replicas) == [1, 2, 3] and sorted(part.isrs) == [1, 2, 3], part
    leader = part.leader
    followers = [n for n in (1, 2, 3) if n != leader]

    for n in followers:  # NOT_LEADER_OR_FOLLOWER (6) from a replica that is not the leader
        [(_, _, error_code, _)] = kproto.produce_raw(c.nodes[n].address, "smoke", 0,
                                                     kproto.record_batch([(None, b"x")]))
        assert error_code == 6, f"node {n} (follower) answered produce with error {error_code}"

    history = History(idempotent=False)
    s = Sender(c.bootstrap, history)
    assert all(op.outcome == "ok" for op in s.send("smoke", 100)), "acks=all with a full ISR failed"

    c.kill9(followers[0])
    wait_isr(c, "smoke", {leader, followers[1]})
    ops = s.send("smoke", 50)
    assert all(op.outcome == "ok" for op in ops), \
        f"acks=all failed with ISR 2 >= min 2: {[op.error for op in ops if op.outcome != 'ok'][:5]}"

    strict = c.partitions("smoke-strict")[0]
    def strict_shrunk():
        p = c.partitions("smoke-strict")[0]
        return len(p.isrs) == 2 and followers[0] not in p.isrs and p.leader in c.nodes \
            and c.nodes[p.leader].alive()
    c.poll_until("smoke-strict ISR shrinks to 2 with a live leader", strict_shrunk, FAILOVER_TIMEOUT_S)
    strict_history = History(idempotent=False)
    [op] = Sender(c.bootstrap, strict_history, retries=False).send("smoke-strict", 1)
    assert op.outcome == "failed" and op.error == KafkaError(KafkaError.NOT_ENOUGH_REPLICAS).name(), \
        f"min.insync.replicas=3 with ISR 2 (was {strict.isrs}): got {op.outcome} {op.error}"

    # With both followers gone only one of three controller voters is left: the quorum is lost,
    # so the leader may be unable to shrink the ISR and Kafka then times the request out rather
    # than answering NOT_ENOUGH_REPLICAS. Either way nothing may be acknowledged.
    c.kill9(followers[1])
    lonely = Sender(c.nodes[leader].address, history, timeout_ms=8000).send("smoke", 20)
    acked = [op for op in lonely if op.outcome == "ok"]
    assert not acked, f"{len(acked)} acks=all writes acknowledged with 1 live replica (min ISR 2)"
    errors = sorted({op.error for op in lonely})
    allowed = {"NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REQUEST_TIMED_OUT", "_MSG_TIMED_OUT"}
    assert set(errors) <= allowed, f"unexpected errors with one replica left: {errors}"
    print(f"errors with one live replica: {errors}")

    c.restart(followers[0], wait_registered=False)
    c.restart(followers[1], wait_registered=False)
    c.wait_brokers({1, 2, 3})
    c.wait_topic("smoke", 1, full_isr=True, timeout_s=60)
    c.wait_topic("smoke-strict", 1, full_isr=True, timeout_s=60)
    assert all(op.outcome == "ok" for op in s.send("smoke", 50)), "acks=all failed after the restarts"
    [op] = Sender(c.bootstrap, strict_history, retries=False).send("smoke-strict", 1)
    assert op.outcome == "ok", f"min ISR 3 topic with ISR 3: {op.error}"

    log, highs = read_topic(c.bootstrap, "smoke", 1)
    r = check_history(history, log, highs)
    assert r.ok, r.explain()
    log, highs = read_topic(c.bootstrap, "smoke-strict", 1)
    assert [v for _, v in log[0]] == [op.value], f"smoke-strict holds {log[0]}: the refused write was stored"
