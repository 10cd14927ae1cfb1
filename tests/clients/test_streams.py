"""Kafka Streams 4.1 with processing.guarantee=exactly_once_v2 against Strata (issue 13).

Each app is fed while it runs, and checked against an oracle computed from the input the test
generated (every input record is acked before the check):

- `kafka-streams-examples`' own WordCountDemo (configured only through its properties file):
  lines -> words -> groupBy (repartition topic) -> count (store with a compacted changelog);
  SIGKILLed while its transaction has records on the broker, restarted on the same state dir
  (so its transactional id fences and aborts the dead instance's transaction).
- RegionTotals (tests/kafka/extras/RegionTotals.java): orders joined with a GlobalKTable of
  customers, summed per region through a repartition topic, and counted per region and hour
  (a windowed store: its changelog is compact,delete); SIGKILLed likewise, then the
  broker SIGKILLed mid-transaction and restarted on the same data dir and port.
- RegionTotals as two instances, one frozen (SIGSTOP) until the group moved its tasks to the
  other, then thawed: a zombie that only the group generation of its TxnOffsetCommit fences
  (KIP-447).

Both apps run with the store cache off, so every input record forwards one update: per key the
committed output (read with read_committed, in offset order) must be exactly 1, 2, ..., n, with
n the oracle's count. A duplicate (a replayed batch whose first transaction was not aborted), a
loss (a committed input offset whose output was aborted) or an aborted record seen shows as a
break in that sequence. The internal topics are checked to have been created with the configs
Streams asks for (changelog compacted; repartition delete, retention.ms -1) and the repartition
topics to have been purged with DeleteRecords (log start offset > 0).

STRATA_STREAMS_SCALE multiplies the input (default 1: 2000 lines, 1500 orders; ~40-60 s per
test); STRATA_STREAMS_GUARANTEE=at_least_once is the negative control. The jars come from
`tests/fetch-jars.sh extras`.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from harness import REPO_ROOT

EXTRAS = REPO_ROOT / "tests" / "kafka" / "extras"
LIB = EXTRAS / "lib"
LOG4J = REPO_ROOT / "tests" / "kafka" / "log4j2.properties"
# Kafka's own tools (StreamsResetter), from `tests/fetch-jars.sh kafka`.
RUN_CLASS = REPO_ROOT / "tests" / "kafka" / "run-class.sh"
TOOLS_LIB = REPO_ROOT / "tests" / "kafka" / "lib"
SCALE = float(os.environ.get("STRATA_STREAMS_SCALE", "1"))
PARTITIONS = 3
# A JVM start, the first rebalance, the changelog restore after a kill: on a loaded 2-core CI
# machine each has taken tens of seconds.
RUNNING_TIMEOUT_S = 120.0
CONVERGE_TIMEOUT_S = 120.0
GUARANTEE = os.environ.get("STRATA_STREAMS_GUARANTEE", "exactly_once_v2")
EOS = GUARANTEE.startswith("exactly_once")
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"]
REGIONS = ["north", "south", "east", "west", "centre"]


def jars_missing() -> str | None:
    if shutil.which("java") is None or shutil.which("javac") is None:
        return "no java/javac on PATH"
    if not list(LIB.glob("kafka-streams-4.*.jar")) or not list(LIB.glob("kafka-streams-examples-*.jar")):
        return f"no Kafka Streams jars in {LIB}: run tests/fetch-jars.sh extras"
    if not list(TOOLS_LIB.glob("kafka-tools-4.*.jar")):
        return f"no kafka-tools jar in {TOOLS_LIB}: run tests/fetch-jars.sh kafka"
    return None


@pytest.fixture(scope="module")
def streams_build(tmp_path_factory) -> Path:
    reason = jars_missing()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    build = tmp_path_factory.mktemp("streams-build")
    r = subprocess.run(["javac", "-d", str(build), "-cp", f"{LIB}/*", str(EXTRAS / "RegionTotals.java")],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    return build


class StreamsApp:
    """One Kafka Streams JVM (main class + a properties file), its stdout/stderr in a log file
    per start; Streams logs at INFO, so the state transitions can be waited for."""

    def __init__(self, workdir: Path, build: Path, main_class: str, props: dict[str, str]):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.build = build
        self.main_class = main_class
        self.props_path = workdir / "streams.properties"
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log_path(self) -> Path:
        return self.workdir / f"streams-{self.starts}.log"

    def start(self) -> "StreamsApp":
        self.starts += 1
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", f"-Dlog4j2.configurationFile={LOG4J}", "-Dstrata.kafka.log.level=INFO",
             "-cp", f"{LIB}/*:{self.build}", self.main_class, str(self.props_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def wait_running(self) -> None:
        """Until the client reached RUNNING (WordCountDemo logs it, RegionTotals prints it)."""
        deadline = time.monotonic() + RUNNING_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"Streams exited {self.proc.returncode}:\n{self.tail()}"
            text = self.log()
            if "State transition from REBALANCING to RUNNING" in text or "STATE REBALANCING -> RUNNING" in text:
                return
            time.sleep(0.2)
        raise TimeoutError(f"Streams not RUNNING after {RUNNING_TIMEOUT_S}s:\n{self.tail()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def errors(self) -> list[str]:
        """ERROR lines of every start's log."""
        return [line for i in range(1, self.starts + 1)
                for line in (self.workdir / f"streams-{i}.log").read_text(errors="replace").splitlines()
                if " ERROR " in line]


def streams_props(broker, app_id: str, state_dir: Path, **extra: str) -> dict[str, str]:
    props = {
        "bootstrap.servers": broker.bootstrap,
        "application.id": app_id,
        # STRATA_STREAMS_GUARANTEE=at_least_once is the negative control: the same test must
        # then fail (a SIGKILL replays uncommitted input, double-counting some keys).
        "processing.guarantee": GUARANTEE,
        # Long enough that a transaction is open most of the time (the kills land inside one).
        "commit.interval.ms": "500",
        "state.dir": str(state_dir),
        # Purge the repartition topics (DeleteRecords) soon after each commit, not every 30 s.
        "repartition.purge.interval.ms": "500",
        # A restarted instance joins as a new member: the dead one must leave the group by its
        # session timeout (Streams' 45 s default would dominate the test).
        "consumer.session.timeout.ms": "6000",
        "consumer.heartbeat.interval.ms": "1000",
        # replication.factor is left at Streams' default (-1: the broker's default).
    }
    props.update(extra)
    return props


def create_topics(bootstrap: str, names: list[str], compacted: tuple[str, ...] = ()) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(n, PARTITIONS, 1, config={"cleanup.policy": "compact"} if n in compacted else {})
           for n in names]
    for f in admin.create_topics(new, operation_timeout=30, request_timeout=30).values():
        f.result(timeout=30)


def read_committed(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[tuple[int, int, bytes, bytes]]:
    """Every record a read_committed reader sees from offset 0 up to each partition's last
    stable offset, as (partition, offset, key, value) in offset order per partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-test-reader",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[tuple[int, int, bytes, bytes]] = []
        at_eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_eof) < PARTITIONS:
            assert time.monotonic() < deadline, f"read {topic}: {len(out)} records, eof on {at_eof}"
            for m in c.consume(1000, timeout=0.5):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_eof.add(m.partition())
                    continue
                at_eof.discard(m.partition())
                out.append((m.partition(), m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def progress(bootstrap: str, topic: str, at_least: int) -> tuple[bool, int]:
    """Whether `topic` holds at least `at_least` committed records (and how many)."""
    n = len(read_committed(bootstrap, topic))
    return n >= at_least, n


class Feeder(threading.Thread):
    """Produces `records` (key, value) pairs in `batches` batches, `pause_s` apart, with an
    idempotent producer that rides out a broker restart (long delivery timeout). Past
    `hold_at` of the records it trickles one record every TRICKLE_S until release(): the feed
    (and so the app's transactions) still goes on at every kill, however slow the machine."""

    TRICKLE_S = 0.5

    def __init__(self, bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]],
                 batches: int, pause_s: float, hold_at: float = 0.75):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000})
        self.topic, self.records, self.pause_s = topic, records, pause_s
        self.per = max(1, -(-len(records) // batches))
        self.hold = int(len(records) * hold_at)
        self.released = threading.Event()
        self.sent = 0
        self.failed: list[str] = []

    def release(self) -> None:
        self.released.set()

    def run(self) -> None:
        def acked(err, _msg):
            if err is not None:
                self.failed.append(str(err))

        while self.sent < len(self.records):
            held = self.sent >= self.hold and not self.released.is_set()
            chunk = self.records[self.sent:self.sent + (1 if held else self.per)]
            for key, value in chunk:
                self.producer.produce(self.topic, key=key, value=value, on_delivery=acked)
            self.producer.flush(120)
            self.sent += len(chunk)
            if held:
                self.released.wait(self.TRICKLE_S)
            else:
                time.sleep(self.pause_s)
        self.producer.flush(120)

    def finish(self) -> None:
        """Releases the feed and waits until every record was acked."""
        self.release()
        self.join(300)
        assert not self.is_alive() and not self.failed, self.failed[:5]
        assert self.sent == len(self.records)


def open_txn_records(bootstrap: str, topic: str) -> int:
    """Records of `topic` above its last stable offset: written by a transaction still open.
    (librdkafka's watermark query sends ListOffsets with the consumer's isolation level.)"""
    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-test-offsets",
                      "isolation.level": isolation})
        try:
            ends[isolation] = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                                  for p in range(PARTITIONS))
        finally:
            c.close()
    return ends["read_uncommitted"] - ends["read_committed"]


def kill_app_inside_transaction(app: "StreamsApp", bootstrap: str, topic: str, tries: int = 3) -> None:
    """SIGKILLs the app while its transaction has records in `topic` above the last stable
    offset, checks after the kill that they are still there (the dead instance left its
    transaction open, for the restarted instance to fence and abort), and restarts it. The
    commit may win the race between the check and the kill: then try again."""
    if not EOS:  # the negative control: no transactions to land in
        app.kill9()
        app.start().wait_running()
        return
    for _ in range(tries):
        wait_until("an open transaction with records in " + topic,
                   lambda: (open_txn_records(bootstrap, topic) > 0, None), 60, app, pause_s=0.02)
        app.kill9()
        left_open = open_txn_records(bootstrap, topic)
        print(f"SIGKILL left {left_open} records of an open transaction in {topic}")
        app.start().wait_running()
        if left_open > 0:
            return
    raise AssertionError(f"{tries} kills all landed between transactions")


def wait_until(what: str, check, timeout_s: float, app: StreamsApp | None = None, pause_s: float = 1.0):
    """Polls check() -> (done, detail) until done; on timeout fails with the last detail."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        if app is not None:
            assert app.proc.poll() is None, f"Streams exited {app.proc.returncode}:\n{app.tail()}"
        done, last = check()
        if done:
            return
        time.sleep(pause_s)
    raise AssertionError(f"{what}: not reached in {timeout_s}s; last: {last}"
                         + (f"\n{app.tail()}" if app else ""))


def internal_topics_checked(bootstrap: str, app_id: str, repartition: str, changelog: str) -> None:
    """The internal topics exist with the configs Streams sent in CreateTopics, and the
    repartition topic was purged with DeleteRecords (log start offset above 0)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = admin.list_topics(timeout=30).topics
    rep, chg = f"{app_id}-{repartition}", f"{app_id}-{changelog}"
    assert rep in topics and chg in topics, sorted(topics)
    assert len(topics[rep].partitions) == PARTITIONS and len(topics[chg].partitions) == PARTITIONS
    rres, cres = ConfigResource("topic", rep), ConfigResource("topic", chg)
    got = admin.describe_configs([rres, cres])
    rcfg = {k: v.value for k, v in got[rres].result(30).items()}
    ccfg = {k: v.value for k, v in got[cres].result(30).items()}
    assert ccfg["cleanup.policy"] == "compact", ccfg
    # RepartitionTopicConfig: delete, 50 MiB segments, infinite retention (Streams purges).
    assert (rcfg["cleanup.policy"], rcfg["segment.bytes"], rcfg["retention.ms"]) == (
        "delete", "52428800", "-1"), rcfg

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-test-offsets"})
    try:
        def purged():
            marks = [c.get_watermark_offsets(TopicPartition(rep, p), timeout=10, cached=False)
                     for p in range(PARTITIONS)]
            return all(high == 0 or low > 0 for low, high in marks), marks
        wait_until(f"{rep} purged by DeleteRecords", purged, 60)
    finally:
        c.close()


def check_no_streams_errors(app: StreamsApp) -> None:
    # A SIGKILLed instance's transactions are fenced/aborted: the restarted one may log
    # ProducerFenced/InvalidProducerEpoch as it takes over, handled by Streams; anything else
    # at ERROR is a finding.
    unexpected = [line for line in app.errors()
                  if "ProducerFenced" not in line and "InvalidProducerEpoch" not in line]
    assert not unexpected, "\n".join(unexpected[:20])


def test_wordcount_demo_exactly_once_through_sigkill(broker_factory, streams_build, tmp_path):
    """Proves Kafka's own WordCountDemo under exactly_once_v2, fed while it runs and SIGKILLed
    mid-run then restarted on the same state dir: each word's committed count updates are
    exactly 1..n (no duplicate, no gap) and n equals the oracle's count from the input topic.
    Its repartition and changelog topics got Streams' configs, and DeleteRecords purged the
    repartition topic. Then Kafka's StreamsResetter resets the app (group member removed,
    input offsets rewound, internal topics deleted) and the rerun counts 1..n once more."""
    broker = broker_factory()
    bs = broker.bootstrap
    create_topics(bs, ["streams-plaintext-input", "streams-wordcount-output"])
    rng = random.Random(13)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))).encode()
             for _ in range(int(2000 * SCALE))]
    oracle = Counter(w for line in lines for w in line.decode().split())

    app = StreamsApp(tmp_path / "wc", streams_build, "org.apache.kafka.streams.examples.wordcount.WordCountDemo",
                     streams_props(broker, "streams-wordcount", tmp_path / "wc-state"))
    try:
        app.start().wait_running()
        feeder = Feeder(bs, "streams-plaintext-input", [(None, line) for line in lines], batches=60, pause_s=0.15)
        feeder.start()
        # SIGKILL once a third of the words have committed counts and the feed still goes on.
        total = sum(oracle.values())
        wait_until("a third of the counts committed",
                   lambda: progress(bs, "streams-wordcount-output", total // 3), 90, app)
        assert feeder.is_alive()
        kill_app_inside_transaction(app, bs, "streams-wordcount-output")
        feeder.finish()

        def counts_per_word() -> dict[str, list[int]]:
            per_key: dict[str, list[int]] = {}
            for _, _, k, v in read_committed(bs, "streams-wordcount-output"):
                per_key.setdefault(k.decode(), []).append(int.from_bytes(v, "big", signed=True))
            return per_key

        def converged(runs: int):
            per_key = counts_per_word()
            last = {word: counts[-1] for word, counts in per_key.items()}
            done = last == dict(oracle) and all(len(c) == runs * oracle[w] for w, c in per_key.items())
            return done, (sum(last.values()), total)
        wait_until("final counts equal the oracle", lambda: converged(1), CONVERGE_TIMEOUT_S, app)
        for word, counts in counts_per_word().items():
            assert counts == list(range(1, oracle[word] + 1)), (word, counts[:50], oracle[word])
        store = "KSTREAM-AGGREGATE-STATE-STORE-0000000003"
        internal_topics_checked(bs, "streams-wordcount", f"{store}-repartition", f"{store}-changelog")
        repartition, changelog = f"streams-wordcount-{store}-repartition", f"streams-wordcount-{store}-changelog"

        # Kafka's application reset tool, as a user reprocesses from scratch: it removes the
        # (SIGKILLed) member from the group, rewinds the input offsets (admin offset APIs) and
        # deletes the internal topics (DeleteTopics); the app then recreates them under the same
        # names and counts everything again: each word's output continues with 1..n once more.
        app.kill9()
        r = subprocess.run([str(RUN_CLASS), "org.apache.kafka.tools.StreamsResetter", "--bootstrap-server", bs,
                            "--application-id", "streams-wordcount", "--input-topics",
                            "streams-plaintext-input", "--force"],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0 and "Deleting inferred internal topics" in r.stdout, r.stdout + r.stderr
        topics = AdminClient({"bootstrap.servers": bs}).list_topics(timeout=30).topics
        assert repartition not in topics and changelog not in topics, sorted(topics)
        shutil.rmtree(tmp_path / "wc-state")  # the local half of a reset (KafkaStreams#cleanUp)
        app.start().wait_running()
        wait_until("counts after the reset equal the oracle", lambda: converged(2), CONVERGE_TIMEOUT_S, app)
        for word, counts in counts_per_word().items():
            assert counts == list(range(1, oracle[word] + 1)) * 2, (word, counts[:50], oracle[word])
        check_no_streams_errors(app)
    finally:
        app.kill9()


class RegionOracle:
    """The customers table (written to `customers` before the app starts) and the orders to
    feed, with the count and sum per region they must end in."""

    def __init__(self, bootstrap: str, seed: int, orders: int):
        create_topics(bootstrap, ["orders", "customers", "region-totals", "region-hourly"], compacted=("customers",))
        rng = random.Random(seed)
        customers = {f"cust-{i}": rng.choice(REGIONS) for i in range(40)}
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for cust, region in customers.items():
            p.produce("customers", key=cust.encode(), value=region.encode())
        assert p.flush(30) == 0
        self.orders: list[tuple[bytes, bytes]] = []
        self.count: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for i in range(orders):
            cust, amount = rng.choice(list(customers)), rng.randint(1, 1000)
            self.orders.append((f"order-{i}".encode(), f"{cust}:{amount}".encode()))
            self.count[customers[cust]] += 1
            total[customers[cust]] += amount
        self.want = {r: f"{self.count[r]}:{total[r]}" for r in self.count}

    def check(self, bootstrap: str, apps: list[StreamsApp]) -> None:
        """Waits until the last committed total per region equals the oracle, then demands
        that per region the committed counts went exactly 1..n."""
        def converged():
            last = {k.decode(): v.decode() for _, _, k, v in read_committed(bootstrap, "region-totals")}
            return last == self.want, (last, self.want)
        wait_until("final totals equal the oracle", converged, CONVERGE_TIMEOUT_S, apps[0])
        per_key: dict[str, list[int]] = {}
        for _, _, k, v in read_committed(bootstrap, "region-totals"):
            per_key.setdefault(k.decode(), []).append(int(v.decode().split(":")[0]))
        for region, counts in per_key.items():
            assert counts == list(range(1, self.count[region] + 1)), (region, counts[:50], self.count[region])
        # The hourly windowed counts: per window 1..n, and the windows of a region add up to
        # its count (a run crossing an hour boundary has two windows per region).
        per_window: dict[str, list[int]] = {}
        for _, _, k, v in read_committed(bootstrap, "region-hourly"):
            per_window.setdefault(k.decode(), []).append(int(v))
        hourly: Counter[str] = Counter()
        for window, counts in per_window.items():
            assert counts == list(range(1, len(counts) + 1)), (window, counts[:50])
            hourly[window.split("@")[0]] += counts[-1]
        assert hourly == self.count, (hourly, self.count)


def test_region_totals_join_aggregate_through_app_and_broker_sigkill(broker_factory, streams_build, tmp_path):
    """Proves our stateful app (GlobalKTable join + aggregate through a repartition topic) under
    exactly_once_v2 through a SIGKILL of the app and then a SIGKILL of the broker (restarted on
    the same data dir and port), both mid-feed: per region the committed updates count exactly
    1..n, and the final count and sum equal the oracle's."""
    broker = broker_factory()
    bs = broker.bootstrap
    oracle = RegionOracle(bs, 1371, int(1500 * SCALE))
    app_id = "region-totals-app"
    app = StreamsApp(tmp_path / "rt", streams_build, "RegionTotals", streams_props(broker, app_id, tmp_path / "rt-state"))
    try:
        app.start().wait_running()
        feeder = Feeder(bs, "orders", oracle.orders, batches=60, pause_s=0.2)
        feeder.start()
        total = len(oracle.orders)
        wait_until("a quarter of the orders aggregated", lambda: progress(bs, "region-totals", total // 4), 90, app)
        assert feeder.is_alive()
        kill_app_inside_transaction(app, bs, "region-totals")
        wait_until("half of the orders aggregated", lambda: progress(bs, "region-totals", total // 2), 90, app)
        assert feeder.is_alive()
        if EOS:
            wait_until("an open transaction before the broker kill",
                       lambda: (open_txn_records(bs, "region-totals") > 0, None), 60, app, pause_s=0.02)
        broker.kill9()
        broker.start()
        feeder.finish()
        oracle.check(bs, [app])
        internal_topics_checked(bs, app_id, "by-region-repartition", "region-totals-store-changelog")
        # WindowedChangelogTopicConfig: compact,delete, retention = the store's (2 h here) +
        # windowstore.changelog.additional.retention.ms (1 day).
        res = ConfigResource("topic", f"{app_id}-region-hourly-store-changelog")
        admin = AdminClient({"bootstrap.servers": bs})  # held: a dropped client fails its futures
        cfg = admin.describe_configs([res])[res].result(30)
        assert (cfg["cleanup.policy"].value, cfg["retention.ms"].value) == (
            "compact,delete", str(2 * 3600_000 + 86400_000)), {k: v.value for k, v in cfg.items()}
        check_no_streams_errors(app)
    finally:
        app.kill9()


def test_region_totals_zombie_instance_fenced_by_group_generation(broker_factory, streams_build, tmp_path):
    """Proves KIP-447's fencing of a zombie under exactly_once_v2: two instances share the work;
    one is frozen with SIGSTOP (its transaction open) until the group has moved its tasks to the
    other, then thawed. Its producer is not fenced by transactional id (eos-v2 ids are per
    instance thread), only by the group generation its TxnOffsetCommit carries: the broker must
    refuse that commit, so the zombie aborts and the survivor's reprocessing is the only
    committed output. Per region the committed counts are exactly 1..n, totals equal the
    oracle's."""
    broker = broker_factory()
    bs = broker.bootstrap
    oracle = RegionOracle(bs, 4470, int(1500 * SCALE))
    app_id = "region-totals-zombie"
    # A transaction timeout well above the freeze: the zombie's transaction must end through
    # the generation check, not through the coordinator's timeout abort.
    extra = {"producer.transaction.timeout.ms": "60000"}
    apps = [StreamsApp(tmp_path / f"rt-{i}", streams_build, "RegionTotals",
                       streams_props(broker, app_id, tmp_path / f"rt-state-{i}", **extra)) for i in range(2)]
    zombie, survivor = apps
    try:
        for app in apps:
            app.start()
        for app in apps:
            app.wait_running()
        feeder = Feeder(bs, "orders", oracle.orders, batches=60, pause_s=0.2)
        feeder.start()
        total = len(oracle.orders)
        wait_until("a quarter of the orders aggregated",
                   lambda: progress(bs, "region-totals", total // 4), 90, survivor)
        # The zombie must hold tasks for the freeze to matter.
        assert re.search(r"Adding newly assigned partitions: \[[^\]]", zombie.log()), zombie.tail()
        synced = survivor.log().count("Successfully synced group")
        os.kill(zombie.proc.pid, signal.SIGSTOP)
        try:
            # The survivor takes all tasks once the zombie's 6 s session timed out. It cannot
            # restore the zombie's stores nor read its repartition output past the zombie's
            # open transaction (read_committed), as in Kafka: thaw the zombie to let it fail.
            wait_until("the group rebalanced without the zombie",
                       lambda: (survivor.log().count("Successfully synced group") > synced, None), 60, survivor)
        finally:
            os.kill(zombie.proc.pid, signal.SIGCONT)
        assert feeder.is_alive()
        feeder.finish()
        oracle.check(bs, [survivor])
        fenced = [line for line in zombie.log().splitlines()
                  if any(w in line for w in ("TaskMigrated", "CommitFailed", "UNKNOWN_MEMBER_ID",
                                              "ILLEGAL_GENERATION", "FENCED_INSTANCE_ID", "ProducerFenced"))]
        print(f"zombie fencing lines: {fenced[:3]}")
        for app in apps:
            check_no_streams_errors(app)
    finally:
        for app in apps:
            app.kill9()
