"""Transactional offset commits, the group coordinator's side of transactions (KIP-98,
KIP-447), over the wire with raw requests: TxnOffsetCommit keeps a producer's offsets pending,
OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for them and without it the last
committed offset, and the producer's COMMIT or ABORT marker (WriteTxnMarkers on the group's
`__consumer_offsets` partition, as a transaction coordinator sends it) applies or drops them.
The state survives kill -9 between the TxnOffsetCommit and the marker, and after it."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.consumer.group import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.producer.transaction import (InitProducerIdRequest, TxnOffsetCommitRequest,
                                                 WriteTxnMarkersRequest)

import kproto
from common import create_topic

TOPIC = "txn-offsets"
GROUP = "txn-offsets-group"
OFFSETS_TOPIC = "__consumer_offsets"
UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 3, 22, 25
INVALID_PRODUCER_EPOCH, UNSTABLE_OFFSET_COMMIT = 47, 88
# Top-level answers while a restarted coordinator loads or is being found: retried.
RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR
API_TXN_OFFSET_COMMIT = 28


@pytest.fixture(autouse=True)
def no_verification(monkeypatch):
    """These tests commit with a producer id no transaction coordinator knows and write the
    markers themselves (WriteTxnMarkers), to drive the group coordinator's side alone;
    KIP-890's verification (as in Kafka) would refuse such commits (test_txn_verification.py),
    so it is off for these brokers (set before they start)."""
    monkeypatch.setenv("STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE", "false")


def offsets_partition(bs: str, group: str) -> int:
    """Kafka's `abs(group.hashCode()) % partitions` (Java's String.hashCode over ASCII)."""
    n = len(kproto.metadata_v1(bs, OFFSETS_TOPIC)["partitions"])
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % n


def retry(fn, timeout_s: float = 30.0):
    """`fn()` returns (top-level error, value); retried while the error is retriable."""
    deadline = time.monotonic() + timeout_s
    while True:
        err, value = fn()
        if err not in RETRIABLE or time.monotonic() > deadline:
            assert err == 0, err
            return value
        time.sleep(0.2)


def init_producer(bs: str) -> tuple[int, int]:
    R = InitProducerIdRequest
    resp = kproto.call(bs, R[4](transactional_id=None, transaction_timeout_ms=60_000,
                                producer_id=-1, producer_epoch=-1))
    assert resp.error_code == 0, resp
    return resp.producer_id, resp.producer_epoch


def txn_commit(bs: str, pid: int, epoch: int, offsets: dict[int, int], version: int = 3,
               group: str = GROUP, member_id: str = "", generation_id: int = -1,
               topic: str = TOPIC) -> dict[int, int]:
    """TxnOffsetCommit of `offsets` {partition: offset}; {partition: error code}."""
    R = TxnOffsetCommitRequest
    parts = [R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
        partition_index=p, committed_offset=o, committed_leader_epoch=-1,
        committed_metadata="m") for p, o in sorted(offsets.items())]
    req = R[version](transactional_id="txn-offsets-tx", group_id=group, producer_id=pid,
                     producer_epoch=epoch, generation_id=generation_id, member_id=member_id,
                     group_instance_id=None,
                     topics=[R.TxnOffsetCommitRequestTopic(name=topic, partitions=parts)])

    def once():
        resp = kproto.call(bs, req, timeout_s=20.0)
        [t] = resp.topics
        errors = {p.partition_index: p.error_code for p in t.partitions}
        retriable = [e for e in errors.values() if e in RETRIABLE]
        return (retriable[0] if retriable else 0), errors
    return retry(once)


def plain_commit(bs: str, offsets: dict[int, int]) -> None:
    R = OffsetCommitRequest
    parts = [R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=p, committed_offset=o, committed_leader_epoch=-1,
        committed_metadata="") for p, o in offsets.items()]
    req = R[8](group_id=GROUP, generation_id_or_member_epoch=-1, member_id="",
               group_instance_id=None,
               topics=[R.OffsetCommitRequestTopic(name=TOPIC, partitions=parts)])
    resp = kproto.call(bs, req)
    assert all(p.error_code == 0 for p in resp.topics[0].partitions), resp


def fetch(bs: str, require_stable: bool, partitions=(0, 1)) -> dict[int, tuple[int, int]]:
    """OffsetFetch v7 (one group): {partition: (committed offset, error code)}."""
    R = OffsetFetchRequest
    req = R[7](group_id=GROUP, require_stable=require_stable,
               topics=[R.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=list(partitions))])

    def once():
        resp = kproto.call(bs, req)
        if resp.error_code:
            return resp.error_code, None
        return 0, {p.partition_index: (p.committed_offset, p.error_code)
                   for t in resp.topics for p in t.partitions}
    return retry(once)


def fetch_v8(bs: str, require_stable: bool) -> dict[int, tuple[int, int]]:
    """OffsetFetch v8 (groups array), every committed partition of the group (topics null)."""
    R = OffsetFetchRequest
    req = R[8](groups=[R.OffsetFetchRequestGroup(group_id=GROUP, topics=None)],
               require_stable=require_stable)

    def once():
        resp = kproto.call(bs, req)
        [g] = resp.groups
        if g.error_code:
            return g.error_code, None
        return 0, {p.partition_index: (p.committed_offset, p.error_code)
                   for t in g.topics for p in t.partitions}
    return retry(once)


def write_marker(bs: str, pid: int, epoch: int, commit: bool, partition: int) -> int:
    """The producer's COMMIT/ABORT marker on `__consumer_offsets`-`partition`; its error."""
    R = WriteTxnMarkersRequest
    marker = R.WritableTxnMarker(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=0,
        topics=[R.WritableTxnMarker.WritableTxnMarkerTopic(name=OFFSETS_TOPIC,
                                                           partition_indexes=[partition])])
    resp = kproto.call(bs, R[1](markers=[marker]), timeout_s=40.0)
    [p] = resp.markers[0].topics[0].partitions
    return p.error_code


UNSTABLE = (-1, UNSTABLE_OFFSET_COMMIT)


def test_txn_offsets_pending_until_marker_and_survive_kill9(persistent_broker):
    """Proves the coordinator side of transactions end to end: TxnOffsetCommit (v3 and v0)
    holds offsets pending (require_stable: UNSTABLE_OFFSET_COMMIT in v7 and v8; without it:
    the old committed offset), a COMMIT marker on the group's `__consumer_offsets` partition
    makes them visible and an ABORT drops them, and kill -9 + restart between the commit and
    the marker, and after the marker, gives the same answers (the coordinator replays the
    transactional records and the markers from the log)."""
    b = persistent_broker
    bs = b.bootstrap
    create_topic(bs, TOPIC, 2)
    assert kproto.api_versions(bs)[API_TXN_OFFSET_COMMIT] == (0, 4)
    part = offsets_partition(bs, GROUP)
    plain_commit(bs, {0: 5})
    pid, epoch = init_producer(bs)

    # A transaction commits offsets for both partitions: pending until its marker.
    assert txn_commit(bs, pid, epoch, {0: 10, 1: 11}) == {0: 0, 1: 0}
    assert fetch(bs, True) == {0: UNSTABLE, 1: UNSTABLE}
    assert fetch(bs, False) == {0: (5, 0), 1: (-1, 0)}
    assert fetch_v8(bs, True) == {0: UNSTABLE}
    assert fetch_v8(bs, False) == {0: (5, 0)}

    # kill -9 between the TxnOffsetCommit and the marker: still pending after the replay.
    b.kill9()
    b.start()
    assert fetch(bs, True) == {0: UNSTABLE, 1: UNSTABLE}
    assert fetch(bs, False) == {0: (5, 0), 1: (-1, 0)}

    assert write_marker(bs, pid, epoch, True, part) == 0
    assert fetch(bs, True) == {0: (10, 0), 1: (11, 0)}
    assert fetch_v8(bs, True) == {0: (10, 0), 1: (11, 0)}

    # A second transaction (TxnOffsetCommit v0: no member fields), aborted: nothing changes.
    assert txn_commit(bs, pid, epoch, {0: 20}, version=0) == {0: 0}
    assert fetch(bs, True) == {0: UNSTABLE, 1: (11, 0)}
    assert fetch(bs, False) == {0: (10, 0), 1: (11, 0)}
    assert write_marker(bs, pid, epoch, False, part) == 0
    assert fetch(bs, True) == {0: (10, 0), 1: (11, 0)}

    # A third, committed, then kill -9 after the marker; a fourth left open across the
    # restart and aborted after it.
    assert txn_commit(bs, pid, epoch, {0: 30}) == {0: 0}
    assert write_marker(bs, pid, epoch, True, part) == 0
    assert txn_commit(bs, pid, epoch, {1: 40}, version=4) == {1: 0}
    b.kill9()
    b.start()
    assert fetch(bs, True) == {0: (30, 0), 1: UNSTABLE}
    assert fetch(bs, False) == {0: (30, 0), 1: (11, 0)}
    assert write_marker(bs, pid, epoch, False, part) == 0
    assert fetch(bs, True) == {0: (30, 0), 1: (11, 0)}

    # One more restart with every transaction ended: the replay lands on the same offsets.
    b.kill9()
    b.start()
    assert fetch(bs, True) == {0: (30, 0), 1: (11, 0)}


def test_txn_offset_commit_refusals(broker):
    """Proves Kafka's refusals of TxnOffsetCommit: an epoch older than the one the group's
    partition has seen for the producer (here fenced by a marker of a newer epoch) is
    INVALID_PRODUCER_EPOCH and leaves nothing pending; v3 member fields for an unknown group
    are ILLEGAL_GENERATION and an unknown member of an existing group UNKNOWN_MEMBER_ID; a
    partition of an unknown topic UNKNOWN_TOPIC_OR_PARTITION."""
    bs = broker.bootstrap
    create_topic(bs, TOPIC, 2)
    part = offsets_partition(bs, GROUP)
    pid, epoch = init_producer(bs)
    assert txn_commit(bs, pid, epoch, {0: 1}) == {0: 0}
    assert write_marker(bs, pid, epoch, True, part) == 0
    # The transaction coordinator fenced the producer (an abort at a bumped epoch).
    assert write_marker(bs, pid, epoch + 1, False, part) == 0
    assert txn_commit(bs, pid, epoch, {0: 2}) == {0: INVALID_PRODUCER_EPOCH}
    assert fetch(bs, True) == {0: (1, 0), 1: (-1, 0)}, "nothing left pending"
    assert txn_commit(bs, pid, epoch + 1, {0: 3}) == {0: 0}
    assert fetch(bs, True)[0] == UNSTABLE

    assert txn_commit(bs, pid, epoch + 1, {0: 4}, group="no-such-group", member_id="m",
                      generation_id=1) == {0: ILLEGAL_GENERATION}
    assert txn_commit(bs, pid, epoch + 1, {0: 4}, member_id="ghost",
                      generation_id=0) == {0: UNKNOWN_MEMBER_ID}
    assert txn_commit(bs, pid, epoch + 1, {0: 4}, topic="no-such-topic") == \
        {0: UNKNOWN_TOPIC_OR_PARTITION}
    assert broker.alive()
