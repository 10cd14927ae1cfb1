"""Replicas of topics deleted while their broker was down (issue 13). A broker that comes back
after its topic was deleted holds a directory no metadata places on it: Kafka (KRaft) compares
its log directories with the metadata image once it has caught up, renames each stray log
`-stray` and deletes it. And a topic deleted and created again under the same name while a
broker was down is a new, empty log on that broker too: the old directory's
`partition.metadata` names the old topic id, so its data is never served and never mixes with
the new topic's."""

from __future__ import annotations

import time

import pytest
import subprocess

from confluent_kafka import Producer

from harness import require_cluster_support, strata_bin
from replica_fetch import read_replica

pytestmark = [pytest.mark.cluster]


def produce(bootstrap: str, topic: str, values: list[str], partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "compression.type": "none", "linger.ms": 0})
    failed = []
    for v in values:
        p.produce(topic, v.encode(), partition=partition,
                  on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert p.flush(30) == 0 and not failed, failed


def strata_cluster(c, *args: str) -> str:
    """`strata cluster ARGS --bootstrap <live brokers>`; fails the test on a non-zero exit."""
    cmd = [str(strata_bin()), "cluster", *args, "--bootstrap", c.live_bootstrap()]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r.stdout


def delete_topic(cluster, topic: str) -> None:
    admin = cluster.admin()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(timeout=40)
    cluster.poll_until(f"{topic} deleted", lambda: topic not in cluster.metadata().topics, 30)


def partition_dirs(node, topic: str) -> list[str]:
    """The names in `node`'s data directory that belong to `topic`: live (`topic-N`) or moved
    aside for deletion (`topic-N.<uuid>-stray` / `-delete`)."""
    return sorted(p.name for p in node.data_dir.iterdir() if p.name.startswith(f"{topic}-"))


def test_stray_log_of_a_topic_deleted_while_down_is_removed(cluster_factory):
    """Proves a broker stopped (SIGTERM) while its RF3 topic is deleted removes that topic's
    directories when it starts again, once it has caught up with the metadata (before the fix
    they stayed for ever), logging each as a stray log, while the directories of a topic that
    still exists stay and keep serving their records."""
    require_cluster_support()
    c = cluster_factory()
    c.create_topic("doomed", 2, replication_factor=3)
    c.create_topic("kept", 1, replication_factor=3)
    produce(c.bootstrap, "doomed", [f"d{i}" for i in range(20)])
    produce(c.bootstrap, "kept", [f"k{i}" for i in range(5)])
    # Not the active controller: the admin requests below go to it while the victim is down.
    victim = max(n for n in c.nodes if n != c.controller_id())
    node = c.nodes[victim]
    c.wait_topic("kept", 1, full_isr=True)
    c.wait_topic("doomed", 2, full_isr=True)
    assert node.stop() == 0
    assert partition_dirs(node, "doomed") == ["doomed-0", "doomed-1"]

    delete_topic(c, "doomed")
    c.restart(victim)
    c.poll_until("stray logs removed", lambda: partition_dirs(node, "doomed") == [], 30)
    log = node.log_path.read_text(errors="replace")
    assert log.count("stray log: no replica of it is placed on this broker") == 2, node.log_tail()
    assert partition_dirs(node, "kept") == ["kept-0"]
    # The kept topic's replica on the restarted broker still holds its records. A read of a
    # follower (the debugging consumer, as in Kafka) stops at that replica's high watermark,
    # which it learns from the leader's next fetch answer after the restart: poll for it.
    c.wait_topic("kept", 1, full_isr=True)
    want = [f"k{i}" for i in range(5)]
    c.poll_until("the restarted replica serves the kept records",
                 lambda: [v for _, _, v in read_replica(node.address, "kept", 0, 1_000)] == want, 10)


def test_topic_recreated_while_down_is_new_and_empty_there(cluster_factory):
    """Proves a topic deleted and created again under the same name while one of its brokers
    is down reaches that broker, once back, as the new topic: its replica holds exactly the
    new topic's records (fetched from the leader), none of the old ones, and the old
    directory's data is gone from disk."""
    require_cluster_support()
    c = cluster_factory()
    topic = "again"
    c.create_topic(topic, 1, replication_factor=3)
    produce(c.bootstrap, topic, [f"old-{i}" for i in range(10)])
    c.wait_topic(topic, 1, full_isr=True)
    victim = max(n for n in c.nodes if n != c.controller_id())
    node = c.nodes[victim]
    assert node.stop() == 0
    # Fenced (out of Metadata): new replicas are placed on the live brokers only.
    c.wait_brokers(set(c.nodes) - {victim})
    old_id = (node.data_dir / f"{topic}-0" / "partition.metadata").read_text()

    delete_topic(c, topic)
    # Created again on the live brokers, then reassigned onto the stopped one too (a
    # reassignment may name a registered broker that is down, as in Kafka): the replica that
    # finds the old directory when its broker returns.
    live = sorted(n for n in c.nodes if n != victim)
    c.create_topic(topic, 1, replication_factor=2)
    strata_cluster(c, "reassign", "--topic", topic, "--partition", "0",
                   "--replicas", ",".join(map(str, [*live, victim])))
    c.poll_until(f"{topic} placed on node {victim}",
                 lambda: victim in c.partitions(topic)[0].replicas, 30)
    produce(c.bootstrap, topic, [f"new-{i}" for i in range(3)])

    c.restart(victim)
    c.wait_topic(topic, 1, full_isr=True, timeout_s=60)
    new = [f"new-{i}" for i in range(3)]
    deadline = time.monotonic() + 30
    while True:
        got = [v for _, _, v in read_replica(node.address, topic, 0, 1_000)]
        if got == new or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got == new
    assert (node.data_dir / f"{topic}-0" / "partition.metadata").read_text() != old_id
    assert partition_dirs(node, topic) == [f"{topic}-0"], "the old log is not left aside"
