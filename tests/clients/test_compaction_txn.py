"""Compaction of a transactional log (Kafka's LogCleaner with transactions, KIP-98 and
KIP-534) seen from confluent-kafka: transactional producers commit and abort on a compacted
topic; after the cleaner ran, read_uncommitted readers no longer see aborted records, the
committed records are compacted (latest per key), read_committed readers see the same
committed view before and after cleaning, the markers of transactions with no data left go
after delete.retention.ms, idempotent and transactional producers keep producing across
cleaning and a kill -9, and a kill -9 while cleaning loses nothing."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness import strata_bin

SEGMENT_BYTES = 8192
DELETE_RETENTION_MS = 2000
KEYS = 30
TIMEOUT_S = 30


def create_compacted(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
              "delete.retention.ms": str(DELETE_RETENTION_MS)}
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=30)
    futures[topic].result(30)


def txn_producer(bootstrap: str, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 2,
                  "batch.size": SEGMENT_BYTES // 4})
    p.init_transactions(TIMEOUT_S)
    return p


def run_transactions(p: Producer, topic: str, rounds: int, tag: str,
                     committed: dict[bytes, bytes]) -> int:
    """`rounds` transactions of keyed records, every third aborted (with keys of its own
    too, which no committed record has); the last one commits. Updates `committed` with the
    last committed value per key; returns the number of aborted records written."""
    aborted = 0
    for r in range(rounds):
        abort = r % 3 == 1 and r != rounds - 1
        p.begin_transaction()
        writes = []
        for i in range(8):
            key = f"key-{(r * 7 + i) % KEYS}".encode()
            writes.append((key, f"{'A' if abort else 'C'}-{tag}-{r}-{i}".encode() * 4))
        if abort:
            writes += [(f"aborted-only-{tag}-{r}-{i}".encode(), b"A-only" * 4) for i in range(3)]
        for key, value in writes:
            p.produce(topic, key=key, value=value, partition=0)
        p.flush(TIMEOUT_S)
        if abort:
            p.abort_transaction(TIMEOUT_S)
            aborted += len(writes)
        else:
            p.commit_transaction(TIMEOUT_S)
            committed.update(writes)
    return aborted


def write_filler(bootstrap: str, topic: str, tag: str, count: int,
                 committed: dict[bytes, bytes], p: Producer | None = None) -> None:
    """Idempotent, non-transactional keyed records (few keys, so they compact away) that roll
    the active segment past what came before."""
    own = p is None
    if own:
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 2, "batch.size": SEGMENT_BYTES // 4})
    errors = []
    for i in range(count):
        key = f"filler-{i % 5}".encode()
        value = f"F-{tag}-{i}".encode() * 4
        p.produce(topic, key=key, value=value, partition=0,
                  on_delivery=lambda err, _m: err and errors.append(err))
        committed[key] = value
    assert p.flush(TIMEOUT_S) == 0
    assert not errors, errors


def read_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes, bytes]]:
    """Every record from offset 0 to the end (the LSO for read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.time() + 60
    try:
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def replay(records) -> dict[bytes, bytes]:
    view: dict[bytes, bytes] = {}
    for _, k, v in records:
        view[k] = v
    return view


def batches(data_dir: Path, topic: str) -> list[dict]:
    out = subprocess.run([str(strata_bin()), "log", "dump", "--dir", str(data_dir / f"{topic}-0"),
                          "--batches", "--json"], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def active_base(data_dir: Path, topic: str) -> int:
    logs = sorted((data_dir / f"{topic}-0").glob("*.log"))
    return int(logs[-1].name.split(".")[0])


def is_aborted_value(v: bytes) -> bool:
    return v.startswith(b"A-")


def cleaned_state(bootstrap: str, data_dir: Path, topic: str, committed: dict[bytes, bytes]):
    """Checks what a cleaned log must show (raises AssertionError until it does): below the
    active segment no aborted record and no key twice; read_uncommitted and read_committed
    both replay to the committed view."""
    uncommitted = read_all(bootstrap, topic, "read_uncommitted")
    base = active_base(data_dir, topic)
    assert base > 0, "the log has not rolled"
    below = [(o, k, v) for o, k, v in uncommitted if o < base]
    assert not [r for r in below if is_aborted_value(r[2])], "aborted records below the active segment"
    keys = [k for _, k, _ in below]
    assert len(keys) == len(set(keys)), "a key twice in the cleaned part"
    offsets = [o for o, _, _ in uncommitted]
    assert offsets == sorted(set(offsets))
    committed_view = replay(read_all(bootstrap, topic, "read_committed"))
    assert committed_view == committed, "read_committed view changed"
    return uncommitted, base


def wait_for(check, timeout_s: float = 90.0):
    deadline = time.time() + timeout_s
    while True:
        try:
            return check()
        except AssertionError:
            if time.time() > deadline:
                raise
            time.sleep(1)


def test_cleaning_a_transactional_log(broker_factory, cleaner_env):
    """Proves aborted records vanish from read_uncommitted reads once cleaned, committed
    records compact to the latest per key, read_committed sees the same view before and
    after cleaning, the markers of transactions with no data left go after
    delete.retention.ms while those with data stay, and the producers keep producing
    (no OutOfOrderSequence, no fencing) across the cleaning and a kill -9 of the broker."""
    broker = broker_factory()
    topic = "txn-compacted"
    create_compacted(broker.bootstrap, topic)
    committed: dict[bytes, bytes] = {}
    tp = txn_producer(broker.bootstrap, "txn-clean-a")
    idem = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                     "linger.ms": 2, "batch.size": SEGMENT_BYTES // 4})
    aborted = run_transactions(tp, topic, rounds=30, tag="one", committed=committed)
    assert aborted > 0
    write_filler(broker.bootstrap, topic, "idem-1", 200, committed, p=idem)

    # The cleaner may already have run on the first rolled segments: what read_committed
    # sees now is the committed view it must keep seeing.
    assert replay(read_all(broker.bootstrap, topic, "read_committed")) == committed

    # Roll past everything so the transactional part is closed and below the LSO.
    write_filler(broker.bootstrap, topic, "roll-1", 300, committed)
    uncommitted, _ = wait_for(lambda: cleaned_state(broker.bootstrap, broker.data_dir, topic,
                                                    committed))
    written = 30 * 8 + aborted // 11 * 3 + 500
    assert len(uncommitted) < written / 2, (len(uncommitted), written)

    # Markers: after delete.retention.ms and more passes (more writes make the log dirty),
    # no ABORT marker is left below the active segment (their data is gone) and fewer
    # COMMIT markers than commits remain (those whose records all were superseded went);
    # every committed transactional record left still has its COMMIT marker after it.
    commits = 30 - len([r for r in range(30) if r % 3 == 1 and r != 29])

    def markers_dropped():
        write_filler(broker.bootstrap, topic, f"roll-{time.monotonic_ns()}", 100, committed)
        bs = batches(broker.data_dir, topic)
        base = active_base(broker.data_dir, topic)
        closed = [b for b in bs if b["last_offset"] < base]
        aborts = [b for b in closed if b["marker"] == "ABORT"]
        commit_markers = [b for b in closed if b["marker"] == "COMMIT"]
        assert not aborts, aborts
        assert 0 < len(commit_markers) < commits, len(commit_markers)
        return bs

    time.sleep(DELETE_RETENTION_MS / 1000)
    bs = wait_for(markers_dropped)
    pid_of_tx = {b["producer_id"] for b in bs if b["transactional"] and not b["control"]}
    for b in bs:
        if b["transactional"] and not b["control"] and b["records"] > 0:
            after = [m for m in bs if m["control"] and m["producer_id"] == b["producer_id"]
                     and m["base_offset"] > b["last_offset"]]
            assert after and after[0]["marker"] == "COMMIT", b
    assert pid_of_tx, "committed transactional batches keep their producer and bit"
    wait_for(lambda: cleaned_state(broker.bootstrap, broker.data_dir, topic, committed))

    # Both producers keep going after cleaning, and after a kill -9 and restart.
    write_filler(broker.bootstrap, topic, "idem-2", 100, committed, p=idem)
    run_transactions(tp, topic, rounds=4, tag="two", committed=committed)
    broker.kill9()
    broker.start()
    write_filler(broker.bootstrap, topic, "idem-3", 100, committed, p=idem)
    run_transactions(tp, topic, rounds=4, tag="three", committed=committed)
    write_filler(broker.bootstrap, topic, "roll-2", 300, committed)
    wait_for(lambda: cleaned_state(broker.bootstrap, broker.data_dir, topic, committed))
    tp2 = txn_producer(broker.bootstrap, "txn-clean-a")  # fences tp: epochs survived
    run_transactions(tp2, topic, rounds=2, tag="four", committed=committed)
    assert replay(read_all(broker.bootstrap, topic, "read_committed")) == committed


def test_kill9_while_cleaning_a_transactional_log(broker_factory, cleaner_env):
    """Proves kill -9 of the broker while it cleans a transactional log, at several moments,
    then a restart, loses no committed record and resurrects no aborted one."""
    broker = broker_factory()
    topic = "txn-compacted-crash"
    create_compacted(broker.bootstrap, topic)
    committed: dict[bytes, bytes] = {}
    round_no = 0
    for delay in [0.05, 0.3, 0.8, 1.5]:
        tp = txn_producer(broker.bootstrap, "txn-crash")
        run_transactions(tp, topic, rounds=20, tag=f"r{round_no}", committed=committed)
        write_filler(broker.bootstrap, topic, f"roll-{round_no}", 200, committed)
        round_no += 1
        time.sleep(delay)
        broker.kill9()
        broker.start()
        assert replay(read_all(broker.bootstrap, topic, "read_committed")) == committed
    tp = txn_producer(broker.bootstrap, "txn-crash")
    run_transactions(tp, topic, rounds=5, tag="last", committed=committed)
    write_filler(broker.bootstrap, topic, "roll-last", 300, committed)
    wait_for(lambda: cleaned_state(broker.bootstrap, broker.data_dir, topic, committed))
