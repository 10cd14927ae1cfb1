"""DescribeProducers on every replica (issue 13): Kafka answers it on any broker hosting a
replica of the partition, leader or follower (`ReplicaManager.activeProducerState` serves any
hosted partition; a follower rebuilds its producer state from the batches it replicates), so
`kafka-transactions.sh describe-producers` may ask any replica. Raw frames (kproto), so the
error codes are the broker's own."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka.protocol.admin import DescribeProducersRequest

from harness import require_cluster_support
import kproto  # after harness, which puts tests/clients on sys.path

pytestmark = [pytest.mark.cluster]

NOT_LEADER_OR_FOLLOWER = 6


def describe_producers(address: str, topic: str, partition: int) -> tuple[int, list[tuple]]:
    """DescribeProducers v0 of one partition asked of one broker: (error, sorted producers as
    (producer id, epoch, last sequence, open transaction's first offset))."""
    R = DescribeProducersRequest[0]
    resp = kproto.call(address, R(topics=[R.TopicRequest(name=topic, partition_indexes=[partition])]))
    [p] = resp.topics[0].partitions
    return p.error_code, sorted((s.producer_id, s.producer_epoch, s.last_sequence,
                                 s.current_txn_start_offset) for s in p.active_producers)


def produce(bootstrap: str, topic: str, conf: dict, values: list[bytes], transactional: bool) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 0, **conf})
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
        p.flush(30)  # one batch per record: the last sequence counts them
    if transactional:
        p.commit_transaction(30)
    assert p.flush(30) == 0


def test_describe_producers_on_every_replica(cluster_factory):
    """Proves every replica of an RF3 partition answers DescribeProducers with the same
    producers as its leader (ids, epochs, last sequences, no open transaction) after an
    idempotent and a transactional producer wrote to it, and that a transaction left open is
    reported by every replica at the same first offset. A broker holding no replica of a
    partition answers NOT_LEADER_OR_FOLLOWER. Before the fix followers answered
    NOT_LEADER_OR_FOLLOWER."""
    require_cluster_support()
    c = cluster_factory()
    topic = "producers-rf3"
    c.create_topic(topic, 1, replication_factor=3, config={"min.insync.replicas": "2"})
    produce(c.bootstrap, topic, {}, [b"idempotent-%d" % i for i in range(3)], transactional=False)
    produce(c.bootstrap, topic, {"transactional.id": "producers-txn"},
            [b"transactional-%d" % i for i in range(4)], transactional=True)

    # A transaction left open (the producer is dropped without committing or aborting).
    hanging = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "producers-open",
                        "acks": "all", "transaction.timeout.ms": 600_000})
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(topic, b"open-0", partition=0)
    hanging.produce(topic, b"open-1", partition=0)
    assert hanging.flush(30) == 0

    leader = c.leader(topic, 0)
    replicas = c.partitions(topic)[0].replicas
    assert len(replicas) == 3, replicas
    err, expected = describe_producers(c.nodes[leader].address, topic, 0)
    assert err == 0, err
    assert len(expected) == 3, expected
    [idempotent] = [p for p in expected if p[2] == 2 and p[3] == -1]
    [committed] = [p for p in expected if p[2] == 3 and p[3] == -1]
    [still_open] = [p for p in expected if p[3] >= 0]
    # After 3 + 4 records and the COMMIT marker (written after EndTxn answered, so it may
    # come after the open transaction's first batch).
    assert still_open[3] in (7, 8), still_open

    answers = {}
    deadline = time.monotonic() + 30
    while True:
        answers = {n: describe_producers(c.nodes[n].address, topic, 0) for n in replicas}
        # Followers apply what they fetch a moment after the leader.
        if all(a == (0, expected) for a in answers.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert answers == {n: (0, expected) for n in replicas}, (leader, idempotent, committed)

    # A replica-less broker: an RF1 topic placed on one node, asked of another.
    single = "producers-rf1"
    c.create_topic(single, 1, replication_factor=1)
    [holder] = c.partitions(single)[0].replicas
    other = next(n for n in c.nodes if n != holder)
    assert describe_producers(c.nodes[other].address, single, 0) == (NOT_LEADER_OR_FOLLOWER, [])
    assert describe_producers(c.nodes[holder].address, single, 0) == (0, [])
    del hanging
