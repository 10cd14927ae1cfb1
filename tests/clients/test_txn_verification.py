"""KIP-890 part 1, the server-side defence against hanging transactions, over the wire with raw
requests, against Strata and against Apache Kafka 4.1 (the same script, the same answers).

A transactional producer (InitProducerId with a transactional id) sends a transactional batch to
a partition it never added with AddPartitionsToTxn. Appended, it would open a transaction the
coordinator does not know of: no marker would ever end it, and the last stable offset would stay
behind it for ever (read_committed consumers stall). The leader asks the coordinator first
(AddPartitionsToTxn verify-only) and refuses it with INVALID_TXN_STATE ("Partition was not added
to the transaction"): nothing is appended, the high watermark and the LSO stay where they were.
Once the partition is added, the same batch goes in (the positive control), and EndTxn's abort
releases the LSO.

The same defence guards a transaction's offset commits: a TxnOffsetCommit for a group whose
`__consumer_offsets` partition the producer never added (no AddOffsetsToTxn) would leave its
offsets pending for ever, and that partition's LSO held. The group coordinator verifies it with
the transaction coordinator and refuses it with INVALID_TXN_STATE.

Kafka 4.1 runs with `transaction.partition.verification.enable` at its default (true), as Strata.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.producer.produce import ProduceRequest
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.producer.transaction import (AddOffsetsToTxnRequest,
                                                 AddPartitionsToTxnRequest, EndTxnRequest,
                                                 InitProducerIdRequest, TxnOffsetCommitRequest)

import kproto
from common import create_topic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))

import reference_kafka  # noqa: E402

TRANSACTIONAL = 0x10
INVALID_TXN_STATE, UNSTABLE_OFFSET_COMMIT = 48, 88
# What a produce answers while verification finds the coordinator between PrepareAbort and
# CompleteAbort (CONCURRENT_TRANSACTIONS, which Kafka maps to this retriable code).
NOT_ENOUGH_REPLICAS = 19
# Answers while the coordinator is being created or loads: asked again.
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR


def retry(fn, timeout_s: float = 60.0):
    """`fn()` returns (error, value); retried while the error is retriable."""
    deadline = time.monotonic() + timeout_s
    while True:
        err, value = fn()
        if err not in RETRIABLE or time.monotonic() > deadline:
            return err, value
        time.sleep(0.3)


def find_coordinator(bs: str, txn_id: str, key_type: int = 1) -> None:
    """FindCoordinator for a transactional id (key type 1) or a group (0), until found."""
    R = FindCoordinatorRequest

    def once():
        resp = kproto.call(bs, R[3](key=txn_id, key_type=key_type))
        return resp.error_code, None
    err, _ = retry(once)
    assert err == 0, err


def init_producer(bs: str, txn_id: str) -> tuple[int, int]:
    R = InitProducerIdRequest

    def once():
        resp = kproto.call(bs, R[4](transactional_id=txn_id, transaction_timeout_ms=60_000,
                                    producer_id=-1, producer_epoch=-1), timeout_s=30.0)
        return resp.error_code, (resp.producer_id, resp.producer_epoch)
    err, value = retry(once)
    assert err == 0, err
    return value


def add_partition(bs: str, txn_id: str, pid: int, epoch: int, topic: str, partition: int) -> int:
    R = AddPartitionsToTxnRequest

    def once():
        resp = kproto.call(bs, R[3](v3_and_below_transactional_id=txn_id,
                                    v3_and_below_producer_id=pid,
                                    v3_and_below_producer_epoch=epoch,
                                    v3_and_below_topics=[R.AddPartitionsToTxnTopic(
                                        name=topic, partitions=[partition])]), timeout_s=30.0)
        [t] = resp.results_by_topic_v3_and_below
        [p] = t.results_by_partition
        return p.partition_error_code, None
    return retry(once)[0]


def end_txn(bs: str, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    R = EndTxnRequest

    def once():
        resp = kproto.call(bs, R[3](transactional_id=txn_id, producer_id=pid,
                                    producer_epoch=epoch, committed=commit), timeout_s=30.0)
        return resp.error_code, None
    return retry(once)[0]


def produce(bs: str, txn_id: str, topic: str, partition: int, pid: int, epoch: int,
            seq: int) -> tuple[int, str | None, int]:
    """Produce v9 (acks=all) of one transactional batch; (error, message, base offset)."""
    batch = kproto.record_batch([(b"k", b"v0"), (b"k", b"v1")], producer_id=pid,
                                producer_epoch=epoch, base_sequence=seq, attributes=TRANSACTIONAL)
    R = ProduceRequest
    req = R[9](transactional_id=txn_id, acks=-1, timeout_ms=20_000, topic_data=[
        R.TopicProduceData(name=topic, partition_data=[
            R.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])
    resp = kproto.call(bs, req, timeout_s=30.0)
    [t] = resp.responses
    [p] = t.partition_responses
    return p.error_code, p.error_message, p.base_offset


def offsets(bs: str, topic: str, partition: int) -> dict:
    """High watermark and LSO (Fetch v11 answers both), what read_uncommitted and
    read_committed Fetch return from offset 0, and ListOffsets latest at both isolations."""
    out = {}
    for isolation in (0, 1):
        R = FetchRequest
        part = R.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1,
                                           fetch_offset=0, last_fetched_epoch=-1,
                                           log_start_offset=-1, partition_max_bytes=1 << 20)
        resp = kproto.call(bs, R[11](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
            isolation_level=isolation, session_id=0, session_epoch=-1,
            topics=[R.FetchTopic(topic=topic, partitions=[part])], forgotten_topics_data=[],
            rack_id=""))
        [p] = resp.responses[0].partitions
        assert p.error_code == 0, p
        # Whether any batch came back (how many differs: Kafka 4.1 answered the data batch
        # alone after the abort where Strata sends the marker too).
        out[f"fetch{isolation}"] = (p.high_watermark, p.last_stable_offset,
                                    min(1, len(kproto.scan_batches(bytes(p.records or b"")))))
        L = ListOffsetsRequest
        lp = L.ListOffsetsTopic.ListOffsetsPartition(partition_index=partition,
                                                     current_leader_epoch=-1, timestamp=-1)
        lresp = kproto.call(bs, L[5](replica_id=-1, isolation_level=isolation,
                                     topics=[L.ListOffsetsTopic(name=topic, partitions=[lp])]))
        out[f"latest{isolation}"] = lresp.topics[0].partitions[0].offset
    return out


def hanging_transaction_scenario(bs: str, topic: str) -> dict:
    """The script both brokers run; returns what it saw."""
    txn_id = f"{topic}-txn"
    create_topic(bs, topic, 1)
    find_coordinator(bs, txn_id)
    pid, epoch = init_producer(bs, txn_id)
    seen = {}
    # Never added: refused, nothing appended, the LSO not held.
    err, message, _ = produce(bs, txn_id, topic, 0, pid, epoch, 0)
    seen["unadded"] = (err, message)
    seen["after_unadded"] = offsets(bs, topic, 0)
    # Added: the same batch goes in and holds the LSO until the abort.
    seen["add"] = add_partition(bs, txn_id, pid, epoch, topic, 0)
    err, _, base = produce(bs, txn_id, topic, 0, pid, epoch, 0)
    seen["added"] = (err, base)
    seen["after_added"] = offsets(bs, topic, 0)
    seen["abort"] = end_txn(bs, txn_id, pid, epoch, commit=False)
    deadline = time.monotonic() + 20
    while True:
        o = offsets(bs, topic, 0)
        if o["fetch1"][1] == 3 or time.monotonic() > deadline:  # 2 records + the marker
            break
        time.sleep(0.2)
    seen["after_abort"] = o
    # After the abort marker the producer has no transaction open here: a batch of the next
    # transaction, not added yet, is refused again (the verification starts afresh). The
    # coordinator completes the abort (CompleteAbort) just after the marker is written; until
    # then the answer is retriable, and a client retries it: so does this.
    deadline = time.monotonic() + 10
    while True:
        err, message, _ = produce(bs, txn_id, topic, 0, pid, epoch, 2)
        if err != NOT_ENOUGH_REPLICAS or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    seen["unadded_after_abort"] = (err, message)
    seen["end"] = offsets(bs, topic, 0)
    return seen


EXPECTED = {
    "unadded": (INVALID_TXN_STATE, "Partition was not added to the transaction"),
    "after_unadded": {"fetch0": (0, 0, 0), "latest0": 0, "fetch1": (0, 0, 0), "latest1": 0},
    "add": 0,
    "added": (0, 0),
    # The open transaction holds the LSO at its first offset.
    "after_added": {"fetch0": (2, 0, 1), "latest0": 2, "fetch1": (2, 0, 0), "latest1": 0},
    "abort": 0,
    "after_abort": {"fetch0": (3, 3, 1), "latest0": 3, "fetch1": (3, 3, 1), "latest1": 3},
    "unadded_after_abort": (INVALID_TXN_STATE, "Partition was not added to the transaction"),
    "end": {"fetch0": (3, 3, 1), "latest0": 3, "fetch1": (3, 3, 1), "latest1": 3},
}


def add_offsets(bs: str, txn_id: str, pid: int, epoch: int, group: str) -> int:
    R = AddOffsetsToTxnRequest

    def once():
        resp = kproto.call(bs, R[3](transactional_id=txn_id, producer_id=pid,
                                    producer_epoch=epoch, group_id=group), timeout_s=30.0)
        return resp.error_code, None
    return retry(once)[0]


def txn_offset_commit(bs: str, txn_id: str, group: str, pid: int, epoch: int, topic: str,
                      offset: int) -> int:
    """TxnOffsetCommit v3 (what a transaction version 1 client sends) of `offset` for
    `topic`-0, no group membership; the partition's error."""
    R = TxnOffsetCommitRequest
    part = R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
        committed_metadata="")
    req = R[3](transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
               generation_id=-1, member_id="", group_instance_id=None,
               topics=[R.TxnOffsetCommitRequestTopic(name=topic, partitions=[part])])

    def once():
        resp = kproto.call(bs, req, timeout_s=30.0)
        return resp.topics[0].partitions[0].error_code, None
    return retry(once)[0]


def committed(bs: str, group: str, topic: str) -> tuple[int, int]:
    """OffsetFetch v7 with require_stable of `topic`-0: (offset, error); a commit pending in
    an open transaction answers UNSTABLE_OFFSET_COMMIT."""
    R = OffsetFetchRequest
    req = R[7](group_id=group, require_stable=True,
               topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])])

    def once():
        resp = kproto.call(bs, req)
        if resp.error_code:
            return resp.error_code, None
        p = resp.topics[0].partitions[0]
        return 0, (p.committed_offset, p.error_code)
    err, value = retry(once)
    assert err == 0, err
    return value


def offsets_partition_stable(bs: str, group: str) -> bool:
    """Whether the group's `__consumer_offsets` partition has no open transaction holding its
    last stable offset (ListOffsets latest: read_committed equals read_uncommitted)."""
    n = len(kproto.metadata_v1(bs, "__consumer_offsets")["partitions"])
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    partition = (0 if h == -(1 << 31) else abs(h)) % n
    latest = []
    for isolation in (0, 1):
        L = ListOffsetsRequest
        lp = L.ListOffsetsTopic.ListOffsetsPartition(partition_index=partition,
                                                     current_leader_epoch=-1, timestamp=-1)
        resp = kproto.call(bs, L[5](replica_id=-1, isolation_level=isolation, topics=[
            L.ListOffsetsTopic(name="__consumer_offsets", partitions=[lp])]))
        p = resp.topics[0].partitions[0]
        assert p.error_code == 0, p
        latest.append(p.offset)
    return latest[0] == latest[1]


def offset_commit_scenario(bs: str, topic: str) -> dict:
    """The script both brokers run for transactional offset commits; returns what it saw."""
    txn_id, group = f"{topic}-txn", f"{topic}-group"
    create_topic(bs, topic, 1)
    find_coordinator(bs, txn_id)
    find_coordinator(bs, group, key_type=0)
    pid, epoch = init_producer(bs, txn_id)
    seen = {}
    # No AddOffsetsToTxn: refused, nothing pending, no transaction opened on the group's
    # __consumer_offsets partition.
    seen["unadded"] = txn_offset_commit(bs, txn_id, group, pid, epoch, topic, 5)
    seen["after_unadded"] = committed(bs, group, topic)
    seen["stable_after_unadded"] = offsets_partition_stable(bs, group)
    # Added: pending until EndTxn's COMMIT marker, then committed.
    seen["add_offsets"] = add_offsets(bs, txn_id, pid, epoch, group)
    seen["added"] = txn_offset_commit(bs, txn_id, group, pid, epoch, topic, 7)
    seen["pending"] = committed(bs, group, topic)
    seen["commit"] = end_txn(bs, txn_id, pid, epoch, commit=True)
    deadline = time.monotonic() + 20
    while committed(bs, group, topic) != (7, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    seen["after_commit"] = committed(bs, group, topic)
    # The partition left the transaction with its marker: the next transaction's commit,
    # not added, is refused again.
    seen["unadded_after_commit"] = txn_offset_commit(bs, txn_id, group, pid, epoch, topic, 9)
    seen["end"] = committed(bs, group, topic)
    seen["stable_at_end"] = offsets_partition_stable(bs, group)
    return seen


OFFSETS_EXPECTED = {
    "unadded": INVALID_TXN_STATE,
    "after_unadded": (-1, 0),
    "stable_after_unadded": True,
    "add_offsets": 0,
    "added": 0,
    "pending": (-1, UNSTABLE_OFFSET_COMMIT),
    "commit": 0,
    "after_commit": (7, 0),
    "unadded_after_commit": INVALID_TXN_STATE,
    "end": (7, 0),
    "stable_at_end": True,
}


def test_unadded_group_offsets_are_refused(broker):
    """Proves TxnOffsetCommit without AddOffsetsToTxn is INVALID_TXN_STATE and leaves
    nothing pending (before the fix Strata accepted it and the offsets stayed pending for
    ever, the group's __consumer_offsets partition's LSO held), while the same commit after
    AddOffsetsToTxn is pending until EndTxn commits it."""
    assert offset_commit_scenario(broker.bootstrap, "kip890-offsets") == OFFSETS_EXPECTED


def test_unadded_partition_is_refused(broker):
    assert hanging_transaction_scenario(broker.bootstrap, "kip890") == EXPECTED


@pytest.mark.reference_kafka
def test_kafka_answers_the_same(tmp_path):
    if not reference_kafka.jars_present():
        reason = f"no Kafka jars in {reference_kafka.LIB}; run tests/fetch-jars.sh kafka"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    k = reference_kafka.ReferenceKafka(tmp_path / "kafka", heap="512m")
    try:
        k.start()
        assert hanging_transaction_scenario(k.bootstrap, "kip890") == EXPECTED
        assert offset_commit_scenario(k.bootstrap, "kip890-offsets") == OFFSETS_EXPECTED
    finally:
        try:
            k.stop()
        finally:
            k.kill9()


def test_verification_off_lets_it_hang(broker_factory, monkeypatch):
    """With `transaction_partition_verification_enable=false` the batch goes in unverified
    and holds the LSO: the hanging transaction the defence exists for."""
    monkeypatch.setenv("STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE", "false")
    b = broker_factory()
    if b.kind != "strata":
        pytest.skip(f"{b.kind}: the setting is Strata's")
    bs = b.bootstrap
    topic = "kip890-off"
    txn_id = f"{topic}-txn"
    create_topic(bs, topic, 1)
    find_coordinator(bs, txn_id)
    pid, epoch = init_producer(bs, txn_id)
    err, _, base = produce(bs, txn_id, topic, 0, pid, epoch, 0)
    assert (err, base) == (0, 0)
    o = offsets(bs, topic, 0)
    assert o["fetch0"] == (2, 0, 1) and o["latest1"] == 0, o
