"""Group coordinator appends under memory pressure: when produce fills the shard's memory
budget faster than the disk drains it, offset commits wait for room (bounded) as produce
does, instead of failing with COORDINATOR_NOT_AVAILABLE."""

from __future__ import annotations

import struct
import threading
import time

import kproto
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "load"
PARTITIONS = 4
COMMIT_PARTITIONS = PARTITIONS
COMMITTERS = 8
FLOODS = 3
COMMITS = 500
IN_FLIGHT = 16
API_PRODUCE = 0
API_OFFSET_COMMIT = 8


def commit_body(group: str, offset: int) -> bytes:
    # OffsetCommit v2: group, generation -1, member "", retention -1, one topic.
    parts = b"".join(struct.pack(">iq", p, offset) + kproto.kstring(None)
                     for p in range(COMMIT_PARTITIONS))
    return (kproto.kstring(group) + struct.pack(">i", -1) + kproto.kstring("")
            + struct.pack(">q", -1) + struct.pack(">i", 1) + kproto.kstring(TOPIC)
            + struct.pack(">i", COMMIT_PARTITIONS) + parts)


def commit_errors(body: bytes) -> list[int]:
    pos = 4  # one topic
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n
    (nparts,) = struct.unpack_from(">i", body, pos)
    pos += 4
    return [struct.unpack_from(">ih", body, pos + 6 * i)[1] for i in range(nparts)]


def flood(bootstrap: str, stop: threading.Event) -> None:
    """acks=0 produce of 256 KiB batches, as fast as the socket takes them."""
    batch = kproto.record_batch([(None, b"x" * 1024)] * 250)
    frames = [kproto.request(API_PRODUCE, 3, i, kproto.produce_v3_body(TOPIC, i % PARTITIONS, batch, acks=0))
              for i in range(PARTITIONS)]
    with kproto.connect(bootstrap, 30) as s:
        i = 0
        while not stop.is_set():
            s.sendall(frames[i % PARTITIONS])
            i += 1


def test_offset_commits_wait_for_memory_instead_of_failing(broker_factory, monkeypatch):
    """Proves offset commits survive an exhausted memory budget: one shard with the smallest
    memory budget (16 MiB) and the log flushed on every write, three connections flooding it
    with acks=0 produce, while eight connections send 500 pipelined OffsetCommits each (so
    commits overlap and find the coordinator's log with a batch staged); every commit answers
    NONE and the broker never logs that it could not append group records (before, a commit
    that found the budget full failed with COORDINATOR_NOT_AVAILABLE)."""
    monkeypatch.setenv("STRATA_MEMORY_LIMIT_BYTES", str(16 * 1024 * 1024))
    monkeypatch.setenv("STRATA_LOG_FLUSH_POLICY", "sync")
    monkeypatch.setenv("STRATA_OFFSETS_TOPIC_NUM_PARTITIONS", "1")
    b = broker_factory(shards=1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=30)[TOPIC].result(30)

    stop = threading.Event()
    floods = [threading.Thread(target=flood, args=(b.bootstrap, stop), daemon=True) for _ in range(FLOODS)]
    for t in floods:
        t.start()
    time.sleep(1)
    errors: dict[int, int] = {}
    lock = threading.Lock()

    def commit_all(worker: int) -> None:
        with kproto.connect(b.bootstrap, 60) as s:
            sent = received = 0
            while received < COMMITS:
                while sent < COMMITS and sent - received < IN_FLIGHT:
                    s.sendall(kproto.request(API_OFFSET_COMMIT, 2, sent,
                                             commit_body(f"group-{worker}-{sent % 10}", sent + 1)))
                    sent += 1
                _, body = kproto.recv_response(s)
                with lock:
                    for e in commit_errors(body):
                        if e:
                            errors[e] = errors.get(e, 0) + 1
                received += 1

    committers = [threading.Thread(target=commit_all, args=(w,)) for w in range(COMMITTERS)]
    try:
        for t in committers:
            t.start()
        for t in committers:
            t.join(300)
    finally:
        stop.set()
        for t in floods:
            t.join(30)
    log = b.log_path.read_text(errors="replace")
    assert "cannot append group records" not in log, log[-3000:]
    assert errors == {}, f"commit errors by code: {errors}"
