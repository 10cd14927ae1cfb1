"""Log compaction (cleanup.policy=compact) seen from real clients: confluent-kafka writes
random keyed records with overwrites and tombstones in every codec; after the broker's
cleaner ran, a consumer from offset 0 sees, for every key, exactly the last value written
(tombstones still readable within delete.retention.ms), offsets strictly increasing, and far
fewer records than were written. Then the same after kill -9 of the broker while it cleans,
and a restart."""

from __future__ import annotations

import random
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

KEYS = 200
WRITES = 6000
SEGMENT_BYTES = 16384


def create_compacted(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": str(SEGMENT_BYTES),
        "delete.retention.ms": "3600000",
    }
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=30)
    futures[topic].result(30)


def write_random(bootstrap: str, topic: str, seed: int) -> dict[bytes, bytes | None]:
    """Writes keyed records with overwrites and tombstones; returns the last value per key."""
    rng = random.Random(seed)
    last: dict[bytes, bytes | None] = {}
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        # Batches under segment.bytes: a bigger one is refused (RECORD_LIST_TOO_LARGE).
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "linger.ms": 5, "batch.size": SEGMENT_BYTES // 2,
                      "enable.idempotence": True})
        for _ in range(WRITES // 5):
            key = f"key-{rng.randrange(KEYS)}".encode()
            value = None if rng.random() < 0.1 else f"v{rng.random()}".encode() * 3
            p.produce(topic, key=key, value=value)
            last[key] = value
        assert p.flush(30) == 0
    return last


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    out = []
    deadline = time.time() + 60
    while time.time() < deadline:
        msgs = c.consume(1000, timeout=1)
        for m in msgs:
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
        if out and out[-1][0] >= high - 1:
            break
    c.close()
    return out


def active_base(data_dir: Path, topic: str) -> int:
    logs = sorted((data_dir / f"{topic}-0").glob("*.log"))
    return int(logs[-1].name.split(".")[0])


def check_compacted(records, last, cleaned_below: int) -> None:
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets must be strictly increasing"
    below = [(o, k, v) for o, k, v in records if o < cleaned_below]
    keys_below = [k for _, k, _ in below]
    assert len(keys_below) == len(set(keys_below)), "a key appears twice in the cleaned part"
    replay: dict[bytes, bytes | None] = {}
    for _, k, v in records:
        replay[k] = v
    assert replay == last, "replaying the topic must give the last value per key"


def wait_cleaned(bootstrap, topic, data_dir, last, timeout_s=90):
    deadline = time.time() + timeout_s
    while True:
        records = read_all(bootstrap, topic)
        base = active_base(data_dir, topic)
        try:
            check_compacted(records, last, base)
            return records, base
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(1)


def test_compacted_topic_keeps_last_value_per_key(broker_factory, cleaner_env):
    """Proves a consumer from 0 sees exactly the last value per key in the cleaned segments
    (tombstones included), strictly increasing offsets, and far fewer records than written."""
    broker = broker_factory()
    topic = "compacted"
    create_compacted(broker.bootstrap, topic)
    last = write_random(broker.bootstrap, topic, seed=1)
    records, base = wait_cleaned(broker.bootstrap, topic, broker.data_dir, last)
    assert base > 0, "the log should have rolled into several segments"
    assert len(records) < WRITES / 3, f"{len(records)} records left of {WRITES}"
    tombstones = [k for k, v in last.items() if v is None]
    seen_tombstones = {k for _, k, v in records if v is None}
    assert set(tombstones) <= seen_tombstones, "tombstones stay within delete.retention.ms"


def test_compaction_survives_kill9_while_cleaning(broker_factory, cleaner_env):
    """Proves kill -9 during cleaning leaves a log that, after restart and more cleaning,
    still gives the last value per key with strictly increasing offsets."""
    broker = broker_factory()
    topic = "compacted-crash"
    create_compacted(broker.bootstrap, topic)
    last = write_random(broker.bootstrap, topic, seed=2)
    for delay in [0.05, 0.3, 0.8]:
        time.sleep(delay)
        broker.kill9()
        broker.start()
        more = write_random(broker.bootstrap, topic, seed=int(delay * 100))
        last.update(more)
    records, _ = wait_cleaned(broker.bootstrap, topic, broker.data_dir, last)
    assert len(records) < 3 * WRITES
