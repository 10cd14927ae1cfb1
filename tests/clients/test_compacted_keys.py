"""A compacted topic refuses records without a key, as Kafka does: the partition's whole batch
is refused with INVALID_RECORD, Produce v8+ names each keyless record in `record_errors`
(KIP-467) with Kafka's messages, and the other partitions of the same request are appended.
Checked on the wire (kafka-python's message classes), with confluent-kafka in every codec
(compressed batches are read inside too) and with kcat."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.producer.produce import ProduceRequest

import kproto
from common import wait_partitions

INVALID_RECORD = 87
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def create(bootstrap: str, topic: str, policy: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": policy})],
                                  operation_timeout=30)
    futures[topic].result(30)
    wait_partitions(bootstrap, topic, 1)


def produce_v(bootstrap: str, version: int, parts: list[tuple[str, bytes]]):
    """One Produce request at `version` with one batch per topic (partition 0); returns the
    partition responses by topic name."""
    R = ProduceRequest
    req = R[version](
        transactional_id=None, acks=-1, timeout_ms=10_000,
        topic_data=[R.TopicProduceData(name=topic, partition_data=[
            R.TopicProduceData.PartitionProduceData(index=0, records=batch)])
            for topic, batch in parts])
    resp = kproto.call(bootstrap, req)
    return {t.name: t.partition_responses[0] for t in resp.responses}


def key_message(topic: str) -> str:
    return f"Compacted topic cannot accept message without key in topic partition {topic}-0."


def test_keyless_records_refused_with_record_errors(broker):
    """Proves a v8 Produce whose compacted-topic batch holds two keyless records among a keyed
    one is refused whole with INVALID_RECORD, record_errors [1, 2] and Kafka's messages, while
    a keyless record for a delete topic in the same request is appended; v7 gets the code
    only; nothing of the refused batches was appended (the next keyed write lands at 0)."""
    create(broker.bootstrap, "ck", "compact")
    create(broker.bootstrap, "ck-both", "compact,delete")
    create(broker.bootstrap, "plain", "delete")
    refused = kproto.record_batch([(b"k", b"v"), (None, b"a"), (None, b"b")])
    answers = produce_v(broker.bootstrap, 8, [("ck", refused), ("ck-both", refused),
                                              ("plain", kproto.record_batch([(None, b"x")]))])
    for topic in ["ck", "ck-both"]:
        p = answers[topic]
        assert p.error_code == INVALID_RECORD, p
        assert p.base_offset == -1, p
        assert [(e.batch_index, e.batch_index_error_message) for e in p.record_errors] == [
            (1, key_message(topic)), (2, key_message(topic))]
        assert p.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and only "
            "showing the first three errors at most: ["
            f"RecordError(batchIndex=1, message='{key_message(topic)}'), "
            f"RecordError(batchIndex=2, message='{key_message(topic)}')]")
    assert answers["plain"].error_code == 0 and answers["plain"].base_offset == 0, answers["plain"]

    old = produce_v(broker.bootstrap, 7, [("ck", kproto.record_batch([(None, b"a")]))])["ck"]
    assert old.error_code == INVALID_RECORD, old

    ok = produce_v(broker.bootstrap, 8, [("ck", kproto.record_batch([(b"k", b"v")]))])["ck"]
    assert ok.error_code == 0 and ok.base_offset == 0 and not ok.record_errors, ok


def test_confluent_keyless_refused_keyed_accepted_every_codec(broker):
    """Proves confluent-kafka's keyless record to a compacted topic fails delivery with
    INVALID_RECORD in every codec (the broker reads inside compressed batches), while keyed
    records in the same run succeed and are all a consumer reads back."""
    topic = "ck-confluent"
    create(broker.bootstrap, topic, "compact")
    keyed: list[bytes] = []
    for codec in CODECS:
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                      "linger.ms": 0, "retries": 0})
        outcome: dict[str, KafkaError | None] = {}

        def report(err, msg, name):
            outcome[name] = err

        p.produce(topic, value=b"no key " + codec.encode(), partition=0,
                  on_delivery=lambda err, msg: report(err, msg, "keyless"))
        assert p.flush(30) == 0
        key = f"key-{codec}".encode()
        p.produce(topic, key=key, value=b"keyed " * 40, partition=0,
                  on_delivery=lambda err, msg: report(err, msg, "keyed"))
        assert p.flush(30) == 0
        assert outcome["keyless"] is not None and outcome["keyless"].code() == KafkaError.INVALID_RECORD, \
            (codec, outcome)
        assert outcome["keyed"] is None, (codec, outcome)
        keyed.append(key)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ck-reader",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    for _ in range(30):
        for m in c.consume(100, timeout=1):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.key()))
        if len(got) >= len(keyed):
            break
    c.close()
    assert got == list(enumerate(keyed))


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
def test_kcat_keyless_refused_keyed_accepted(broker):
    """Proves kcat (librdkafka 2.0.2) reports a failed delivery for a keyless line to a
    compacted topic and delivers a keyed one."""
    topic = "ck-kcat"
    create(broker.bootstrap, topic, "compact")
    cmd = ["kcat", "-P", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-X", "acks=all",
           "-X", "message.send.max.retries=0"]
    r = subprocess.run(cmd, input=b"no key\n", capture_output=True, timeout=60)
    err = r.stderr.decode(errors="replace")
    assert r.returncode != 0 or "Delivery failed" in err, err
    # librdkafka names INVALID_RECORD "Broker failed to validate record".
    assert "Broker failed to validate record" in err, err
    r = subprocess.run(cmd + ["-K", ":"], input=b"k:keyed\n", capture_output=True, timeout=60)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 0 and "Delivery failed" not in err, err
    out = subprocess.run(["kcat", "-C", "-b", broker.bootstrap, "-t", topic, "-p", "0", "-o",
                          "beginning", "-e", "-f", "%o %k %s\n"], capture_output=True, timeout=60)
    assert out.stdout.decode() == "0 k keyed\n", out
