"""Kafka Connect 4.1 against Strata: the distributed worker (its compacted config, offset and
status topics, its `connect` group, its REST API), connect-file's FileStreamSource and
FileStreamSink, and Debezium's PostgreSQL connector capturing a table through a SIGKILL of the
worker and a SIGKILL of the broker. Processes are started by the tests (connect_harness.py);
the jars come from `tests/fetch-jars.sh connect debezium`, PostgreSQL from Debian."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kafka.protocol.admin.groups import DescribeGroupsRequest

import kproto

from connect_harness import ConnectWorker, Postgres, jars_missing, postgres_bin_dir
from harness import Broker

INTERNAL_TOPICS = {"connect-configs": 1, "connect-offsets": 25, "connect-status": 5}


@pytest.fixture(scope="module", autouse=True)
def connect_jars():
    reason = jars_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, connect_jars):
    """One broker and one worker for the tests that neither kill nor restart them."""
    base = tmp_path_factory.mktemp("connect")
    broker = Broker(base / "data", base / "logs").start()
    worker = None
    try:
        worker = ConnectWorker(base / "worker", broker.bootstrap).start()
        yield broker, worker
    finally:
        if worker is not None:
            worker.kill9()
        try:
            broker.stop()
        finally:
            broker.kill9()


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[bytes | None, bytes | None]]:
    """Every record of partition 0 from offset 0 up to the high watermark, as (key, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-test-reader",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout_s)
        out: list[tuple[bytes | None, bytes | None]] = []
        if high <= 0:
            return out
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        last = -1
        while last < high - 1:
            assert time.monotonic() < deadline, f"read {topic} up to {last}, high watermark {high}"
            for m in c.consume(500, timeout=1.0):
                assert m.error() is None, m.error()
                out.append((m.key(), m.value()))
                last = m.offset()
        return out
    finally:
        c.close()


def test_worker_starts_with_compacted_topics_group_and_rest(shared):
    """Proves the distributed worker starts against Strata: it created its three internal topics
    compacted (with Connect's partition counts), formed its group `connect` (Stable, one member,
    Connect's protocol), and serves its REST API with Strata's cluster id."""
    broker, worker = shared
    root = worker.request("GET", "/")
    assert root["version"].startswith("4.1."), root
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster().result(30)
    assert root["kafka_cluster_id"] == cluster.cluster_id, (root, cluster.cluster_id)
    assert worker.request("GET", "/connectors") == []

    metadata = admin.list_topics(timeout=30)
    for topic, partitions in INTERNAL_TOPICS.items():
        assert topic in metadata.topics, sorted(metadata.topics)
        assert len(metadata.topics[topic].partitions) == partitions, topic
        resource = ConfigResource("topic", topic)
        configs = admin.describe_configs([resource])[resource].result(30)
        assert configs["cleanup.policy"].value == "compact", (topic, configs["cleanup.policy"])

    # DescribeGroups itself: confluent-kafka describes consumer groups only.
    described = kproto.call(broker.bootstrap, DescribeGroupsRequest[5](groups=["connect"]))
    (group,) = described.groups
    assert (group.error_code, group.group_state, group.protocol_type) == (0, "Stable", "connect"), group
    # Connect's own group protocols (KIP-415, KIP-507), not a consumer assignor.
    assert group.protocol_data in ("sessioned", "compatible", "default"), group
    assert len(group.members) == 1, group
    log = worker.log_path.read_text(errors="replace")
    assert "Joined group at generation" in log, worker.log_tail()


def test_file_source_tails_growing_file_and_sink_writes_it(shared, tmp_path):
    """Proves FileStreamSource tails a file that grows while it runs into a topic, and
    FileStreamSink writes that topic to a file: the sink file ends equal to the source file,
    every line once and in order."""
    broker, worker = shared
    source, sink = tmp_path / "source.log", tmp_path / "sink.log"
    source.write_text("")
    string = "org.apache.kafka.connect.storage.StringConverter"
    worker.put_connector("file-source", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "file": str(source), "topic": "file-lines", "tasks.max": "1", "value.converter": string,
    })
    worker.put_connector("file-sink", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "file": str(sink), "topics": "file-lines", "tasks.max": "1", "value.converter": string,
    })
    worker.wait_running("file-source")
    worker.wait_running("file-sink")

    lines = [f"{i:06d} {'x' * (i % 97)} line" for i in range(6000)]
    with open(source, "a") as f:
        for start in range(0, len(lines), 300):
            f.write("".join(line + "\n" for line in lines[start:start + 300]))
            f.flush()
            time.sleep(0.1)

    deadline = time.monotonic() + 120
    got: list[str] = []
    while time.monotonic() < deadline:
        got = sink.read_text().splitlines() if sink.exists() else []
        if len(got) >= len(lines):
            break
        time.sleep(0.5)
    assert got == lines, (f"sink has {len(got)} lines of {len(lines)}; first difference at "
                          f"{next((i for i, (a, b) in enumerate(zip(got, lines)) if a != b), min(len(got), len(lines)))}"
                          f"\n{worker.log_problems()[-20:]}")
    # The topic holds each line once too (the sink's file could hide a duplicate it skipped).
    assert [v.decode() for _, v in read_topic(broker.bootstrap, "file-lines")] == lines


# --- Debezium PostgreSQL ---------------------------------------------------------------------

TABLE = "public.items"
TOPIC = "pg.public.items"
INITIAL_ROWS = 50
OPS_PER_BATCH = 20
BATCHES_MAX = 2000  # a bound on the writer if the test thread never stops it


class TableWriter(threading.Thread):
    """Random inserts, updates and deletes on the table, a transaction per batch, including
    inserts that reuse the id of a deleted row (a key coming back after its tombstone). Runs
    until the test stops it, so it writes before, during and after each kill."""

    def __init__(self, pg: Postgres, seed: int):
        super().__init__(daemon=True)
        self.pg = pg
        self.rng = random.Random(seed)
        self.live = set(range(1, INITIAL_ROWS + 1))
        self.deleted: set[int] = set()
        self.next_id = INITIAL_ROWS + 1
        self.batches_done = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def statement(self) -> str:
        r = self.rng.random()
        if r < 0.35 or len(self.live) < 5:
            if self.deleted and self.rng.random() < 0.3:
                key = self.rng.choice(sorted(self.deleted))
                self.deleted.discard(key)
            else:
                key, self.next_id = self.next_id, self.next_id + 1
            self.live.add(key)
            return f"INSERT INTO {TABLE} VALUES ({key}, 'new-{key}-{self.rng.randrange(10**6)}', {self.rng.randrange(1000)});"
        key = self.rng.choice(sorted(self.live))
        if r < 0.75:
            return f"UPDATE {TABLE} SET qty = {self.rng.randrange(1000)}, name = name || '+' WHERE id = {key};"
        self.live.discard(key)
        self.deleted.add(key)
        return f"DELETE FROM {TABLE} WHERE id = {key};"

    def run(self) -> None:
        try:
            while not self.stopping.is_set() and self.batches_done < BATCHES_MAX:
                body = "".join(self.statement() for _ in range(OPS_PER_BATCH))
                self.pg.sql(f"BEGIN;{body}COMMIT;")
                self.batches_done += 1
                time.sleep(0.1)
        except BaseException as e:  # reported by the test thread
            self.error = e


def replay(records: list[tuple[bytes | None, bytes | None]]) -> dict[int, dict]:
    """The table a consumer rebuilds from the change events: the last value per key, where a
    delete event or a tombstone (null value) removes the row."""
    table: dict[int, dict] = {}
    for key, value in records:
        assert key is not None, "a Debezium change event without a key"
        row_id = json.loads(key)["id"]
        event = None if value is None else json.loads(value)
        if event is None or event["op"] == "d":
            table.pop(row_id, None)
        else:
            assert event["op"] in ("r", "c", "u"), event
            table[row_id] = event["after"]
    return table


def table_content(pg: Postgres) -> dict[int, dict]:
    return {int(i): {"id": int(i), "name": name, "qty": int(qty)}
            for i, name, qty in pg.sql(f"SELECT id, name, qty FROM {TABLE} ORDER BY id")}


def wait_events(bootstrap: str, at_least: int, timeout_s: float = 120.0) -> int:
    """Waits until the change-event topic holds at least `at_least` records; returns how many."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "connect-test-watermarks"})
    try:
        deadline = time.monotonic() + timeout_s
        high = 0
        while time.monotonic() < deadline:
            try:
                _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
            except Exception:  # the topic may not exist yet, or the broker is restarting
                high = 0
            if high >= at_least:
                return high
            time.sleep(0.5)
        raise TimeoutError(f"{TOPIC} holds {high} records, waited for {at_least}")
    finally:
        c.close()


def test_debezium_postgres_capture_survives_worker_and_broker_sigkill(broker_factory, tmp_path):
    """Proves Debezium's PostgreSQL connector (pgoutput) captures a table into Strata through a
    SIGKILL of the Connect worker mid-stream and a SIGKILL of the broker: replaying the topic's
    change events (last value per key; a delete or tombstone removes the key) gives exactly the
    table's final content in PostgreSQL, and deletes are followed by tombstones."""
    if postgres_bin_dir() is None:
        reason = "no PostgreSQL server (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    broker = broker_factory()
    pg = Postgres()
    worker = ConnectWorker(tmp_path / "worker", broker.bootstrap)
    try:
        pg.start()
        pg.sql(f"CREATE TABLE {TABLE} (id int PRIMARY KEY, name text NOT NULL, qty int NOT NULL);"
               f"INSERT INTO {TABLE} SELECT g, 'row-' || g, g FROM generate_series(1, {INITIAL_ROWS}) g;")
        worker.start()
        json_converter = "org.apache.kafka.connect.json.JsonConverter"
        worker.put_connector("pg", {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1", "database.port": str(pg.port),
            "database.user": "postgres", "database.password": "unused", "database.dbname": "postgres",
            "topic.prefix": "pg", "plugin.name": "pgoutput", "slot.name": "strata_test",
            "publication.autocreate.mode": "filtered", "table.include.list": TABLE,
            "key.converter": json_converter, "key.converter.schemas.enable": "false",
            "value.converter": json_converter, "value.converter.schemas.enable": "false",
            # Connect creates the change-event topic itself, compacted like a CDC topic.
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
            "topic.creation.default.cleanup.policy": "compact",
        })
        worker.wait_running("pg")
        wait_events(broker.bootstrap, INITIAL_ROWS)  # the snapshot

        writer = TableWriter(pg, seed=12)
        writer.start()
        # Mid-stream: change events are flowing, and the writer goes on while the worker is dead.
        events = wait_events(broker.bootstrap, INITIAL_ROWS + 200)
        worker.kill9()
        time.sleep(2)
        worker.start()
        worker.wait_running("pg")
        # The restarted worker streams again before the broker dies under it.
        wait_events(broker.bootstrap, events + 300)
        broker.kill9()
        time.sleep(1)
        broker.start()
        batches = writer.batches_done
        while writer.batches_done < batches + 20 and writer.is_alive():
            time.sleep(0.1)
        writer.stopping.set()
        writer.join(timeout=120)
        assert not writer.is_alive(), "the table writer did not stop"
        assert writer.error is None, writer.error

        expected = table_content(pg)
        got: dict[int, dict] = {}
        records: list = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            records = read_topic(broker.bootstrap, TOPIC)
            got = replay(records)
            if got == expected:
                break
            time.sleep(2)
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        differ = sorted(k for k in set(got) & set(expected) if got[k] != expected[k])
        assert got == expected, (
            f"replayed {len(records)} events: {len(got)} rows vs {len(expected)} in PostgreSQL; "
            f"missing {missing[:20]}, extra {extra[:20]}, differing {differ[:20]}\n"
            f"worker problems: {worker.log_problems()[-30:]}")
        assert worker.request("GET", "/connectors/pg/status")["tasks"][0]["state"] == "RUNNING"

        events = [(json.loads(k)["id"], None if v is None else json.loads(v)) for k, v in records]
        ops = {v["op"] for _, v in events if v is not None}
        assert {"r", "c", "u", "d"} <= ops, ops
        # Each delete event is followed, later in the topic, by a tombstone for its key (not
        # always the next record: a worker killed between the two replays the pair).
        for i, (row_id, v) in enumerate(events):
            if v is not None and v["op"] == "d":
                assert (row_id, None) in events[i + 1:], f"delete of {row_id} at {i} without a tombstone"
        assert len(expected) > INITIAL_ROWS // 2
    finally:
        worker.kill9()
        pg.stop()
