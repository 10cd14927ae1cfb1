"""Recovery from a torn or corrupt tail of the newest segment, done to the files on disk."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from confluent_kafka import Producer

import kproto
from common import create_topic, read_all

RECORDS = 20


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    dirs = [d for d in data_dir.rglob(f"{topic}-{partition}") if d.is_dir()]
    assert len(dirs) == 1, f"expected one <data>/{topic}-{partition}/ dir, found {dirs}"
    return dirs[0]


def newest_segment(pdir: Path) -> Path:
    logs = sorted(p for p in pdir.glob("*.log") if len(p.stem) == 20 and p.stem.isdigit())
    assert logs, f"no 20-digit-named .log segments in {pdir}: {list(pdir.iterdir())}"
    return logs[-1]


def produce_one_batch_each(bootstrap: str, topic: str, n: int) -> None:
    """n records to partition 0, each flushed alone so that each is its own batch."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "message.timeout.ms": 30000})
    offsets = []
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: offsets.append(None if err else msg.offset()))
        assert p.flush(30) == 0
    assert offsets == list(range(n)), f"acked offsets {offsets}"


@pytest.mark.parametrize("damage", ["truncate-mid-batch", "flip-byte", "zero-tail"])
def test_damaged_last_batch_is_dropped_and_log_continues(persistent_broker, damage):
    """Proves recovery truncates at the first invalid batch: after a clean stop, the newest
    segment's last batch is cut short / has a flipped byte / is zeroed (a torn preallocated
    write); on restart the broker serves exactly the earlier records and the next produce
    gets the dropped batch's offset, so offsets stay contiguous."""
    b = persistent_broker
    topic = "torn"
    create_topic(b.bootstrap, topic, 1)
    produce_one_batch_each(b.bootstrap, topic, RECORDS)
    assert b.stop() == 0, f"SIGTERM exit code not 0:\n{b.log_tail()}"

    seg = newest_segment(partition_dir(b.data_dir, topic, 0))
    data = seg.read_bytes()
    batches = kproto.scan_batches(data)
    assert batches, f"no valid v2 batch found in {seg}"
    pos, total, base = batches[-1]
    (last_delta,) = struct.unpack_from(">i", data, pos + 23)
    assert base + last_delta + 1 == RECORDS, f"last batch in {seg.name} covers {base}..{base + last_delta}"
    if damage == "truncate-mid-batch":
        with open(seg, "r+b") as f:
            f.truncate(pos + total // 2)
    elif damage == "flip-byte":
        with open(seg, "r+b") as f:
            f.seek(pos + total - 3)  # inside the records, covered by the CRC
            byte = f.read(1)
            f.seek(pos + total - 3)
            f.write(bytes([byte[0] ^ 0x40]))
    else:
        with open(seg, "r+b") as f:
            f.seek(pos + 12)  # keep baseOffset/length, zero the rest as an unwritten block reads
            f.write(b"\x00" * (total - 12))
    assert len(kproto.scan_batches(seg.read_bytes())) == len(batches) - 1

    b.start()
    consumed = read_all(b.bootstrap, topic, 1)
    assert consumed.highs[0] == base, f"high watermark {consumed.highs[0]} after dropping batch at {base}"
    msgs = consumed[0]
    assert [m.offset() for m in msgs] == list(range(base))
    assert [m.value() for m in msgs] == [f"value-{i}".encode() for i in range(base)]

    # New produces continue right where the valid log ends.
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "message.timeout.ms": 30000})
    got = []
    for i in range(3):
        p.produce(topic, value=f"new-{i}".encode(), partition=0,
                  on_delivery=lambda err, msg: got.append((err, msg.offset())))
    assert p.flush(30) == 0
    assert got == [(None, base), (None, base + 1), (None, base + 2)]
    again = read_all(b.bootstrap, topic, 1)
    assert [m.offset() for m in again[0]] == list(range(base + 3))
    assert [m.value() for m in again[0][base:]] == [b"new-0", b"new-1", b"new-2"]
