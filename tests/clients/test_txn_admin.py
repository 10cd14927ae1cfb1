"""The admin side of transactions (KIP-664) with Kafka's own tool and Strata's CLI:
`kafka-transactions.sh` (org.apache.kafka.tools.TransactionsCommand, Kafka 4.1's admin client)
runs `list`, `describe`, `describe-producers`, `find-hanging` and `abort` against Strata, and
`strata txn list|describe|abort` / `strata producers describe` do the same.

Two kinds of stuck transaction hold a partition's last stable offset (LSO) back, so a
read_committed consumer stops before them:
- a transactional producer (confluent-kafka) killed with SIGKILL mid-transaction, with a long
  transaction.timeout.ms: its coordinator still tracks it (Ongoing, with the partition), so
  `find-hanging` does not list it, but `abort --start-offset` ends it on the partition;
- a transactional batch from a producer id no coordinator knows (a raw Produce): a truly
  hanging transaction, which `find-hanging` lists and `abort` ends.
After each abort the consumer proceeds past it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest
from confluent_kafka import KafkaError, TopicPartition

import kproto
from common import create_topic
from harness import strata_bin

KAFKA_DIR = Path(__file__).resolve().parents[1] / "kafka"
RUN_CLASS = KAFKA_DIR / "run-class.sh"
TOOL = "org.apache.kafka.tools.TransactionsCommand"
TOOL_TIMEOUT_S = 120
TRANSACTIONAL = 0x10
# Long enough that the coordinator never aborts the killed producer's transaction itself
# during the test (Strata's and Kafka's transaction.max.timeout.ms is 15 minutes).
LONG_TXN_TIMEOUT_MS = 600_000
# A producer id no coordinator handed out: its transaction can only be ended by an admin.
STRAY_PRODUCER_ID = 424_242


def kafka_jars_present() -> bool:
    return any((KAFKA_DIR / "lib").glob("kafka-tools-*.jar"))


@pytest.fixture
def tool_available():
    if not kafka_jars_present():
        reason = f"no Kafka jars in {KAFKA_DIR / 'lib'}; run tests/fetch-jars.sh kafka"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def kafka_transactions(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs kafka-transactions.sh with `args`; by default it must exit 0."""
    r = subprocess.run([str(RUN_CLASS), TOOL, "--bootstrap-server", bootstrap, *args],
                       capture_output=True, text=True, timeout=TOOL_TIMEOUT_S)
    if check:
        assert r.returncode == 0, f"kafka-transactions {args} exited {r.returncode}: {r.stderr}"
    return r


def table(text: str) -> list[dict[str, str]]:
    """Rows of the tool's table (a header line, then one line per row, tab-separated padded
    columns), as dicts keyed by header."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines, "no table in the output"
    header = [h.strip() for h in lines[0].split("\t") if h.strip()]
    rows = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split("\t")][:len(header)]
        rows.append(dict(zip(header, cells)))
    return rows


def strata(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(strata_bin()), *args, "--bootstrap", bootstrap],
                       capture_output=True, text=True, timeout=60)
    if check:
        assert r.returncode == 0, f"strata {args} exited {r.returncode}: {r.stderr}"
    return r


HANGING_PRODUCER = """
import sys, time, confluent_kafka
bootstrap, topic, txn_id, count, timeout_ms = sys.argv[1:6]
p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                              "transaction.timeout.ms": int(timeout_ms), "linger.ms": 0})
p.init_transactions(30)
p.begin_transaction()
for i in range(int(count)):
    p.produce(topic, value=f"hanging-{i}".encode(), partition=0)
assert p.flush(30) == 0
print("produced", flush=True)
time.sleep(3600)
"""


def start_and_kill_transaction(bootstrap: str, topic: str, txn_id: str, count: int) -> None:
    """A transactional producer in its own process begins a transaction, writes `count`
    records to partition 0, and is killed with SIGKILL before it commits or aborts."""
    proc = subprocess.Popen([sys.executable, "-c", HANGING_PRODUCER, bootstrap, topic, txn_id,
                             str(count), str(LONG_TXN_TIMEOUT_MS)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip() == "produced", f"producer failed: {proc.stderr.read() if proc.stderr else ''}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def commit_transaction(bootstrap: str, topic: str, txn_id: str, values: list[bytes]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                                  "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v, partition=0)
    p.commit_transaction(30)


def produce_plain(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0


def read_committed(bootstrap: str, topic: str, settle_s: float = 3.0, timeout_s: float = 20.0) -> list[bytes]:
    """What a read_committed consumer reads from partition 0: everything until nothing new
    arrives for `settle_s` (it stops at the LSO, so a stuck transaction ends the read)."""
    c = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"rc-{time.monotonic_ns()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    # The quiet time counts from the first answer (a record or the end of the partition),
    # not from the consumer's creation: a slow first fetch is not "nothing new".
    quiet_since: float | None = None
    try:
        while time.monotonic() < deadline and (quiet_since is None
                                               or time.monotonic() - quiet_since < settle_s):
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    quiet_since = quiet_since or time.monotonic()
                    continue
                raise AssertionError(m.error())
            values.append(m.value())
            quiet_since = time.monotonic()
    finally:
        c.close()
        time.sleep(0.5)
    return values


def killed_transaction_scenario(bs: str) -> None:
    """Kafka's kafka-transactions.sh against the broker at `bs`: `list` shows a committed id
    (CompleteCommit) and a killed producer's id (Ongoing) with their coordinator;
    `describe` shows the killed one's state, timeout and partition, and fails for an unknown
    id; `describe-producers` shows the killed producer's open transaction at its first
    offset; `find-hanging` lists nothing (the coordinator still tracks it); `abort
    --start-offset` ends it, after which a read_committed consumer reads past it (records
    written after it become visible, its own never do)."""
    topic = "txn-admin-killed"
    create_topic(bs, topic, 1)
    committed = [b"c0", b"c1", b"c2"]
    commit_transaction(bs, topic, "tx-committed", committed)
    # Offsets 0-2 data, 3 the COMMIT marker: the killed transaction starts at 4.
    start_and_kill_transaction(bs, topic, "tx-killed", 5)
    later = [b"after-0", b"after-1"]
    produce_plain(bs, topic, later)
    assert read_committed(bs, topic) == committed, "the open transaction holds the LSO"

    listed = {r["TransactionalId"]: r for r in table(kafka_transactions(bs, "list").stdout)}
    assert listed["tx-committed"]["TransactionState"] == "CompleteCommit"
    assert listed["tx-killed"]["TransactionState"] == "Ongoing"
    assert listed["tx-killed"]["Coordinator"].lstrip("-").isdigit()

    [d] = table(kafka_transactions(bs, "describe", "--transactional-id", "tx-killed").stdout)
    assert d["TransactionState"] == "Ongoing"
    assert d["TransactionTimeoutMs"] == str(LONG_TXN_TIMEOUT_MS)
    assert d["TopicPartitions"] == f"{topic}-0"
    assert int(d["CurrentTransactionStartTimeMs"]) > 0
    killed_pid = d["ProducerId"]
    assert listed["tx-killed"]["ProducerId"] == killed_pid

    missing = kafka_transactions(bs, "describe", "--transactional-id", "tx-nobody", check=False)
    assert missing.returncode != 0
    assert "tx-nobody" in missing.stderr

    producers = {r["ProducerId"]: r for r in table(
        kafka_transactions(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)}
    assert producers[killed_pid]["CurrentTransactionStartOffset"] == "4"
    assert producers[killed_pid]["LastSequence"] == "4"
    assert int(producers[killed_pid]["LastTimestamp"]) > 0
    others = [r for pid, r in producers.items() if pid != killed_pid]
    assert others and all(r["CurrentTransactionStartOffset"] == "None" for r in others)

    hanging = table(kafka_transactions(bs, "find-hanging", "--topic", topic,
                                       "--max-transaction-timeout", "0").stdout)
    assert hanging == [], "the coordinator still tracks the killed producer's transaction"

    wrong = kafka_transactions(bs, "abort", "--topic", topic, "--partition", "0",
                               "--start-offset", "3", check=False)
    assert wrong.returncode != 0 and "offset 3" in wrong.stderr
    kafka_transactions(bs, "abort", "--topic", topic, "--partition", "0", "--start-offset", "4")

    producers = {r["ProducerId"]: r for r in table(
        kafka_transactions(bs, "describe-producers", "--topic", topic, "--partition", "0").stdout)}
    assert producers[killed_pid]["CurrentTransactionStartOffset"] == "None"
    assert read_committed(bs, topic) == committed + later


def test_kafka_tool_lists_describes_and_aborts_a_killed_transaction(broker, tool_available):
    """Proves `killed_transaction_scenario` on Strata: list, describe, describe-producers,
    find-hanging and abort of a SIGKILLed transactional producer's transaction."""
    killed_transaction_scenario(broker.bootstrap)


@pytest.mark.reference_kafka
def test_killed_transaction_scenario_holds_on_reference_kafka(tmp_path, tool_available):
    """Proves the scenario's expectations are Kafka's: the same steps and assertions pass
    against Apache Kafka 4.1 (tests/kafka/reference_kafka.py)."""
    sys.path.insert(0, str(KAFKA_DIR))
    import reference_kafka

    k = reference_kafka.ReferenceKafka(tmp_path / "reference-kafka", heap="512m")
    try:
        k.start()
        killed_transaction_scenario(k.bootstrap)
        k.stop()
    finally:
        k.kill9()


def test_truly_hanging_transaction_found_and_aborted(broker_factory, monkeypatch, tool_available):
    """Proves a transaction no coordinator knows (a transactional batch from a stray producer
    id) is what `find-hanging` reports (producer, start offset), that `strata producers
    describe` shows it, and that `strata txn abort --start-offset` ends it: the LSO moves and
    a read_committed consumer reads the records written after it. Then `find-hanging` finds
    nothing. KIP-890's verification refuses such a batch (test_txn_verification.py), so it is
    off here: the hanging transactions left by older brokers, or by a broker run without it,
    are what these tools exist for."""
    monkeypatch.setenv("STRATA_TRANSACTION_PARTITION_VERIFICATION_ENABLE", "false")
    broker = broker_factory()
    bs = broker.bootstrap
    topic = "txn-admin-stray"
    create_topic(bs, topic, 1)
    batch = kproto.record_batch([(None, b"stray-0"), (None, b"stray-1")],
                                producer_id=STRAY_PRODUCER_ID, producer_epoch=0,
                                base_sequence=0, attributes=TRANSACTIONAL)
    [(_, _, err, base)] = kproto.produce_raw(bs, topic, 0, batch)
    assert (err, base) == (0, 0)
    later = [b"plain-0", b"plain-1", b"plain-2"]
    produce_plain(bs, topic, later)
    assert read_committed(bs, topic) == []

    [h] = table(kafka_transactions(bs, "find-hanging", "--topic", topic).stdout)
    assert (h["Topic"], h["Partition"]) == (topic, "0")
    assert (h["ProducerId"], h["StartOffset"]) == (str(STRAY_PRODUCER_ID), "0")

    shown = strata(bs, "producers", "describe", topic, "0").stdout.splitlines()
    assert shown[0].split("\t")[0] == "PRODUCER-ID"
    stray = [ln.split("\t") for ln in shown[1:] if ln.startswith(f"{STRAY_PRODUCER_ID}\t")]
    assert stray and stray[0][5] == "0", shown

    refused = strata(bs, "txn", "abort", "--topic", topic, "--partition", "0",
                     "--start-offset", "1", check=False)
    assert refused.returncode != 0 and "no open transaction starts at offset 1" in refused.stderr
    out = strata(bs, "txn", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0").stdout
    assert f"producer {STRAY_PRODUCER_ID}" in out

    assert read_committed(bs, topic) == later
    assert table(kafka_transactions(bs, "find-hanging", "--topic", topic).stdout) == []


def test_strata_txn_list_and_describe(broker):
    """Proves `strata txn list` shows each transactional id with its state and producer id,
    `strata txn describe` shows an open transaction's state, timeout and partitions (and an
    unknown id fails with TRANSACTIONAL_ID_NOT_FOUND), and `strata producers describe` shows
    the open transaction's first offset."""
    bs = broker.bootstrap
    topic = "txn-admin-cli"
    create_topic(bs, topic, 1)
    commit_transaction(bs, topic, "cli-committed", [b"a", b"b"])
    start_and_kill_transaction(bs, topic, "cli-killed", 3)

    rows = [ln.split("\t") for ln in strata(bs, "txn", "list").stdout.splitlines()]
    assert rows[0] == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    by_id = {r[0]: r for r in rows[1:]}
    assert by_id["cli-committed"][3] == "CompleteCommit"
    assert by_id["cli-killed"][3] == "Ongoing"

    text = strata(bs, "txn", "describe", "cli-killed").stdout
    assert "State: Ongoing" in text
    assert f"Timeout ms: {LONG_TXN_TIMEOUT_MS}" in text
    assert f"Partitions: {topic}-0" in text
    assert f"Producer: id {by_id['cli-killed'][2]} epoch" in text

    missing = strata(bs, "txn", "describe", "cli-nobody", check=False)
    assert missing.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    shown = strata(bs, "producers", "describe", topic, "0").stdout.splitlines()
    killed = [ln.split("\t") for ln in shown[1:] if ln.startswith(f"{by_id['cli-killed'][2]}\t")]
    # Offsets 0-1 data, 2 the COMMIT marker: the killed transaction starts at 3.
    assert killed and killed[0][5] == "3", shown


def test_idle_transactional_id_expires(broker_factory, monkeypatch):
    """Proves transactional.id.expiration.ms on the wire: an id with no transaction open for
    longer than it is removed by the coordinator's periodic check (DescribeTransactions then
    answers TRANSACTIONAL_ID_NOT_FOUND and ListTransactions leaves it out), the removal is
    durable (a tombstone in `__transaction_state`: still gone after a kill -9 and restart),
    and the id is usable again afterwards, with a new producer id, as in Kafka. An id that
    keeps committing is not removed."""
    monkeypatch.setenv("STRATA_TRANSACTIONAL_ID_EXPIRATION_MS", "3000")
    monkeypatch.setenv("STRATA_TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS", "200")
    b = broker_factory()
    bs = b.bootstrap
    topic = "txn-expire"
    create_topic(bs, topic, 1)
    commit_transaction(bs, topic, "idle-id", [b"a"])
    first_pid = strata(bs, "txn", "describe", "idle-id").stdout.split("Producer: id ")[1].split()[0]

    def listed() -> set[str]:
        rows = strata(bs, "txn", "list").stdout.splitlines()[1:]
        return {r.split("\t")[0] for r in rows}

    # A busy id commits every 0.5 s through the whole wait and must survive it.
    busy = confluent_kafka.Producer({"bootstrap.servers": bs, "transactional.id": "busy-id",
                                     "linger.ms": 0})
    busy.init_transactions(30)
    deadline = time.monotonic() + 30
    gone = False
    while time.monotonic() < deadline and not gone:
        busy.begin_transaction()
        busy.produce(topic, value=b"busy", partition=0)
        busy.commit_transaction(30)
        gone = "idle-id" not in listed()
        time.sleep(0.5)
    assert gone, "the idle id was never removed"
    assert "busy-id" in listed()
    missing = strata(bs, "txn", "describe", "idle-id", check=False)
    assert missing.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    b.kill9()
    b.start()
    deadline = time.monotonic() + 30
    while True:
        r = strata(bs, "txn", "describe", "idle-id", check=False)
        if "COORDINATOR_LOAD_IN_PROGRESS" not in r.stderr and "NOT_COORDINATOR" not in r.stderr:
            break
        assert time.monotonic() < deadline, r.stderr
        time.sleep(0.2)
    assert r.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr, "expiry was not durable"

    commit_transaction(bs, topic, "idle-id", [b"b"])
    # EndTxn answers once PrepareCommit is stored, as Kafka's does; CompleteCommit follows
    # the markers, so under load the first describe can still show PrepareCommit.
    deadline = time.monotonic() + 10
    while True:
        again = strata(bs, "txn", "describe", "idle-id").stdout
        if "State: CompleteCommit" in again or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "State: CompleteCommit" in again
    assert again.split("Producer: id ")[1].split()[0] != first_pid
    values = read_committed(bs, topic)
    assert values.count(b"a") == 1 and values.count(b"b") == 1, values
