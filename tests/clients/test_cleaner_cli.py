"""What an operator sees of log compaction through the `strata` CLI: `strata topic describe`
shows each compacted partition's dirty ratio and cleaner checkpoint (carried by
DescribeLogDirs with Strata's tagged fields), and `strata log dump --keys` prints a segment's
keys, so what the cleaner kept can be checked by eye."""

from __future__ import annotations

import json
import re
import subprocess
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common import wait_partitions
from harness import strata_bin

KEYS = 50
WRITES = 2000
LINE = re.compile(r"\tPartition: 0\t.*\tDirtyRatio: ([0-9.]+)\tCleanerCheckpoint: (\w+)")


def strata(*args: str) -> str:
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=60)
    assert r.returncode == 0, f"strata {' '.join(args)}: {r.stderr.decode(errors='replace')}"
    return r.stdout.decode()


def create(bootstrap: str, topic: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=30)[topic].result(30)
    wait_partitions(bootstrap, topic, 1)


def write(bootstrap: str, topic: str) -> dict[bytes, bytes | None]:
    """Keyed overwrites, every 10th a tombstone; returns the last value per key."""
    # Small batches, so the 16 KiB segments roll (a log rolls between batches only).
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2000})
    last: dict[bytes, bytes | None] = {}
    for i in range(WRITES):
        key = f"key-{i % KEYS:02}".encode()
        value = None if i % 10 == 9 else f"value {i} ".encode() * 4
        p.produce(topic, key=key, value=value)
        last[key] = value
    assert p.flush(30) == 0
    return last


def describe_line(bootstrap: str, topic: str) -> re.Match | None:
    return LINE.search(strata("topic", "describe", topic, "--bootstrap", bootstrap))


def test_describe_shows_dirty_ratio_before_cleaning(broker_factory, monkeypatch):
    """Proves a compacted log never cleaned (cleaner off) shows DirtyRatio 1.000 (all its
    closed segments are dirty) and CleanerCheckpoint none, and a delete topic shows neither."""
    monkeypatch.setenv("STRATA_LOG_CLEANER_ENABLE", "false")
    broker = broker_factory()
    create(broker.bootstrap, "dirty", {"cleanup.policy": "compact", "segment.bytes": "16384"})
    create(broker.bootstrap, "plain", {"segment.bytes": "16384"})
    write(broker.bootstrap, "dirty")
    write(broker.bootstrap, "plain")
    # A rolled segment counts once the flusher has sealed it (data, then its indexes).
    deadline = time.time() + 30
    while True:
        m = describe_line(broker.bootstrap, "dirty")
        assert m is not None, strata("topic", "describe", "dirty", "--bootstrap", broker.bootstrap)
        if m.group(1) != "0.000" or time.time() > deadline:
            break
        time.sleep(0.2)
    assert (m.group(1), m.group(2)) == ("1.000", "none")
    plain = strata("topic", "describe", "plain", "--bootstrap", broker.bootstrap)
    assert "DirtyRatio" not in plain and "CleanerCheckpoint" not in plain, plain


def test_describe_and_log_keys_after_cleaning(broker_factory, monkeypatch):
    """Proves that once the cleaner ran, describe shows its checkpoint (the active segment's
    base offset: everything below was cleaned) and a dirty ratio below 1, and that
    `strata log dump --keys` (text and JSON, whole directory and one segment file) lists
    each key at most once below the checkpoint, with the last write's offsets and tombstones."""
    monkeypatch.setenv("STRATA_LOG_CLEANER_BACKOFF_MS", "200")
    monkeypatch.setenv("STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO", "0.01")
    broker = broker_factory()
    topic = "cleaned"
    create(broker.bootstrap, topic, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                     "delete.retention.ms": "3600000"})
    last = write(broker.bootstrap, topic)
    deadline = time.time() + 90
    # A pass that ran while the writes were still arriving leaves most of the log dirty
    # (the ratio shows 1.000 under load); wait for one that ran after them.
    while True:
        m = describe_line(broker.bootstrap, topic)
        if m and m.group(2) != "none" and float(m.group(1)) < 1.0:
            break
        assert time.time() < deadline, strata("topic", "describe", topic, "--bootstrap", broker.bootstrap)
        time.sleep(0.5)
    checkpoint = int(m.group(2))
    assert 0 < checkpoint < WRITES
    assert 0.0 <= float(m.group(1)) < 1.0, m.group(0)

    part_dir = broker.data_dir / f"{topic}-0"
    lines = strata("log", "dump", "--dir", str(part_dir), "--keys").splitlines()
    entries = []
    for line in lines:
        parts = line.split()
        assert parts[0] == "offset" and parts[2] == "key", line
        entries.append((int(parts[1]), parts[3].encode(), parts[4:] == ["tombstone"]))
    offsets = [o for o, _, _ in entries]
    assert offsets == sorted(set(offsets)), "offsets strictly increasing"
    below = [k for o, k, _ in entries if o < checkpoint]
    assert len(below) == len(set(below)), "a key twice in the cleaned part"
    # The last write of key i%KEYS is at offset WRITES-KEYS+i: replaying gives `last`.
    replay = {k: tomb for _, k, tomb in entries}
    assert replay == {k: v is None for k, v in last.items()}

    as_json = [json.loads(x) for x in strata("log", "dump", "--dir", str(part_dir), "--keys",
                                             "--json").splitlines()]
    assert [(o["offset"], o["tombstone"]) for o in as_json] == [(o, t) for o, _, t in entries]
    # Segment by segment (a cleaned segment may be left empty), the same lines in order.
    segments = sorted(part_dir.glob("*.log"))
    assert len(segments) > 1
    by_segment = [line for seg in segments
                  for line in strata("log", "dump", "--dir", str(seg), "--keys").splitlines()]
    assert by_segment == lines


def test_describe_log_dirs_answers_kafka_clients(broker):
    """Proves DescribeLogDirs, which carries the cleaner state, is a plain Kafka answer to a
    Kafka client (kafka-python's message classes, v1 and v4): the data dir, the topic's
    replica with a size that covers what was written, a null topic list meaning every topic,
    and a partition this broker does not hold left out."""
    from kafka.protocol.admin.cluster import DescribeLogDirsRequest as R

    import kproto

    create(broker.bootstrap, "sized", {"cleanup.policy": "compact"})
    write(broker.bootstrap, "sized")
    for version in [1, 4]:
        asked = kproto.call(broker.bootstrap, R[version](
            topics=[R.DescribableLogDirTopic(topic="sized", partitions=[0, 7])]))
        if version >= 3:
            assert asked.error_code == 0, asked
        [result] = asked.results
        assert result.error_code == 0 and result.log_dir == str(broker.data_dir), result
        [topic] = result.topics
        [partition] = topic.partitions
        assert topic.name == "sized" and partition.partition_index == 0, topic
        assert partition.partition_size >= WRITES * 40, partition
        every = kproto.call(broker.bootstrap, R[version](topics=None))
        assert "sized" in {t.name for t in every.results[0].topics}
        if version >= 4:
            assert result.total_bytes > 0 and result.usable_bytes > 0, result
