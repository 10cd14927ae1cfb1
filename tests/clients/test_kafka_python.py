"""kafka-python (pure Python client) against a fresh broker."""

from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from common import DEADLINE_S, SKIP_HW_CHECK, PARTITIONS, create_topic, read_and_verify, record_set, sent_counts, verify

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


class Rec:
    """Adapts a kafka-python ConsumerRecord to the accessor names `verify` uses."""

    def __init__(self, r):
        self._r = r

    def offset(self):
        return self._r.offset

    def key(self):
        return self._r.key

    def value(self):
        return self._r.value

    def headers(self):
        return list(self._r.headers or [])


def test_kafka_python_all_codecs_round_trip(broker):
    """Proves kafka-python's produce (acks=all, each codec incl. none, keys/nulls/headers/1 MiB)
    and its own group-less assign()+fetch round-trip exactly, ordered, offsets 0..n-1 as acked."""
    topic = "kafka-python-roundtrip"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    sent = []
    for codec in CODECS:
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", compression_type=codec,
            linger_ms=5, max_request_size=1048588, request_timeout_ms=30000,
        )
        recs = record_set("kp", codec or "none", len(sent), big=codec in (None, "gzip"),
                          null_key_and_value=False)
        futures = []
        for r in recs:
            futures.append((r, producer.send(topic, value=r.value, key=r.key, headers=r.headers,
                                             partition=r.partition)))
        producer.flush(timeout=60)
        for r, f in futures:
            md = f.get(timeout=30)
            r.partition, r.offset = md.partition, md.offset
        producer.close(timeout=10)
        sent += recs

    # Read back with kafka-python itself: no group, explicit assignment from the earliest offset.
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", max_partition_fetch_bytes=2 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024, consumer_timeout_ms=1000,
    )
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        want = sent_counts(sent)
        got = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + DEADLINE_S
        while any(len(got[p]) < want.get(p, 0) for p in got):
            assert time.monotonic() < deadline, f"read {[len(v) for v in got.values()]} of {want}"
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [Rec(r) for r in records]
        ends = consumer.end_offsets(tps)
    finally:
        consumer.close()
    verify(sent, got, PARTITIONS)
    assert SKIP_HW_CHECK or {tp.partition: o for tp, o in ends.items()} == {p: want.get(p, 0) for p in range(PARTITIONS)}, \
        "end offsets (high watermarks) differ from acked record counts"
    # And a second, independent reader (librdkafka) sees the same log.
    read_and_verify(broker.bootstrap, topic, sent, PARTITIONS)
