"""Compaction on a replicated topic: the leader and its followers clean their logs each on
its own, and a follower that comes back after the leader cleaned copies a log with offset
gaps. Every replica is read through the debugging-consumer Fetch (replica_fetch)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from harness import require_cluster_support
import replica_fetch

pytestmark = [pytest.mark.cluster]

TOPIC = "compacted"
KEYS = 50
ROUNDS = 60
SEGMENT_BYTES = 16384
BATCH_BYTES = 4096
# A cleaner that looks every 200 ms and cleans any dirty log.
CLEANER_ENV = {
    "STRATA_LOG_CLEANER_BACKOFF_MS": "200",
    "STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO": "0.01",
}


def produce_rounds(bootstrap: str, first_round: int, rounds: int) -> None:
    # Batches well under segment.bytes: while acks=all waits (the ISR still holds the
    # stopped follower), librdkafka would otherwise pack every record into one batch, which
    # the leader refuses as bigger than a segment (RECORD_LIST_TOO_LARGE).
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": BATCH_BYTES, "compression.type": "none",
                  "enable.idempotence": False})
    for r in range(first_round, first_round + rounds):
        for k in range(KEYS):
            p.produce(TOPIC, key=f"k{k}".encode(), value=f"k{k}:{r}:".ljust(200, "x").encode(),
                      partition=0)
        p.poll(0)
    assert p.flush(60) == 0


def test_replicas_clean_independently_and_agree_per_offset(cluster_factory):
    """Proves a compacted topic stays one log across replicas: with RF 3, one follower
    stopped while keyed overwrites are written, the leader and the running follower clean
    their closed segments (far fewer records than written); the stopped follower then
    restarts and catches up from the cleaned leader (batches past offset gaps, accepted
    because its gap bound is raised first), rejoins the ISR, and cleans on its own. Every
    replica serves strictly increasing offsets, the same value at every offset two replicas
    both hold, and the same last value for every key."""
    require_cluster_support()
    c = cluster_factory(env=CLEANER_ENV)
    admin = c.admin()
    config = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES)}
    admin.create_topics([NewTopic(TOPIC, 1, 3, config=config)], operation_timeout=30)[TOPIC].result(30)
    c.wait_topic(TOPIC, 1, full_isr=True)
    leader = c.leader(TOPIC, 0)
    lagging = next(n for n in c.partitions(TOPIC)[0].replicas if n != leader)
    c.nodes[lagging].stop()

    produce_rounds(c.live_bootstrap(), 0, ROUNDS)
    written = KEYS * ROUNDS
    expected = {f"k{k}": f"k{k}:{ROUNDS - 1}:".ljust(200, "x") for k in range(KEYS)}

    def replica(n: int, end: int) -> list[tuple[int, int, str | None]]:
        return replica_fetch.read_replica(c.nodes[n].address, TOPIC, 0, end)

    def cleaned(n: int, end: int):
        recs = replica(n, end)
        return recs if len(recs) < written // 2 else None

    end = written
    c.poll_until(f"leader {leader} cleaned", lambda: cleaned(leader, end), 60)

    c.restart(lagging)
    c.wait_topic(TOPIC, 1, full_isr=True, timeout_s=60)
    # One more round so every replica's active segment rolls past the rest and the
    # caught-up follower has closed segments of its own to clean.
    produce_rounds(c.live_bootstrap(), ROUNDS, 1)
    expected = {f"k{k}": f"k{k}:{ROUNDS}:".ljust(200, "x") for k in range(KEYS)}
    end = written + KEYS
    c.wait_topic(TOPIC, 1, full_isr=True, timeout_s=60)
    replicas = c.partitions(TOPIC)[0].replicas
    for n in replicas:
        c.poll_until(f"replica {n} cleaned", lambda n=n: cleaned(n, end), 60)

    # Give the cleaners a moment more, then compare what each replica serves.
    time.sleep(1)
    logs = {n: replica(n, end) for n in replicas}
    by_offset: dict[int, str | None] = {}
    for n, recs in logs.items():
        offsets = [o for o, _, _ in recs]
        assert offsets == sorted(set(offsets)), f"replica {n}: offsets not strictly increasing"
        assert offsets and offsets[-1] == end - 1, f"replica {n} ends at {offsets[-1:]}, not {end - 1}"
        last: dict[str, str] = {}
        for o, _, v in recs:
            assert v is not None
            seen = by_offset.setdefault(o, v)
            assert seen == v, f"offset {o}: replica {n} holds {v[:12]!r}, another {seen[:12]!r}"
            last[v.split(":")[0]] = v
        assert last == expected, f"replica {n}: last values per key differ"


def segment_sizes(data_dir, topic: str) -> list[int]:
    return sorted(f.stat().st_size for f in (data_dir / f"{topic}-0").glob("*.log"))


def test_segment_bytes_bounds_segments_on_every_replica(cluster_factory):
    """Proves a topic's segment.bytes reaches every replica of a 3-node cluster and bounds
    its segments: one batch bigger than segment.bytes is refused with RECORD_LIST_TOO_LARGE
    (Kafka's RecordBatchTooLargeException; before, the leader took it whole into one segment
    that never rolled), and small batches fill several segments of at most segment.bytes on
    the leader and on both followers."""
    require_cluster_support()
    c = cluster_factory()
    topic = "rolling"
    config = {"segment.bytes": str(SEGMENT_BYTES)}
    admin = c.admin()
    admin.create_topics([NewTopic(topic, 1, 3, config=config)],
                        operation_timeout=30)[topic].result(30)
    c.wait_topic(topic, 1, full_isr=True)

    errors: list[KafkaError] = []
    big = Producer({"bootstrap.servers": c.live_bootstrap(), "acks": "all",
                    "linger.ms": 500, "compression.type": "none", "enable.idempotence": False})
    for i in range(200):
        big.produce(topic, value=f"{i}".ljust(200, "b").encode(), partition=0,
                    on_delivery=lambda err, _msg: errors.append(err))
    big.flush(30)
    assert len(errors) == 200
    assert all(e is not None and e.code() == KafkaError.RECORD_LIST_TOO_LARGE for e in errors), \
        {str(e) for e in errors}

    small = Producer({"bootstrap.servers": c.live_bootstrap(), "acks": "all", "linger.ms": 5,
                      "batch.size": BATCH_BYTES, "compression.type": "none",
                      "enable.idempotence": False})
    for i in range(400):
        small.produce(topic, value=f"{i}".ljust(200, "s").encode(), partition=0)
    assert small.flush(60) == 0
    c.wait_topic(topic, 1, full_isr=True, timeout_s=60)
    for n in c.partitions(topic)[0].replicas:
        def rolled(n=n):
            sizes = segment_sizes(c.nodes[n].data_dir, topic)
            return sizes if len(sizes) >= 4 and sum(sizes) >= 400 * 200 else None
        sizes = c.poll_until(f"replica {n} rolled", rolled, 30)
        assert max(sizes) <= SEGMENT_BYTES, f"replica {n}: segments {sizes}"


def test_altered_topic_configs_reach_every_replica(cluster_factory):
    """Proves topic overrides set after creation (IncrementalAlterConfigs: the metadata log's
    TopicConfig record) reach the followers' logs, not only the leader's: on an RF3 topic
    created without overrides, segment.bytes=16384 and retention.ms=1000 are set; after small
    batches, every replica has rolled segments of at most 16 KiB and dropped its oldest ones
    (its log no longer starts at offset 0: by its own retention, or a follower moving its log
    start along with the leader's)."""
    require_cluster_support()
    c = cluster_factory(env={"STRATA_LOG_RETENTION_CHECK_INTERVAL_MS": "200"})
    topic = "altered"
    admin = c.admin()
    admin.create_topics([NewTopic(topic, 1, 3)], operation_timeout=30)[topic].result(30)
    c.wait_topic(topic, 1, full_isr=True)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", str(SEGMENT_BYTES), incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)

    p = Producer({"bootstrap.servers": c.live_bootstrap(), "acks": "all", "linger.ms": 5,
                  "batch.size": BATCH_BYTES, "compression.type": "none",
                  "enable.idempotence": False})
    for i in range(400):
        p.produce(topic, value=f"{i}".ljust(200, "r").encode(), partition=0)
    assert p.flush(60) == 0
    time.sleep(1.5)  # older than retention.ms, then one more round rolls the active segment
    for i in range(100):
        p.produce(topic, value=f"late{i}".ljust(200, "r").encode(), partition=0)
    assert p.flush(60) == 0
    c.wait_topic(topic, 1, full_isr=True, timeout_s=60)
    for n in c.partitions(topic)[0].replicas:
        part = c.nodes[n].data_dir / f"{topic}-0"

        def trimmed(part=part):
            logs = sorted(part.glob("*.log"))
            sizes = [f.stat().st_size for f in logs]
            return sizes if logs and logs[0].name != f"{0:020d}.log" else None
        sizes = c.poll_until(f"replica {n} rolled and deleted old segments", trimmed, 30)
        assert max(sizes) <= SEGMENT_BYTES, f"replica {n}: segments {sizes}"
