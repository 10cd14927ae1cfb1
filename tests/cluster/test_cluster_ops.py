"""Operating a running cluster under load: online scale-out with partition reassignment,
preferred-leader election, the dedicated-controller layout, and DeleteRecords on replicas.

Each test runs the checker's workload (two acks=all producers, idempotence on, and an
observing consumer) for its whole length and ends in verify.py's checks (no acknowledged write
lost, nothing invented, committed reads never changed, every replica the same up to the HW).
The operations go through the `strata cluster` command line, which speaks only the Kafka
protocol (Metadata, AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders).
"""

from __future__ import annotations

import json
import subprocess

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from checker import Workload
from harness import Cluster, require_cluster_support, strata_bin
import kproto  # after harness, which puts tests/clients on sys.path
import replica_fetch
from verify import verify_cluster

pytestmark = [pytest.mark.cluster]

TOPIC = "moves"
PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
OFFSET_OUT_OF_RANGE = 1
SETTLE_TIMEOUT_S = 60  # a moved replica copies the partition, then joins the ISR


def strata_cli(c: Cluster, *args: str) -> str:
    """Runs `strata cluster ARGS --bootstrap <live brokers>`; fails the test on a non-zero exit."""
    cmd = [str(strata_bin()), "cluster", *args, "--bootstrap", c.live_bootstrap()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def status(c: Cluster) -> dict:
    return json.loads(strata_cli(c, "status", "--json"))


def progress(w: Workload, n: int = 100, timeout_s: float = 30) -> None:
    w.wait_acked(w.acked() + n, timeout_s=timeout_s)


def under_load(cluster_factory, **cluster_args):
    require_cluster_support()
    c = cluster_factory(**cluster_args)
    c.create_topic(TOPIC, PARTITIONS, 3, TOPIC_CONFIG)
    w = Workload(c.bootstrap, TOPIC, PARTITIONS, idempotent=True).start()
    w.wait_acked(200)
    return c, w


def wait_settled(c: Cluster, targets: dict[int, list[int]]) -> dict:
    """Every partition in `targets` has exactly those replicas (in that order), all in sync,
    and no reassignment is listed any more."""
    def check():
        parts = c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=SETTLE_TIMEOUT_S)
        for p, want in targets.items():
            if list(parts[p].replicas) != want:
                return None
        if "no reassignment in progress" not in strata_cli(c, "reassign", "--list"):
            return None
        return parts
    return c.poll_until(f"reassignments {targets} complete", check, SETTLE_TIMEOUT_S, interval_s=0.5)


def test_scale_out_reassign_and_preferred_election(cluster_factory, request):
    """Proves online scale-out: while producers and a consumer run, a fourth broker joins,
    `strata cluster reassign` moves one partition onto it (as preferred leader) and moves
    another partition off its current leader; the moves are listed while they run, complete
    with the new replicas in sync, the removed replicas delete their copies, and
    `strata cluster elect` then puts every partition's preferred replica in the lead. No
    acknowledged write is lost and every replica, the new one included, holds the same log."""
    c, w = under_load(cluster_factory)
    n4 = c.add_broker()
    assert n4 == 4
    assert {b["id"] for b in status(c)["brokers"]} == {1, 2, 3, 4}
    progress(w)

    parts = c.partitions(TOPIC)
    # Partition 0: node 4 replaces the last replica and becomes the preferred leader.
    old0 = list(parts[0].replicas)
    target0 = [n4, *old0[:2]]
    # Partition 1: its current leader is removed, so leadership must move.
    leader1 = parts[1].leader
    target1 = [r for r in parts[1].replicas if r != leader1] + [n4]
    strata_cli(c, "reassign", "--topic", TOPIC, "--partition", "0", "--replicas", ",".join(map(str, target0)))
    strata_cli(c, "reassign", "--topic", TOPIC, "--partition", "1", "--replicas", ",".join(map(str, target1)))
    progress(w)
    parts = wait_settled(c, {0: target0, 1: target1})
    assert parts[1].leader != leader1 and parts[1].leader in target1
    progress(w)

    # The brokers dropped from a partition delete their copy once they apply the change.
    removed0 = old0[2]
    gone = [c.nodes[removed0].data_dir / f"{TOPIC}-0", c.nodes[leader1].data_dir / f"{TOPIC}-1"]
    c.poll_until(f"moved-away replicas deleted ({gone})", lambda: not any(d.exists() for d in gone), 10)

    strata_cli(c, "elect", "--topic", TOPIC)
    def preferred_lead():
        ps = c.wait_topic(TOPIC, PARTITIONS, full_isr=True)
        return ps if all(ps[p].leader == ps[p].replicas[0] for p in ps) else None
    parts = c.poll_until("preferred replicas lead", preferred_lead, 30)
    assert parts[0].leader == n4
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid,
                   added_broker=n4, reassigned={0: target0, 1: target1})


def test_cancelled_reassignment_restores_replicas(cluster_factory, request):
    """Proves a reassignment can be cancelled: the target set is added, then `reassign
    --cancel` goes back to the original replicas (the adding replica is dropped) while the
    workload runs, and nothing acknowledged is lost."""
    c, w = under_load(cluster_factory)
    n4 = c.add_broker()
    original = list(c.partitions(TOPIC)[2].replicas)
    target = [n4, *original[1:]]
    # Stall the new replica so the move cannot finish before it is cancelled.
    c.pause(n4)
    try:
        strata_cli(c, "reassign", "--topic", TOPIC, "--partition", "2", "--replicas", ",".join(map(str, target)))
        listed = strata_cli(c, "reassign", "--list", "--topic", TOPIC)
        assert f"{TOPIC}" in listed and str(n4) in listed, listed
        strata_cli(c, "reassign", "--topic", TOPIC, "--partition", "2", "--cancel")
    finally:
        c.resume(n4)
    # KRaft's order (PartitionReassignmentRevert): the replicas during the move are the
    # target followed by the removing ones; a cancel drops the adding ones from that list.
    moving = target + [r for r in original if r not in target]
    reverted = [r for r in moving if r in original]
    assert sorted(reverted) == sorted(original)
    wait_settled(c, {2: reverted})
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, cancelled=2)


def test_dedicated_controllers(cluster_factory, request):
    """Proves the dedicated-controller layout (KRaft's process.roles=controller): three
    controller-only voters and three broker-only nodes. Clients see only the brokers (and a
    broker as controller_id, as KRaft reports); each controller in turn is killed with -9 —
    so the active one is among them — while the workload keeps acking and a topic is created
    through the surviving quorum; then the checker runs."""
    roles = {1: "controller", 2: "controller", 3: "controller", 4: "broker", 5: "broker", 6: "broker"}
    c, w = under_load(cluster_factory, size=6, roles=roles)
    md = c.metadata()
    assert set(md.brokers) == {4, 5, 6}
    assert md.controller_id in {4, 5, 6}
    # The active controller keeps its role until it dies, so killing each voter in turn —
    # the next only once the restarted one has caught up with the log — kills it once.
    for n in (1, 2, 3):
        c.kill9(n)
        progress(w)
        c.create_topic(f"made-without-controller-{n}", 1, 3, TOPIC_CONFIG)
        c.restart(n)
        c.nodes[n].wait_log("metadata log caught up")
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, controllers_killed=[1, 2, 3])


def follower_log_start_reached(c: Cluster, topic: str, followers: list[int], start: int) -> bool:
    """Each follower, read as Kafka's debugging consumer (replica id -2, served from its own
    log), refuses offset start-1 as out of range and serves offset `start`."""
    for n in followers:
        with kproto.connect(c.nodes[n].address, 5) as sock:
            for corr, offset in ((1, start - 1), (2, start)):
                sock.sendall(kproto.request(replica_fetch.API_FETCH, 4, corr,
                                            replica_fetch.fetch_body(topic, 0, offset)))
                _corr, body = kproto.recv_response(sock)
                error, _hw, _records = replica_fetch.parse_fetch_v4(body)
                if error != (OFFSET_OUT_OF_RANGE if offset < start else 0):
                    return False
    return True


def test_delete_records_reaches_followers(cluster_factory):
    """Proves DeleteRecords is replicated, as Kafka's followers follow the leader's log start
    offset from fetch responses: after deleting below offset 50 on the leader, every follower
    refuses offsets below 50; the leader is then killed and the new leader reports 50 as the
    earliest offset."""
    c = cluster_factory()
    topic = "trimmed"
    c.create_topic(topic, 1, 3, TOPIC_CONFIG)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(100):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    admin = c.admin()  # must outlive the future
    result = admin.delete_records([TopicPartition(topic, 0, 50)], operation_timeout=30, request_timeout=30)
    assert list(result.values())[0].result(timeout=30).low_watermark == 50

    old = c.leader(topic, 0)
    followers = [n for n in c.partitions(topic)[0].replicas if n != old]
    c.poll_until("followers' log start at 50",
                 lambda: follower_log_start_reached(c, topic, followers, 50), 20)
    c.kill9(old)
    c.leader(topic, 0, not_on=old, timeout_s=20)

    def watermarks():
        cons = Consumer({"bootstrap.servers": c.live_bootstrap(), "group.id": "trim-check"})
        try:
            return cons.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        finally:
            cons.close()
    assert c.poll_until("watermarks from the new leader", watermarks, 20) == (50, 100)


def test_auto_leader_rebalance(cluster_factory, request):
    """Proves auto.leader.rebalance.enable (on by default, as in Kafka): the preferred leader
    of a partition is killed with -9, leadership fails over, and once it is restarted and in
    sync again the controller hands leadership back by itself within
    leader.imbalance.check.interval.seconds (2 s here), while the workload runs."""
    c, w = under_load(cluster_factory, env={"STRATA_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": "2"})
    parts = c.partitions(TOPIC)
    preferred = parts[0].replicas[0]
    assert parts[0].leader == preferred
    c.kill9(preferred)
    c.leader(TOPIC, 0, not_on=preferred, timeout_s=20)
    progress(w)
    c.restart(preferred)

    def preferred_lead():
        ps = c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=60)
        return ps if all(ps[p].leader == ps[p].replicas[0] for p in ps) else None
    c.poll_until("preferred replicas lead again", preferred_lead, 60)
    progress(w)
    verify_cluster(c, w.stop(), TOPIC, PARTITIONS, request.node.nodeid, killed=[preferred])


def test_unopenable_replica_leaves_isr_and_leadership(cluster_factory):
    """Proves a replica whose log cannot be opened (a regular file where node 1's partition
    directory belongs) does not count as in sync or lead: node 1 reports it, the controller
    takes 1 out of every ISR and moves the leadership it had (it is the preferred leader of
    one of the three partitions) to another in-sync replica, `strata cluster status` lists 1
    offline with the reason, and acks=all writes go on (min.insync.replicas=2); once the files
    are gone, restarting node 1 brings it back in sync."""
    require_cluster_support()
    c = cluster_factory()
    topic = "sick"
    for i in range(3):
        (c.nodes[1].data_dir / f"{topic}-{i}").write_text("a file where the partition directory belongs\n")
    c.create_topic(topic, 3, 3, TOPIC_CONFIG, full_isr=False)

    def partitions():
        return [p for p in status(c)["partitions"] if p["topic"] == topic]

    def offline_settled():
        ps = partitions()
        ok = len(ps) == 3 and all(
            p["leader"] in (2, 3) and sorted(p["isr"]) == [2, 3] and p["offline_replicas"] == [1] for p in ps)
        return ps if ok else None

    ps = c.poll_until("replica 1 offline everywhere, 2 or 3 leading", offline_settled, SETTLE_TIMEOUT_S)
    for p in ps:
        assert "cannot open the log" in p["offline_reasons"]["1"], p
    assert f"{topic}-0 on broker 1: cannot open the log" in strata_cli(c, "status")
    assert any(p["leader_epoch"] > 0 for p in ps), "node 1 led one partition: its leadership moved"

    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "message.timeout.ms": 30000})
    delivered = []
    for i in range(3):
        producer.produce(topic, b"v", partition=i, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(40)
    assert delivered == [None] * 3, f"acks=all writes on the two healthy replicas: {delivered}"

    for i in range(3):
        (c.nodes[1].data_dir / f"{topic}-{i}").unlink()
    c.restart(1)

    def back_in_sync():
        ps = partitions()
        ok = len(ps) == 3 and all(sorted(p["isr"]) == [1, 2, 3] and not p["offline_replicas"] for p in ps)
        return ps if ok else None

    for p in c.poll_until("replica 1 back in sync", back_in_sync, SETTLE_TIMEOUT_S):
        assert p["offline_reasons"] == {}, p
