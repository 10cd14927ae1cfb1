"""Transactions end to end with confluent-kafka's transactional producer: the transaction
coordinator (FindCoordinator key type 1, `__transaction_state`, InitProducerId with a
transactional.id, AddPartitionsToTxn, EndTxn) and the markers it writes through
WriteTxnMarkers; read_committed and read_uncommitted consumers check what became visible."""

from __future__ import annotations

import time

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from common import create_topic

TOPIC = "txn-e2e"
PARTITIONS = 3
TIMEOUT_S = 30


def producer(bootstrap: str, txn_id: str, **extra) -> confluent_kafka.Producer:
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = confluent_kafka.Producer(conf)
    p.init_transactions(TIMEOUT_S)
    return p


def send(p: confluent_kafka.Producer, prefix: str, per_partition: int = 3) -> list[bytes]:
    """`per_partition` records to each partition; returns their values."""
    values = []
    for part in range(PARTITIONS):
        for i in range(per_partition):
            v = f"{prefix}-{part}-{i}".encode()
            p.produce(TOPIC, value=v, partition=part)
            values.append(v)
    p.flush(TIMEOUT_S)
    return values


def consume(bootstrap: str, isolation: str, expect: int, timeout_s: float = 20.0) -> list[bytes]:
    """Every value a consumer with `isolation.level` reads from the start of each partition
    (until each partition's end once at least `expect` values came), sorted."""
    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"txn-{isolation}-{time.monotonic_ns()}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not (len(at_eof) == PARTITIONS
                                                   and len(values) >= expect):
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(m.partition())
                    continue
                raise AssertionError(m.error())
            at_eof.discard(m.partition())
            values.append(m.value())
    finally:
        c.close()
        # Let the broker finish the long poll the consumer left in flight: a broker stopped
        # while a cross-shard long poll waits holds its connection until its drain deadline.
        time.sleep(0.5)
    return sorted(values)


def test_commit_and_abort_across_partitions(broker):
    """Proves a transactional producer's commit and abort over 3 partitions: a read_committed
    consumer sees exactly the committed records (the aborted ones never), a read_uncommitted
    one sees both; a second commit after the abort works on the same producer."""
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    p = producer(bs, "tx-commit-abort")
    p.begin_transaction()
    committed = send(p, "c")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    aborted = send(p, "a")
    p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    committed += send(p, "d", 1)
    p.commit_transaction(TIMEOUT_S)

    assert consume(bs, "read_committed", len(committed)) == sorted(committed)
    assert consume(bs, "read_uncommitted", len(committed) + len(aborted)) \
        == sorted(committed + aborted)


def fenced(e: KafkaException) -> bool:
    err = e.args[0]
    return err.fatal() or err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)


def test_second_producer_fences_the_first_and_aborts_its_transaction(broker):
    """Proves fencing: a second producer with the same transactional.id makes the first one's
    commit fail with a fenced (fatal) error, the first one's open transaction is aborted (a
    read_committed consumer never sees it, and its open transaction no longer holds the last
    stable offset), and the second producer commits."""
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    first = producer(bs, "tx-fence")
    first.begin_transaction()
    zombie = send(first, "z")

    second = producer(bs, "tx-fence")
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    assert fenced(raised.value), raised.value

    second.begin_transaction()
    committed = send(second, "s")
    second.commit_transaction(TIMEOUT_S)
    assert consume(bs, "read_committed", len(committed)) == sorted(committed)
    assert consume(bs, "read_uncommitted", len(committed) + len(zombie)) \
        == sorted(committed + zombie)


def test_coordinator_reloads_after_kill9(persistent_broker):
    """Proves the coordinator's state survives a kill -9: a transaction left open when the
    broker dies is aborted by the next producer's init once the coordinator has reloaded
    `__transaction_state` (its records never become visible to read_committed, and no longer
    hold the last stable offset), and a transaction committed before the kill stays
    committed."""
    b = persistent_broker
    bs = b.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    p = producer(bs, "tx-crash")
    p.begin_transaction()
    before = send(p, "before")
    p.commit_transaction(TIMEOUT_S)
    p.begin_transaction()
    open_txn = send(p, "open")

    b.kill9()
    b.start()

    again = producer(bs, "tx-crash")
    again.begin_transaction()
    after = send(again, "after")
    again.commit_transaction(TIMEOUT_S)
    committed = before + after
    assert consume(bs, "read_committed", len(committed)) == sorted(committed)
    assert consume(bs, "read_uncommitted", len(committed) + len(open_txn)) \
        == sorted(committed + open_txn)


def test_prepared_commit_completes_after_kill9(persistent_broker):
    """Proves a transaction whose commit was acknowledged is completed by the reloaded
    coordinator after a kill -9: its records become visible to read_committed without any
    producer doing anything more."""
    b = persistent_broker
    bs = b.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    p = producer(bs, "tx-prepared")
    p.begin_transaction()
    committed = send(p, "c")
    p.commit_transaction(TIMEOUT_S)
    b.kill9()
    b.start()
    assert consume(bs, "read_committed", len(committed)) == sorted(committed)


def test_coordinator_aborts_a_timed_out_transaction(broker_factory, monkeypatch):
    """Proves transaction.timeout.ms: a transaction left open past its timeout is aborted by
    the coordinator (its markers release the last stable offset: a read_committed consumer
    then sees a later committed transaction of another producer), and the producer that
    left it is fenced."""
    monkeypatch.setenv("STRATA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS",
                       "200")
    b = broker_factory()
    bs = b.bootstrap
    create_topic(bs, TOPIC, PARTITIONS)
    slow = producer(bs, "tx-slow", **{"transaction.timeout.ms": 2000})
    slow.begin_transaction()
    lost = send(slow, "lost")
    other = producer(bs, "tx-other")
    other.begin_transaction()
    committed = send(other, "ok")
    other.commit_transaction(TIMEOUT_S)
    assert consume(bs, "read_committed", len(committed)) == sorted(committed)
    with pytest.raises(KafkaException):
        slow.commit_transaction(TIMEOUT_S)
    assert consume(bs, "read_uncommitted", len(committed) + len(lost)) \
        == sorted(committed + lost)
