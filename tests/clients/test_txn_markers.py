"""Transactions on the partition side, over the wire: transactional batches (raw Produce),
COMMIT/ABORT markers written by WriteTxnMarkers (as a transaction coordinator sends them),
the last stable offset in Fetch and ListOffsets, `aborted_transactions`, and a real
read_committed consumer (confluent-kafka) — before and after a kill -9 of the broker."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.producer.transaction import WriteTxnMarkersRequest

import kproto
from common import create_topic

TOPIC = "txn-part"


@pytest.fixture(autouse=True)
def no_verification(monkeypatch):
    """These tests write transactional batches with raw Produce requests, without a
    coordinator, to drive the partition side alone; KIP-890's verification (as in Kafka) would
    refuse them, so it is off for these brokers (set before they start)."""
    monkeypatch.setenv("STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE", "false")
A, B, C = 900_001, 900_002, 900_003  # producer ids (unknown producers are accepted)
TRANSACTIONAL, CONTROL = 0x10, 0x20
INVALID_PRODUCER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION = 47, 3
TRANSACTION_COORDINATOR_FENCED, INVALID_RECORD = 52, 87


def produce_txn(bootstrap: str, pid: int, seq: int, values: list[bytes]) -> int:
    batch = kproto.record_batch([(None, v) for v in values], producer_id=pid, producer_epoch=0,
                                base_sequence=seq, attributes=TRANSACTIONAL)
    [(_, _, err, base)] = kproto.produce_raw(bootstrap, TOPIC, 0, batch)
    assert err == 0, err
    return base


def produce_plain(bootstrap: str, values: list[bytes]) -> int:
    [(_, _, err, base)] = kproto.produce_raw(bootstrap, TOPIC, 0,
                                             kproto.record_batch([(None, v) for v in values]))
    assert err == 0, err
    return base


def write_markers(bootstrap: str, pid: int, commit: bool, epoch: int = 0,
                  coordinator_epoch: int = 0, topic: str = TOPIC, partition: int = 0) -> int:
    """One WriteTxnMarkers v1 entry for one partition; returns its error code."""
    R = WriteTxnMarkersRequest
    marker = R.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch,
        topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=topic,
                                                           partition_indexes=[partition])])
    resp = kproto.call(bootstrap, R[1](markers=[marker]), timeout_s=40.0)
    [m] = resp.markers
    assert m.producer_id == pid
    [t] = m.topics
    [p] = t.partitions
    assert p.partition_index == partition
    return p.error_code


def latest(bootstrap: str, isolation_level: int) -> int:
    R = ListOffsetsRequest
    part = R.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                   timestamp=-1)
    resp = kproto.call(bootstrap, R[5](replica_id=-1, isolation_level=isolation_level,
                                       topics=[R.ListOffsetsTopic(name=TOPIC, partitions=[part])]))
    [p] = resp.topics[0].partitions
    assert p.error_code == 0, p
    return p.offset


def fetch(bootstrap: str, isolation_level: int, offset: int = 0):
    R = FetchRequest
    part = R.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                       last_fetched_epoch=-1, log_start_offset=-1,
                                       partition_max_bytes=1 << 20)
    resp = kproto.call(bootstrap, R[11](
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        isolation_level=isolation_level, session_id=0, session_epoch=-1,
        topics=[R.FetchTopic(topic=TOPIC, partitions=[part])], forgotten_topics_data=[],
        rack_id=""))
    [p] = resp.responses[0].partitions
    assert p.error_code == 0, p
    aborted = sorted((a.producer_id, a.first_offset) for a in (p.aborted_transactions or []))
    offsets = [base for (_, _, base) in kproto.scan_batches(bytes(p.records or b""))]
    return p.high_watermark, p.last_stable_offset, aborted, offsets


def consume(bootstrap: str, isolation: str, expect: int, timeout_s: float = 20.0) -> list[bytes]:
    """Values a confluent-kafka consumer reads from offset 0 with `isolation.level`."""
    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"txn-{isolation}-{time.monotonic_ns()}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "enable.partition.eof": True})
    c.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    eof = False
    try:
        while time.monotonic() < deadline and not (eof and len(values) >= expect):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    eof = True
                    continue
                raise AssertionError(m.error())
            values.append(m.value())
    finally:
        c.close()
    return values


def test_markers_lso_and_read_committed_survive_kill9(persistent_broker):
    """Proves the partition side of transactions end to end through the wire: an open
    transaction holds the last stable offset (ListOffsets read_committed, Fetch's
    last_stable_offset), an ABORT marker files the transaction in `aborted_transactions`, a
    COMMIT releases it; after a kill -9 and restart the same answers come back, and
    confluent-kafka with isolation.level=read_committed never sees the aborted records nor the
    open transaction's, while read_uncommitted sees them all."""
    b = persistent_broker
    bs = b.bootstrap
    create_topic(bs, TOPIC, 1)
    assert produce_txn(bs, A, 0, [b"a0", b"a1", b"a2"]) == 0
    assert produce_txn(bs, B, 0, [b"b0", b"b1"]) == 3
    assert produce_plain(bs, [b"p0"]) == 5
    assert produce_txn(bs, C, 0, [b"c0"]) == 6
    assert latest(bs, 1) == 0, "A's open transaction bounds the LSO"
    assert write_markers(bs, A, commit=False) == 0  # offset 7
    assert write_markers(bs, B, commit=True) == 0  # offset 8
    assert latest(bs, 0) == 9
    assert latest(bs, 1) == 6, "C is still open"
    before = fetch(bs, 1)
    assert before == (9, 6, [(A, 0)], [0, 3, 5]), before

    b.kill9()
    b.start()

    assert latest(bs, 0) == 9
    assert latest(bs, 1) == 6
    assert fetch(bs, 1) == before
    hw, lso, aborted, offsets = fetch(bs, 0)
    assert (hw, lso, aborted) == (9, 6, []), (hw, lso, aborted)
    assert offsets == [0, 3, 5, 6, 7, 8]
    assert consume(bs, "read_committed", 3) == [b"b0", b"b1", b"p0"]
    assert consume(bs, "read_uncommitted", 7) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"p0",
                                                  b"c0"]
    # C commits after the restart: its record becomes visible, A's never.
    assert write_markers(bs, C, commit=True) == 0
    assert latest(bs, 1) == 10
    assert consume(bs, "read_committed", 4) == [b"b0", b"b1", b"p0", b"c0"]


def test_marker_refusals_and_bad_input(broker):
    """Proves Kafka's per-partition answers to WriteTxnMarkers (an older producer epoch:
    INVALID_PRODUCER_EPOCH; an older coordinator epoch: TRANSACTION_COORDINATOR_FENCED; an
    unknown partition: UNKNOWN_TOPIC_OR_PARTITION), that a client's control batch in Produce
    is refused with INVALID_RECORD as Kafka does, and that garbage WriteTxnMarkers bodies do
    not hurt the broker."""
    bs = broker.bootstrap
    create_topic(bs, TOPIC, 1)
    produce_txn(bs, A, 0, [b"x"])
    assert write_markers(bs, A, commit=False, epoch=3, coordinator_epoch=5) == 0
    assert write_markers(bs, A, commit=False, epoch=2, coordinator_epoch=5) == INVALID_PRODUCER_EPOCH
    assert write_markers(bs, A, commit=True, epoch=3, coordinator_epoch=4) \
        == TRANSACTION_COORDINATOR_FENCED
    assert write_markers(bs, A, commit=True, partition=7) == UNKNOWN_TOPIC_OR_PARTITION
    assert write_markers(bs, A, commit=True, topic="no-such-topic") == UNKNOWN_TOPIC_OR_PARTITION

    control = kproto.record_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                                  producer_id=A, producer_epoch=3, attributes=CONTROL | TRANSACTIONAL)
    [(_, _, err, _)] = kproto.produce_raw(bs, TOPIC, 0, control)
    assert err == INVALID_RECORD, err
    end = latest(bs, 0)

    for body in [b"", b"\xff" * 7, b"\x02\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\xff\xff\xff"]:
        with kproto.connect(bs, 5.0) as s:
            s.sendall(kproto.request(27, 1, 5, body))
            try:
                s.recv(1024)
            except OSError:
                pass
    assert broker.alive()
    kproto.api_versions(bs)
    assert latest(bs, 0) == end, "nothing was appended by bad input"
