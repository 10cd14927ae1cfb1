"""Metrics on a 3-node cluster: consumer-group lag for partitions the coordinator holds no
replica of.

A group's coordinator knows the group's committed offsets but holds the high watermark only
of the partitions it has a replica of; Kafka-style exporters report lag for every committed
partition. The coordinator asks the other leaders at scrape time (one ListOffsets per
leader broker, cached a few seconds: src/server/lag_watermarks.rs).
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness import free_port, require_cluster_support
from test_cluster_groups import OFFSETS_TOPIC, offsets_partition

pytestmark = [pytest.mark.cluster]

PARTITIONS = 6
RECORDS = 10
COMMITTED = 4


def scrape_lag(port: int, group: str, topic: str) -> dict[int, float]:
    """{partition: lag} of `group` on `topic` from one node's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = f'strata_consumergroup_lag{{group="{group}",topic="{topic}",partition="'
    lags = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            partition, value = line[len(prefix):].split('"} ')
            lags[int(partition)] = float(value)
    return lags


def test_group_lag_covers_partitions_led_by_other_brokers(cluster_factory):
    """Proves strata_consumergroup_lag on the group's coordinator has a series for every
    partition the group committed, including those whose only replica is on another broker
    (replication factor 1 over 6 partitions: most are elsewhere), each the leader's high
    watermark (10) minus the committed offset (4); the other brokers render none for the
    group (they do not coordinate it)."""
    require_cluster_support()
    c = cluster_factory(start=False)
    ports = {}
    for n, node in c.nodes.items():
        ports[n] = free_port()
        node.env["STRATA_METRICS_LISTEN"] = f"127.0.0.1:{ports[n]}"
    c.start()
    topic, group = "lagged", "lag-group"
    # min.insync.replicas is 2 on these nodes: one replica must be enough here.
    c.create_topic(topic, PARTITIONS, replication_factor=1, config={"min.insync.replicas": "1"})
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for part in range(PARTITIONS):
        for _ in range(RECORDS):
            p.produce(topic, b"v", partition=part)
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, part, COMMITTED) for part in range(PARTITIONS)],
                    asynchronous=False)
    consumer.close()
    coordinator = c.leader(OFFSETS_TOPIC, offsets_partition(group))
    leaders = {part: c.leader(topic, part) for part in range(PARTITIONS)}
    elsewhere = sorted(part for part, leader in leaders.items() if leader != coordinator)
    assert elsewhere, f"every partition led by the coordinator {coordinator}: {leaders}"
    want = {part: float(RECORDS - COMMITTED) for part in range(PARTITIONS)}
    deadline = time.monotonic() + 30
    lags = {}
    while time.monotonic() < deadline:
        lags = scrape_lag(ports[coordinator], group, topic)
        if lags == want:
            break
        time.sleep(0.5)
    print(f"coordinator {coordinator}, leaders {leaders}, lag {lags}")
    assert lags == want, (coordinator, leaders, lags)
    for n, port in ports.items():
        if n != coordinator:
            assert scrape_lag(port, group, topic) == {}, n
