"""acks=1 produce under a closed-loop load on an RF3 topic (three brokers on one disk, where the
followers cannot keep up with a leader that answers as soon as it has appended): the leader
holds its answers while the client bytes above the high watermark exceed
replica_produce_lag_max_bytes, so the HW stays within that bound (plus what the producer has in
flight) of the log end while the load runs, the followers have next to nothing left to copy
when it stops, and a leader killed -9 right after loses nothing it acknowledged."""

from __future__ import annotations

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from harness import free_port, require_cluster_support

pytestmark = [pytest.mark.cluster]

TOPIC = "paced"
PARTITIONS = 2
RECORD_BYTES = 1024
BOUND_BYTES = 1024 * 1024
BATCH_BYTES = 64 * 1024
IN_FLIGHT = 5
LOAD_S = 5
# What may sit above the HW besides the acknowledged bound: the batches the producer has in
# flight (appended, their answers held) and the bookkeeping's granule, with room to spare.
SLACK_BYTES = IN_FLIGHT * BATCH_BYTES + 512 * 1024
# After the load, the followers copy at most the bound and the batches in flight: a second on
# an idle machine, generous here for a loaded one.
CATCH_UP_S = 15


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def partition_offsets(text: str, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (high watermark, log end offset)} of `topic`'s replicas in one scrape."""
    found: dict[int, dict[str, int]] = {}
    for name in ("strata_partition_high_watermark", "strata_partition_log_end_offset"):
        prefix = f'{name}{{topic="{topic}",partition="'
        for line in text.splitlines():
            if line.startswith(prefix):
                partition, value = line[len(prefix):].split('"} ')
                found.setdefault(int(partition), {})[name] = int(float(value))
    return {p: (v["strata_partition_high_watermark"], v["strata_partition_log_end_offset"])
            for p, v in found.items() if len(v) == 2}


def counter(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_acks1_lag_stays_bounded_and_a_killed_leader_loses_nothing_acknowledged(cluster_factory):
    """Proves replica_produce_lag_max_bytes (1 MiB here) holds under a closed-loop acks=1 load
    from a real client (librdkafka, 5 requests in flight, 64 KiB batches of 1 KiB records) on
    an RF3 topic of two partitions: sampled from each leader's /metrics while the load runs,
    log end minus HW never exceeds the bound plus what the producer has in flight; the leaders
    held answers (strata_produce_lag_waits_total > 0); within CATCH_UP_S after the load the HW
    reaches every acknowledged record; and after partition 0's leader is killed -9, every
    acknowledged record of both partitions is read back, at its offset, from the new leaders."""
    require_cluster_support()
    c = cluster_factory(start=False)
    ports = {}
    for n, node in c.nodes.items():
        ports[n] = free_port()
        node.env["STRATA_METRICS_LISTEN"] = f"127.0.0.1:{ports[n]}"
        node.env["STRATA_REPLICA_PRODUCE_LAG_MAX_BYTES"] = str(BOUND_BYTES)
        node.env["STRATA_LOG_FLUSH_POLICY"] = "sync"
    c.start()
    c.create_topic(TOPIC, PARTITIONS, replication_factor=3)
    leaders = {p: c.leader(TOPIC, p) for p in range(PARTITIONS)}

    acked: dict[tuple[int, int], int] = {}
    failed: list[str] = []

    def delivered(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked[(msg.partition(), msg.offset())] = int(msg.value()[:12])

    producer = Producer({
        "bootstrap.servers": c.bootstrap, "acks": "1", "linger.ms": 2,
        "batch.size": BATCH_BYTES, "max.in.flight.requests.per.connection": IN_FLIGHT,
        "queue.buffering.max.messages": 20_000, "enable.idempotence": False,
    })
    pad = b"x" * (RECORD_BYTES - 12)
    worst: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
    i = 0
    end = time.monotonic() + LOAD_S
    next_sample = 0.0
    while time.monotonic() < end:
        try:
            producer.produce(TOPIC, b"%012d" % i + pad, partition=i % PARTITIONS,
                             on_delivery=delivered)
            i += 1
        except BufferError:
            producer.poll(0.005)
        producer.poll(0)
        if time.monotonic() >= next_sample:
            next_sample = time.monotonic() + 0.1
            for p, leader in leaders.items():
                hw, leo = partition_offsets(scrape(ports[leader]), TOPIC).get(p, (0, 0))
                worst[p] = max(worst[p], leo - hw)
    assert producer.flush(60) == 0, "the producer could not deliver everything"
    assert not failed, f"{len(failed)} deliveries failed, first: {failed[0]}"
    assert acked, "nothing was acknowledged"

    limit_records = (BOUND_BYTES + SLACK_BYTES) // RECORD_BYTES
    assert all(lag <= limit_records for lag in worst.values()), (
        f"log end - HW on the leaders reached {worst} records, more than {limit_records}")
    waits = sum(counter(scrape(ports[n]), "strata_produce_lag_waits_total")
                for n in set(leaders.values()))
    assert waits > 0, "no produce answer was held: the load did not reach the bound"

    # Nothing left behind: the HW passes every acknowledged record soon after the load.
    last = {p: max(o for (q, o) in acked if q == p) for p in range(PARTITIONS)}
    deadline = time.monotonic() + CATCH_UP_S
    while True:
        hws = {p: partition_offsets(scrape(ports[leaders[p]]), TOPIC).get(p, (0, 0))[0]
               for p in range(PARTITIONS)}
        if all(hws[p] > last[p] for p in range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, (
            f"HW {hws} still short of the acknowledged ends {last} {CATCH_UP_S} s after the load")
        time.sleep(0.1)

    killed = leaders[0]
    c.kill9(killed)
    c.leader(TOPIC, 0, not_on=killed)
    survivors = ",".join(c.nodes[n].address for n in c.nodes if n != killed)
    consumer = Consumer({"bootstrap.servers": survivors, "group.id": "paced-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    found: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + 120
    while len(found) < len(acked) and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=5000, timeout=1.0):
            if m.error() is None:
                found[(m.partition(), m.offset())] = int(m.value()[:12])
    consumer.close()
    lost = [k for k, v in acked.items() if found.get(k) != v]
    assert not lost, (f"{len(lost)} of {len(acked)} acknowledged records missing or changed after "
                      f"the leader's kill -9, first: {sorted(lost)[:5]}")
