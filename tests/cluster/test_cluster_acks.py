"""What a leader answers an acks=all produce when the ISR shrinks under it, and what
CreateTopics reports for a replicated topic: requests as raw frames (kproto), so the error
codes are the broker's own, not a client's retries."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest

from harness import require_cluster_support
import kproto  # after harness, which puts tests/clients on sys.path

pytestmark = [pytest.mark.cluster]

NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
PRODUCE_TIMEOUT_MS = 25_000  # well past replica.lag.time.max.ms (CLUSTER_ENV) plus an ISR change


def test_acks_all_answers_not_enough_replicas_after_append_when_the_isr_shrank(cluster_factory):
    """Proves Kafka's rule for acks=all (checkEnoughReplicasReachOffset): a batch appended
    while the ISR had min.insync.replicas members, whose wait ends after the ISR shrank below
    it, answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (20), not success. Topic with replication
    factor 3 and min.insync.replicas=3; one follower is paused (SIGSTOP) just before the
    produce, so the append is allowed, the HW waits, the leader drops the follower from the
    ISR after replica.lag.time.max.ms, and the HW then passes the batch with an ISR of 2.
    Also proves CreateTopics v7 reports the replication factor made (3), not 1."""
    require_cluster_support()
    c = cluster_factory()
    topic = "shrinking"
    R = CreateTopicsRequest
    made = kproto.call(c.bootstrap.split(",")[0], R[7](
        topics=[R.CreatableTopic(
            name=topic, num_partitions=1, replication_factor=-1, assignments=[],
            configs=[R.CreatableTopic.CreatableTopicConfig(name="min.insync.replicas", value="3")])],
        timeout_ms=30_000, validate_only=False), timeout_s=40)
    [result] = made.topics
    assert result.error_code == 0, result
    assert (result.num_partitions, result.replication_factor) == (1, 3), result
    c.wait_topic(topic, 1, full_isr=True)
    leader = c.leader(topic, 0)
    follower = next(n for n in c.partitions(topic)[0].replicas if n != leader)

    c.pause(follower)
    batch = kproto.record_batch([(None, b"appended-with-a-full-isr")])
    body = kproto.produce_v3_body(topic, 0, batch, acks=-1, timeout_ms=PRODUCE_TIMEOUT_MS)
    with kproto.connect(c.nodes[leader].address, timeout_s=PRODUCE_TIMEOUT_MS / 1000 + 15) as sock:
        sock.sendall(kproto.request(kproto.API_PRODUCE, 3, 5, body))
        corr, resp = kproto.recv_response(sock)
    c.resume(follower)
    assert corr == 5
    [(_, _, error_code, _)] = kproto.parse_produce_v3(resp)
    assert error_code == NOT_ENOUGH_REPLICAS_AFTER_APPEND, (
        f"acks=all answered {error_code} after the ISR shrank below min.insync.replicas")
