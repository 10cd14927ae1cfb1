"""Followers under memory pressure: when produce fills a follower's memory budget faster than
its disk drains it, the replica fetcher waits for room (bounded) and appends what it fetched,
instead of dropping it with a warning and fetching it again."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from harness import require_cluster_support

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
import kproto  # noqa: E402

pytestmark = [pytest.mark.cluster]

TOPIC = "pressed"
PARTITIONS = 4
FLOOD_S = 6
# Enough to exhaust every follower's 16 MiB budget many times over, and a bound on the disk the
# test takes (4 partitions x 3 replicas x this, 3 GiB): unbounded, a fast disk took ~10 GB in 6 s.
FLOOD_BYTES_PER_PARTITION_MAX = 256 * 1024 * 1024
API_PRODUCE = 0


def flood(address: str, partition: int, stop: threading.Event) -> None:
    """acks=0 produce of 256 KiB batches to the partition's leader, as fast as it takes them,
    until stopped or FLOOD_BYTES_PER_PARTITION_MAX are sent."""
    batch = kproto.record_batch([(None, b"x" * 1024)] * 250)
    frame = kproto.request(API_PRODUCE, 3, 1, kproto.produce_v3_body(TOPIC, partition, batch, acks=0))
    sent = 0
    with kproto.connect(address, 30) as s:
        while not stop.is_set() and sent < FLOOD_BYTES_PER_PARTITION_MAX:
            s.sendall(frame)
            sent += len(frame)


def test_followers_wait_for_memory_instead_of_dropping_fetches(cluster_factory):
    """Proves replica fetches survive an exhausted memory budget: three nodes with the
    smallest budget (16 MiB per node, one shard) and sync flushes, an RF3 topic of four
    partitions, each flooded for 6 s (256 MiB at most) with acks=0 produce at its leader; no
    follower logs a refused replica append (before, a follower whose budget was full dropped the fetched
    batches with 'replica append: ... staged' and fetched them again), and every follower
    catches up to the leader's log end."""
    require_cluster_support()
    # The lag bound would hold the acks=0 floods back to what the followers copy (8 MiB above
    # the HW per partition): off, so the followers' memory is what gives way here.
    c = cluster_factory(env={"STRATA_MEMORY_LIMIT_BYTES": str(16 * 1024 * 1024),
                             "STRATA_LOG_FLUSH_POLICY": "sync",
                             "STRATA_REPLICA_PRODUCE_LAG_MAX_BYTES": "0"})
    admin = c.admin()
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], operation_timeout=30)[TOPIC].result(30)
    c.wait_topic(TOPIC, PARTITIONS, full_isr=True)

    stop = threading.Event()
    floods = [threading.Thread(target=flood, args=(c.nodes[c.leader(TOPIC, p)].address, p, stop),
                               daemon=True)
              for p in range(PARTITIONS)]
    for t in floods:
        t.start()
    time.sleep(FLOOD_S)
    stop.set()
    for t in floods:
        t.join(30)
    c.wait_topic(TOPIC, PARTITIONS, full_isr=True, timeout_s=120)
    for n in c.nodes:
        log = c.nodes[n].log_path.read_text(errors="replace")
        refused = [line for line in log.splitlines() if "replica append" in line and "staged" in line]
        assert not refused, f"node {n}: {len(refused)} refused replica appends, first: {refused[0]}"
