"""What the broker answers, field by field, where a client library hides the field: requests
encoded and responses decoded by kafka-python's generated message classes (kproto.call)."""

from __future__ import annotations

import struct
import time

from kafka.protocol.admin.topics import CreateTopicsRequest
from kafka.protocol.consumer.fetch import FetchRequest
from kafka.protocol.consumer.offsets import ListOffsetsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest
from kafka.protocol.metadata.metadata import MetadataRequest

import kproto

LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def create_topic(bootstrap: str, name: str, partitions: int = 1, rf: int = -1,
                 configs: dict[str, str] | None = None, version: int = 5,
                 validate_only: bool = False):
    R = CreateTopicsRequest
    topic = R.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
        configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in (configs or {}).items()])
    resp = kproto.call(bootstrap, R[version](topics=[topic], timeout_ms=30_000,
                                             validate_only=validate_only))
    [result] = resp.topics
    return result


def list_offset(bootstrap: str, topic: str, timestamp: int, version: int = 4):
    R = ListOffsetsRequest
    part = R.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
    resp = kproto.call(bootstrap, R[version](
        replica_id=-1, isolation_level=0,
        topics=[R.ListOffsetsTopic(name=topic, partitions=[part])]))
    [t] = resp.topics
    [p] = t.partitions
    assert p.error_code == 0, p
    return p


def metadata_leader_epoch(bootstrap: str, topic: str) -> int:
    R = MetadataRequest
    resp = kproto.call(bootstrap, R[9](topics=[R.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False))
    [t] = resp.topics
    [p] = t.partitions
    assert p.error_code == 0, p
    return p.leader_epoch


def produce(bootstrap: str, topic: str, records, timestamp_ms: int,
            timestamp_deltas: list[int] | None = None) -> None:
    batch = kproto.record_batch(records, timestamp_ms=timestamp_ms,
                                timestamp_deltas=timestamp_deltas)
    [(_, _, err, _)] = kproto.produce_raw(bootstrap, topic, 0, batch)
    assert err == 0, err


def wait_for_leader(bootstrap: str, topic: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            list_offset(bootstrap, topic, LATEST)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_list_offsets_answers_real_leader_epochs(persistent_broker):
    """Proves ListOffsets v4+ answers real leader epochs, as Kafka does, not 0: the latest
    offset carries the current epoch (the one Metadata reports); the earliest offset and a
    timestamp or max-timestamp lookup carry the epoch the record was written in. Each restart
    re-elects the leader, so the record is written in a nonzero epoch and read in a later one."""
    b = persistent_broker
    assert create_topic(b.bootstrap, "epochs").error_code == 0
    wait_for_leader(b.bootstrap, "epochs")
    b.restart()
    wait_for_leader(b.bootstrap, "epochs")
    written_in = metadata_leader_epoch(b.bootstrap, "epochs")
    produce(b.bootstrap, "epochs", [(None, b"v")], timestamp_ms=1_700_000_000_000)
    b.restart()
    wait_for_leader(b.bootstrap, "epochs")
    current = metadata_leader_epoch(b.bootstrap, "epochs")
    assert 0 < written_in < current, (written_in, current)
    assert list_offset(b.bootstrap, "epochs", LATEST).leader_epoch == current
    assert list_offset(b.bootstrap, "epochs", EARLIEST).leader_epoch == written_in
    assert list_offset(b.bootstrap, "epochs", 0).leader_epoch == written_in
    assert list_offset(b.bootstrap, "epochs", MAX_TIMESTAMP, version=7).leader_epoch == written_in
    assert list_offset(b.bootstrap, "epochs", LATEST, version=3).leader_epoch == -1


def test_list_offsets_by_timestamp_finds_the_record_inside_a_batch(broker):
    """Proves a timestamp lookup answers the first record whose timestamp is >= T, looking
    inside batches: one batch of two records stamped T1 < T2 answers offset 2 (its second
    record) for T2, not the batch's base offset; and max-timestamp (-3) answers the first
    record holding the largest timestamp (Kafka since KAFKA-16310), here the first record of
    a batch whose second record is older."""
    t1 = 1_700_000_000_000
    t2 = t1 + 5_000
    t3 = t2 + 5_000
    assert create_topic(broker.bootstrap, "stamps").error_code == 0
    wait_for_leader(broker.bootstrap, "stamps")
    produce(broker.bootstrap, "stamps", [(None, b"early")], timestamp_ms=t1 - 10_000)
    produce(broker.bootstrap, "stamps", [(None, b"a"), (None, b"b")], timestamp_ms=t1,
            timestamp_deltas=[0, t2 - t1])
    produce(broker.bootstrap, "stamps", [(None, b"c"), (None, b"d")], timestamp_ms=t3 - 1,
            timestamp_deltas=[1, 0])
    lookups = (t1 - 10_000, t1, t1 + 1, t2, t2 + 1, t3 + 1)
    got = {ts: (p.offset, p.timestamp) for ts in lookups
           for p in [list_offset(broker.bootstrap, "stamps", ts)]}
    assert got == {
        t1 - 10_000: (0, t1 - 10_000),
        t1: (1, t1),
        t1 + 1: (2, t2),
        t2: (2, t2),
        t2 + 1: (3, t3),
        t3 + 1: (-1, -1),
    }
    top = list_offset(broker.bootstrap, "stamps", MAX_TIMESTAMP, version=7)
    assert (top.offset, top.timestamp) == (3, t3)


def test_create_topics_reports_what_was_created(broker):
    """Proves CreateTopics v5+ reports the topic's partition count, replication factor and
    configs (every topic setting with the override in effect, as Kafka does), with and
    without validate_only. (A replication factor other than 1 needs a cluster:
    tests/cluster/test_cluster_acks.py checks it.)"""
    for version in (5, 7):
        for validate_only in (True, False):
            name = f"made-{version}-{int(validate_only)}"
            r = create_topic(broker.bootstrap, name, partitions=3, rf=-1, version=version,
                             configs={"retention.ms": "12345"}, validate_only=validate_only)
            assert r.error_code == 0, r
            assert (r.num_partitions, r.replication_factor) == (3, 1), r
            configs = {c.name: c.value for c in r.configs}
            assert configs.get("retention.ms") == "12345", configs
            assert "cleanup.policy" in configs, configs


def fetch_batches(bootstrap: str, topic: str) -> list[dict]:
    """The stored batches of partition 0 as a Fetch v4 returns them: header fields, and
    whether the CRC-32C still matches."""
    R = FetchRequest
    resp = kproto.call(bootstrap, R[4](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        topics=[R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    [t] = resp.responses
    [p] = t.partitions
    assert p.error_code == 0, p
    data = bytes(p.records) if not hasattr(p.records, "buffer") else bytes(p.records.buffer())
    out, pos = [], 0
    while pos + 61 <= len(data):
        base_offset, batch_len = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + batch_len
        (crc,) = struct.unpack_from(">I", data, pos + 17)
        attributes, last_delta = struct.unpack_from(">hi", data, pos + 21)
        producer_id, producer_epoch, base_sequence, count = struct.unpack_from(
            ">qhii", data, pos + 43)
        out.append({
            "base_offset": base_offset, "codec": attributes & 0x07,
            "last_offset": base_offset + last_delta, "count": count,
            "producer_id": producer_id, "base_sequence": base_sequence,
            "crc_ok": kproto.crc32c(data[pos + 21:end]) == crc,
        })
        pos = end
    return out


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_topic_compression_type_recompresses_on_append(broker):
    """Proves topic config compression.type works as in Kafka: `producer` (the default)
    stores a batch in the codec it was sent with; a codec name stores it in that codec
    (recompressing a batch sent in another); `uncompressed` stores it uncompressed. The
    stored batch keeps its offsets, producer id and sequence, has a valid CRC, and a real
    client reads back every value."""
    from confluent_kafka import Consumer, Producer
    cases = [("producer", "snappy", "snappy"), ("zstd", "gzip", "zstd"),
             ("uncompressed", "lz4", "none"), ("gzip", "gzip", "gzip"), ("lz4", "none", "lz4")]
    for topic_codec, sent, stored in cases:
        topic = f"codec-{topic_codec}-{sent}"
        assert create_topic(broker.bootstrap, topic,
                            configs={"compression.type": topic_codec}).error_code == 0
        wait_for_leader(broker.bootstrap, topic)
        values = [f"{topic}-{i}-".encode() * 20 for i in range(50)]
        p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": sent,
                      "enable.idempotence": True, "linger.ms": 50})
        for v in values:
            p.produce(topic, value=v, partition=0)
        assert p.flush(30) == 0
        del p  # no producer left retrying once the broker stops
        batches = fetch_batches(broker.bootstrap, topic)
        assert batches and all(b["codec"] == CODECS[stored] for b in batches), (topic, batches)
        assert all(b["crc_ok"] and b["producer_id"] >= 0 for b in batches), batches
        assert batches[0]["base_offset"] == 0 and batches[0]["base_sequence"] == 0, batches
        for prev, b in zip(batches, batches[1:]):
            assert b["base_offset"] == prev["last_offset"] + 1, batches
        assert batches[-1]["last_offset"] == len(values) - 1, batches
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}",
                      "auto.offset.reset": "earliest", "check.crcs": True})
        c.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == values, topic


def test_api_versions_v4_is_answered_not_refused(broker):
    """Proves ApiVersions v4, which Kafka 4 clients (Connect, Debezium, the Java client) send
    first on every connection, is answered at v4 with error 0 and the broker's table, which
    lists ApiVersions up to v4; before, it was refused with UNSUPPORTED_VERSION and every
    connection of such a client took a second round trip at v3 (seen in a Connect worker's
    DEBUG log, compared with Kafka 4.1.1)."""
    for version in range(0, 5):
        resp = kproto.call(broker.bootstrap, ApiVersionsRequest[version](
            client_software_name="strata-tests", client_software_version="1"))
        assert resp.error_code == 0, (version, resp)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges[18] == (0, 4), (version, ranges.get(18))
