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


def lagged_cluster(cluster_factory, env: dict[str, str] | None = None):
    """A 3-node cluster with metrics listeners (and `env` on every node), `topic` (RF 1 over
    6 partitions, RECORDS each) and `group` committed at COMMITTED on every partition.
    Returns (cluster, metrics ports by node, coordinator, leaders by partition, topic, group)."""
    require_cluster_support()
    c = cluster_factory(start=False)
    ports = {}
    for n, node in c.nodes.items():
        ports[n] = free_port()
        node.env["STRATA_METRICS_LISTEN"] = f"127.0.0.1:{ports[n]}"
        node.env.update(env or {})
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
    return c, ports, coordinator, leaders, topic, group


def wait_lag(port: int, group: str, topic: str, want: dict[int, float]) -> dict[int, float]:
    """Scrapes until the lag series are `want` (30 s at most); the last scrape's."""
    deadline = time.monotonic() + 30
    lags = {}
    while time.monotonic() < deadline:
        lags = scrape_lag(port, group, topic)
        if lags == want:
            break
        time.sleep(0.5)
    return lags


def test_group_lag_covers_partitions_led_by_other_brokers(cluster_factory):
    """Proves strata_consumergroup_lag on the group's coordinator has a series for every
    partition the group committed, including those whose only replica is on another broker
    (replication factor 1 over 6 partitions: most are elsewhere), each the leader's high
    watermark (10) minus the committed offset (4); the other brokers render none for the
    group (they do not coordinate it)."""
    c, ports, coordinator, leaders, topic, group = lagged_cluster(cluster_factory)
    elsewhere = sorted(part for part, leader in leaders.items() if leader != coordinator)
    assert elsewhere, f"every partition led by the coordinator {coordinator}: {leaders}"
    want = {part: float(RECORDS - COMMITTED) for part in range(PARTITIONS)}
    lags = wait_lag(ports[coordinator], group, topic, want)
    print(f"coordinator {coordinator}, leaders {leaders}, lag {lags}")
    assert lags == want, (coordinator, leaders, lags)
    for n, port in ports.items():
        if n != coordinator:
            assert scrape_lag(port, group, topic) == {}, n


def test_group_lag_scrape_answers_while_a_leader_hangs(cluster_factory):
    """Proves a leader that accepts connections but never answers (SIGSTOPped) cannot hang
    the coordinator's /metrics: once the cached answers have expired, the scrape still
    answers within urllib's 10 s (Prometheus' default scrape timeout), with the lag of every
    partition the running brokers lead and none for the hung leader's; after SIGCONT the
    hung leader's partitions come back. The brokers' session timeout is a minute here so
    that the controller does not fence the hung broker (which would leave its partitions
    leaderless, never asked): the scrape must wait for it and give up at its deadline
    (METRICS_REMOTE_HW_TIMEOUT_MS, 1 s), which the scrape's duration shows."""
    c, ports, coordinator, leaders, topic, group = lagged_cluster(
        cluster_factory, {"STRATA_BROKER_SESSION_TIMEOUT_MS": "60000"})
    hung = next((leaders[part] for part in sorted(leaders) if leaders[part] != coordinator), None)
    assert hung is not None, f"every partition led by the coordinator {coordinator}: {leaders}"
    want = {part: float(RECORDS - COMMITTED) for part in range(PARTITIONS)}
    assert wait_lag(ports[coordinator], group, topic, want) == want
    c.pause(hung)
    try:
        # Past the answers' reuse (METRICS_REMOTE_HW_CACHE_MS, 5 s), so the scrape asks.
        time.sleep(5.5)
        answering = {part: lag for part, lag in want.items() if leaders[part] != hung}
        started = time.monotonic()
        lags = scrape_lag(ports[coordinator], group, topic)
        took = time.monotonic() - started
        print(f"hung leader {hung}: scrape took {took:.2f} s, lag {lags}")
        assert lags == answering, (coordinator, hung, leaders, lags)
        # A lower bound only (load makes it longer, never shorter): the scrape did wait for
        # the hung leader, so the deadline, not a fenced leader, is what let it answer.
        assert took >= 0.9, took
    finally:
        c.resume(hung)
    assert wait_lag(ports[coordinator], group, topic, want) == want
