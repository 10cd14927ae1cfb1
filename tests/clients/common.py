"""The record set every client produces, a group-less reference reader, and the checker.

A Sent record knows the partition it must land in (explicit, or reported by the client's
delivery result) and, when the client reports it, its offset. `verify` then demands, per
partition: offsets contiguous from 0, exactly the sent records in send order, byte-equal keys,
values and headers (order of headers kept, duplicates allowed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 4
# Under the broker's default max.message.bytes (1048588) with room for batch/record overhead
# and for incompressible data growing slightly under gzip.
BIG_VALUE_LEN = 1024 * 1024 - 4096
DEADLINE_S = 60.0
# Only for debugging these tests against Tansu, whose high watermark lags acked records (its bug);
# never set in CI.
SKIP_HW_CHECK = os.environ.get("STRATA_TEST_SKIP_HW_CHECK") == "1"


@dataclass
class Sent:
    index: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    partition: int | None = None  # None: the client's partitioner chooses; filled in on ack
    offset: int | None = None  # filled in when the client reports it


def record_set(tag: str, codec: str, start_index: int, partitions: int = PARTITIONS,
               big: bool = False, null_key_and_value: bool = True) -> list[Sent]:
    """Keyed, unkeyed, tombstone, empty, null/null, header-rich and (optionally) ~1 MiB records."""
    recs: list[Sent] = []

    def add(key, value, headers=(), partition=None):
        recs.append(Sent(start_index + len(recs), key, value, list(headers), partition))

    for i in range(6):  # keyed, partitioner-chosen, with headers
        add(f"key-{tag}-{i}".encode(), f"{codec} value {i}".encode(), [("h1", b"x"), ("trace", f"{i}".encode())])
    for p in range(partitions):  # unkeyed, explicit partition, no headers
        add(None, f"{codec} unkeyed to {p}".encode(), [], p)
    add(b"tombstone-key", None, [("why", b"delete")], 0)  # null value = tombstone
    add(b"empty-value-key", b"", [], 1)  # empty, not null
    if null_key_and_value:  # some clients (kafka-python) refuse to send this
        add(None, None, [], 2)
    add(b"", b"empty key", [("", b"")], 3 % partitions)  # empty key, empty header key and value
    add(b"dup-headers", b"v", [("dup", b"1"), ("dup", b"2"), ("utf8-\u00e9", b"\x00\xff")], 0)
    add(b"binary\x00key", bytes(range(256)), [], 1)
    if big:
        add(b"big", os.urandom(BIG_VALUE_LEN), [("size", str(BIG_VALUE_LEN).encode())], 2 % partitions)
    return recs


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30, request_timeout=30)
    futures[topic].result(timeout=30)
    wait_partitions(bootstrap, topic, partitions)


def wait_partitions(bootstrap: str, topic: str, partitions: int) -> None:
    """Polls metadata until every partition has a leader (bounded)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 30
    while True:
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 for p in t.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic} not ready: {t and t.partitions}")
        time.sleep(0.1)


def read_all(bootstrap: str, topic: str, partitions: int = PARTITIONS,
             deadline_s: float = DEADLINE_S, at_least: dict[int, int] | None = None) -> dict[int, list]:
    """Reads every partition from offset 0 to its high watermark with assign() (no group).

    With at_least={partition: n} it keeps reading past a lower high watermark until n records
    came back (so a wrong watermark shows up as a watermark failure, not as missing data).
    Returns {partition: [confluent Message]} with .highs = the watermarks; raises on consume error.
    """
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "strata-tests-unused",  # librdkafka requires one; nothing is committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 2 * 1024 * 1024,
        "receive.message.max.bytes": 128 * 1024 * 1024,
    }
    c = Consumer(conf)
    try:
        highs = {}
        for p in range(partitions):
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert low == 0, f"partition {p}: log start offset {low}, expected 0"
            highs[p] = high
        out = Consumed({p: [] for p in range(partitions)})
        out.highs = dict(highs)
        want = {p: max(highs[p], (at_least or {}).get(p, 0)) for p in range(partitions)}
        todo = {p for p in range(partitions) if want[p] > 0}
        c.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + deadline_s
        while todo:
            if time.monotonic() > deadline:
                got = {p: len(out[p]) for p in out}
                raise TimeoutError(f"read {got} records; high watermarks {highs}, wanted {want}")
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            p = msg.partition()
            out[p].append(msg)
            if msg.offset() + 1 >= want[p]:
                todo.discard(p)
        return out
    finally:
        c.close()


class Consumed(dict):
    highs: dict[int, int]


def sent_counts(sent: list[Sent]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for s in sent:
        counts[s.partition] = counts.get(s.partition, 0) + 1
    return counts


def read_and_verify(bootstrap: str, topic: str, sent: list[Sent], partitions: int = PARTITIONS) -> None:
    """Reads the whole topic back and checks it against what was sent, then the watermarks."""
    consumed = read_all(bootstrap, topic, partitions, at_least=sent_counts(sent))
    verify(sent, consumed, partitions)
    counts = sent_counts(sent)
    for p in range(partitions if not SKIP_HW_CHECK else 0):
        assert consumed.highs[p] == counts.get(p, 0), (
            f"partition {p}: high watermark {consumed.highs[p]} but {counts.get(p, 0)} records acked (acks=all)")


def verify(sent: list[Sent], consumed: dict[int, list], partitions: int = PARTITIONS) -> None:
    """Asserts that each partition holds exactly its sent records, in order, at offsets 0..n-1."""
    assert all(s.partition is not None for s in sent), "a sent record has no known partition"
    for p in range(partitions):
        expected = sorted((s for s in sent if s.partition == p), key=lambda s: s.index)
        got = consumed.get(p, [])
        offsets = [m.offset() for m in got]
        assert offsets == list(range(len(got))), f"partition {p}: offsets not contiguous from 0: {offsets[:20]}"
        assert len(got) == len(expected), f"partition {p}: read {len(got)} records, sent {len(expected)}"
        for s, m in zip(expected, got):
            where = f"partition {p} offset {m.offset()} (sent #{s.index})"
            if s.offset is not None:
                assert m.offset() == s.offset, f"{where}: acked at offset {s.offset}"
            assert m.key() == s.key, f"{where}: key {m.key()!r:.60} != {s.key!r:.60}"
            assert m.value() == s.value, f"{where}: value {short(m.value())} != {short(s.value)}"
            assert (m.headers() or []) == s.headers, f"{where}: headers {m.headers()} != {s.headers}"


def short(b: bytes | None) -> str:
    if b is None:
        return "None"
    return repr(b[:40]) + (f"...({len(b)} bytes)" if len(b) > 40 else "")


JAVA_DIR = Path(__file__).resolve().parent / "java"
JAVA_LIB = JAVA_DIR / "lib"


def compile_java_checks(tmp_path_factory, name: str, sources: list[str]) -> Path:
    """Compiles Java checks from tests/clients/java against the kafka-clients jars into a fresh
    temp dir and returns it; skips (fails on CI) when javac or the jars are missing."""
    import pytest

    if shutil.which("javac") is None or not list(JAVA_LIB.glob("kafka-clients-*.jar")):
        reason = f"javac or kafka-clients missing in {JAVA_LIB}; run tests/fetch-jars.sh clients"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    build = tmp_path_factory.mktemp(name)
    r = subprocess.run(["javac", "-d", str(build), "-cp", f"{JAVA_LIB}/*:{build}"]
                       + [str(JAVA_DIR / f) for f in sources], capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode()
    return build
