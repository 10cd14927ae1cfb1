"""confluent-kafka (librdkafka 2.x) against a fresh broker."""

from __future__ import annotations

from confluent_kafka import Producer

from common import PARTITIONS, create_topic, read_and_verify, record_set

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def produce(bootstrap: str, topic: str, recs, codec: str, idempotent: bool) -> None:
    errors = []

    def on_delivery(err, msg, rec):
        if err is not None:
            errors.append((rec.index, err))
        else:
            rec.partition, rec.offset = msg.partition(), msg.offset()

    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "compression.type": codec,
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "message.max.bytes": 1048588,
        "message.timeout.ms": 30000,
    })
    for r in recs:
        kwargs = {"partition": r.partition} if r.partition is not None else {}
        p.produce(topic, value=r.value, key=r.key, headers=r.headers or None,
                  on_delivery=lambda err, msg, r=r: on_delivery(err, msg, r), **kwargs)
        p.poll(0)
    remaining = p.flush(60)
    assert remaining == 0, f"{remaining} records never delivered"
    assert not errors, f"delivery errors: {errors[:5]}"


def test_confluent_all_codecs_round_trip(broker):
    """Proves librdkafka's produce (acks=all, every codec, keys/nulls/headers/1 MiB) and fetch
    round-trip byte-exact, per-partition ordered, offsets contiguous from 0 and equal to acks."""
    topic = "confluent-roundtrip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = []
    for codec in CODECS:
        recs = record_set("ck", codec, len(sent), big=(codec in ("none", "zstd")))
        produce(broker.bootstrap, topic, recs, codec, idempotent=False)
        sent += recs
    read_and_verify(broker.bootstrap, topic, sent, PARTITIONS)


def test_confluent_idempotent_producer(broker):
    """Proves the idempotent producer path (InitProducerId + sequences) works: all records
    acked once, read back exactly once and in order."""
    topic = "confluent-idempotent"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = []
    for codec in ("none", "lz4"):
        recs = record_set("idem", codec, len(sent))
        produce(broker.bootstrap, topic, recs, codec, idempotent=True)
        sent += recs
    read_and_verify(broker.bootstrap, topic, sent, PARTITIONS)


def test_auto_topic_creation(broker):
    """Proves auto topic creation is on: producing to an unknown topic creates it and the
    record is readable at offset 0."""
    topic = "auto-created-topic"
    recs = record_set("auto", "none", 0, partitions=1)[:3]
    for r in recs:
        r.partition = 0
    produce(broker.bootstrap, topic, recs, "none", idempotent=False)
    read_and_verify(broker.bootstrap, topic, recs, partitions=1)
