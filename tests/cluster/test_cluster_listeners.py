"""A cluster whose brokers do not all have the same listeners (Kafka's KAFKA-7235 case): nodes
1 and 2 have PLAINTEXT and a second plaintext listener EXTRA, node 3 only PLAINTEXT. A client
that came in on EXTRA is answered as Kafka answers it: brokers without EXTRA are left out of
Metadata's brokers, a partition they lead has no leader (-1) with LISTENER_NOT_FOUND (72) from
Metadata v6 and LEADER_NOT_AVAILABLE (5) before, and they are offline replicas; on PLAINTEXT
everything is as usual. A real client on EXTRA produces to the partitions it can reach.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from kafka.protocol.metadata import MetadataRequest

from harness import Cluster, free_port, require_cluster_support
import kproto  # after harness, which puts tests/clients on sys.path

pytestmark = [pytest.mark.cluster]

TOPIC = "listeners"
LISTENER_NOT_FOUND = 72
LEADER_NOT_AVAILABLE = 5
PARTITIONS = 6


def metadata(bootstrap: str, version: int):
    R = MetadataRequest
    if version >= 4:
        req = R[version](topics=[R.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
    else:
        req = R[version](topics=[R.MetadataRequestTopic(name=TOPIC)])
    return kproto.call(bootstrap, req)


def partitions(resp) -> dict[int, tuple[int, int, list[int]]]:
    [t] = resp.topics
    return {p.partition_index: (p.error_code, p.leader_id, sorted(p.offline_replicas))
            for p in t.partitions}


def test_a_broker_without_the_listener_is_not_a_leader_on_it(cluster_factory):
    require_cluster_support()
    c: Cluster = cluster_factory(start=False)
    extra = {}
    for n in (1, 2):
        node = c.nodes[n]
        extra[n] = free_port()
        node.listeners = f"PLAINTEXT://{node.address},EXTRA://127.0.0.1:{extra[n]}"
        node.env["STRATA_LISTENER_SECURITY_PROTOCOL_MAP"] = "EXTRA:PLAINTEXT"
    c.start()
    # One replica per partition, spread over the three nodes by the placement.
    c.create_topic(TOPIC, PARTITIONS, 1)
    plain = c.nodes[1].address
    deadline = time.monotonic() + 30
    while True:
        led = partitions(metadata(plain, 12))
        if all(err == 0 and leader > 0 for err, leader, _ in led.values()):
            break
        assert time.monotonic() < deadline, led
        time.sleep(0.2)
    leaders = {p: leader for p, (_, leader, _) in led.items()}
    assert 3 in leaders.values() and {1, 2} & set(leaders.values()), leaders

    on_extra = f"127.0.0.1:{extra[1]}"
    resp = metadata(on_extra, 12)
    assert sorted((b.node_id, b.port) for b in resp.brokers) == [(1, extra[1]), (2, extra[2])]
    assert partitions(resp) == {
        p: (LISTENER_NOT_FOUND, -1, [3]) if leader == 3 else (0, leader, []) for p, leader in leaders.items()}
    # Before v6 clients do not know code 72: LEADER_NOT_AVAILABLE, as Kafka answers them.
    old = partitions(metadata(on_extra, 5))
    assert {p: old[p] for p, leader in leaders.items() if leader == 3} == {
        p: (LEADER_NOT_AVAILABLE, -1, [3]) for p, leader in leaders.items() if leader == 3}
    # On PLAINTEXT, which every node has, node 3 leads its partitions as usual.
    resp = metadata(plain, 12)
    assert sorted(b.node_id for b in resp.brokers) == [1, 2, 3]
    assert partitions(resp) == {p: (0, leader, []) for p, leader in leaders.items()}

    # librdkafka bootstrapped on EXTRA reaches the partitions led by nodes 1 and 2.
    p = Producer({"bootstrap.servers": on_extra, "acks": "all", "message.timeout.ms": 20000})
    for partition, leader in leaders.items():
        if leader != 3:
            p.produce(TOPIC, value=b"via-extra", partition=partition)
    assert p.flush(30) == 0
