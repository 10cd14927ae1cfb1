"""A queue workload and its checker, in the spirit of Jepsen's Kafka/queue tests.

Workload: N producer threads (confluent-kafka, acks=all, retries on, idempotence off or on,
max.in.flight=5) send unique values "p<producer>-<seq>" round-robin to the partitions of one
topic, each to a partition it names, and record for every value its outcome:

  ok       the delivery report had no error: acknowledged at (partition, offset)
  failed   the delivery report had an error (timed out, not enough replicas, fatal, ...)
  unknown  no delivery report at all by the end (still queued when the producer gave up)

A consumer thread reads every partition from the beginning while faults happen and records
every (partition, offset, value) it sees. After the faults are healed and the ISR is full
again, the whole topic is read from offset 0 to the high watermark (HW).

What is provable, and is therefore checked (everything else is only counted):

 1. Every acknowledged value is in the final log at the offset it was acknowledged with, below
    the HW. (A retry's acknowledgement reports the offset of the attempt that succeeded, so
    this holds for idempotent and non-idempotent producers alike.) Idempotent: it is there
    exactly once.
 2. Idempotent only: no value is at two offsets. Without idempotence a retry after a lost
    response legitimately writes a second copy; those duplicates are counted, not failed.
 3. Idempotent only: for one producer session (a producer instance, which is one producer id)
    and one partition, values sit at increasing offsets in send order (librdkafka keeps order
    with idempotence and max.in.flight <= 5). Without idempotence retries may reorder; not
    checked.
 4. Nothing appears that was never handed to produce(), and every value is in the partition
    it was sent to. Note what is NOT provable: a "failed" delivery report does not mean the
    record was not written. With retries, librdkafka reports the last error of possibly
    several attempts, any of which may have been appended (a timed-out request, or
    NOT_ENOUGH_REPLICAS_AFTER_APPEND); a record appended by a leader whose followers later
    catch up becomes committed. So failed and unknown values may appear (counted as
    "indeterminate_present") and their absence is never an error either.
 5. The final log is contiguous: offsets 0..HW-1 with no hole (no transactions or compaction
    are used, so Kafka leaves none).
 6. What the concurrent consumer saw was committed: every (partition, offset) it read holds the
    same value in the final log and lies below the final HW. A consumer only sees offsets
    below the HW, so a value that later changed or vanished is a lost committed write.
 7. Replicas agree: after a clean stop of every node, each replica of each partition (read
    offline with `strata log dump --dir <data-dir>/<topic>-<p> --json`, or, with
    STRATA_CLUSTER_REPLICA_READ=fetch, with a Fetch as replica id -2 from each broker) holds,
    at every offset below the HW, the same value with the same leader epoch, and has no hole.
    Replicas may differ above the HW (an uncommitted tail); that is counted.
 8. Idempotent only: no producer hit a fatal error. With acks=all and no unclean election a
    new leader carries the producer state (sequences) in its replicated log, so librdkafka's
    fatal errors (OUT_OF_ORDER_SEQUENCE_NUMBER, an unrecoverable UNKNOWN_PRODUCER_ID, ...)
    mean the broker broke the idempotence protocol. The workload carries on with a new
    producer (a new ordering scope for check 3) so the other checks still run.

A run's numbers (faults, operations, records checked, violations) go to
tests/cluster/last-run.json (one entry per test in the current pytest session) and stdout.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

SUMMARY_PATH = Path(__file__).resolve().parent / "last-run.json"
SESSION_ID = f"{os.getpid()}-{int(time.time())}"
MESSAGE_TIMEOUT_MS = 20000  # longer than a failover (session timeout 3 s + election)


@dataclass
class Op:
    producer: int
    session: int
    seq: int
    partition: int
    value: str
    outcome: str = "unknown"  # ok | failed | unknown
    offset: int | None = None
    error: str | None = None


@dataclass
class History:
    idempotent: bool
    ops: dict[str, Op] = field(default_factory=dict)  # value -> op
    observed: list[tuple[int, int, str]] = field(default_factory=list)  # (partition, offset, value)
    fatal_errors: list[str] = field(default_factory=list)

    def add(self, op: Op) -> None:
        assert op.value not in self.ops, f"value {op.value} produced twice by the workload"
        self.ops[op.value] = op


@dataclass
class Report:
    violations: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def fail(self, check: str, message: str) -> None:
        self.violations.append(f"[{check}] {message}")
        self.stats[f"violations_{check}"] = self.stats.get(f"violations_{check}", 0) + 1

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    @property
    def ok(self) -> bool:
        return not self.violations

    def explain(self, limit: int = 40) -> str:
        head = "\n".join(self.violations[:limit])
        more = len(self.violations) - limit
        return head + (f"\n... and {more} more" if more > 0 else "")


# ---- the checks (pure: synthetic histories in test_checker.py drive them) --------------------

def check_history(history: History, log: dict[int, list[tuple[int, str]]], highs: dict[int, int]) -> Report:
    """Checks 1-6 over the final log {partition: [(offset, value)]} read up to highs[partition]."""
    r = Report()
    where: dict[str, list[tuple[int, int]]] = {}  # value -> [(partition, offset)]
    for p, records in sorted(log.items()):
        offsets = [o for o, _ in records]
        if offsets != list(range(highs.get(p, 0))):  # check 5
            r.fail("contiguous", f"partition {p}: offsets are not 0..{highs.get(p, 0) - 1} "
                                 f"(got {len(offsets)} records, first gap near {first_gap(offsets)})")
        for o, v in records:
            where.setdefault(v, []).append((p, o))
            r.count("records_checked")
            op = history.ops.get(v)
            if op is None:  # check 4
                r.fail("never_sent", f"partition {p} offset {o}: value {v!r} was never produced")
            elif op.partition != p:
                r.fail("wrong_partition", f"value {v} sent to partition {op.partition} found in {p} at {o}")

    at = {(p, o): v for p, records in log.items() for o, v in records}
    for op in history.ops.values():
        r.count(f"ops_{op.outcome}")
        places = where.get(op.value, [])
        if op.outcome != "ok":
            if places:
                r.count("indeterminate_present")
            continue
        if op.offset is None:
            r.count("acked_without_offset")
            if not places:
                r.fail("acked_lost", f"{op.value} acked on partition {op.partition} (no offset) is missing")
            continue
        found = at.get((op.partition, op.offset))
        if found != op.value:  # check 1
            beyond = op.offset >= highs.get(op.partition, 0)
            r.fail("acked_lost", f"{op.value} acked at partition {op.partition} offset {op.offset} "
                                 f"{'is at or beyond the HW ' + str(highs.get(op.partition)) if beyond else 'holds ' + repr(found)}"
                                 f"; value found at {places or 'no offset'}")
    for v, places in where.items():
        if len(places) > 1:
            r.count("duplicated_values")
            if history.idempotent:  # check 2
                r.fail("duplicate", f"{v} is at {len(places)} places {places} with idempotence on")

    if history.idempotent:  # check 3 (values at two places are already check 2's failure)
        runs: dict[tuple[int, int, int], list[tuple[int, int, str]]] = {}
        for v, places in where.items():
            op = history.ops.get(v)
            if op is not None and len(places) == 1:
                p, o = places[0]
                runs.setdefault((op.producer, op.session, p), []).append((o, op.seq, v))
        for (producer, session, p), run in sorted(runs.items()):
            run.sort()
            for (o1, s1, v1), (o2, s2, v2) in zip(run, run[1:]):
                if s2 < s1:
                    r.fail("order", f"partition {p}: {v2} (seq {s2}) at offset {o2} is after "
                                    f"{v1} (seq {s1}) at offset {o1}")

    for e in history.fatal_errors:  # check 8 (only idempotent producers have fatal errors)
        r.fail("producer_fatal", e)

    seen: dict[tuple[int, int], str] = {}
    for p, o, v in history.observed:  # check 6
        r.count("observations")
        if seen.setdefault((p, o), v) != v:
            r.fail("observed_changed", f"consumer saw both {seen[(p, o)]} and {v} at partition {p} offset {o}")
            continue
        if at.get((p, o)) != v:
            r.fail("observed_lost", f"consumer saw {v} at partition {p} offset {o}; final log has "
                                    f"{at.get((p, o))!r} (HW {highs.get(p)})")
    return r


def check_replicas(replicas: dict[int, dict[int, list[tuple[int, int | None, str]]]],
                   highs: dict[int, int], report: Report | None = None) -> Report:
    """Check 7. replicas = {partition: {node: [(offset, leader_epoch, value)]}}."""
    r = report or Report()
    for p, by_node in sorted(replicas.items()):
        hw = highs.get(p, 0)
        reference: dict[int, tuple[int | None, str]] | None = None
        ref_node = None
        for node, records in sorted(by_node.items()):
            offsets = [o for o, _, _ in records]
            committed = {o: (e, v) for o, e, v in records if o < hw}
            if [o for o in offsets if o < hw] != list(range(hw)):
                r.fail("replica_incomplete", f"partition {p} node {node}: offsets below HW {hw} are not "
                                             f"0..{hw - 1} ({len(committed)} present, first gap near "
                                             f"{first_gap([o for o in offsets if o < hw])})")
            r.count("replica_records_checked", len(committed))
            r.count("replica_records_above_hw", len(records) - len(committed))
            if reference is None:
                reference, ref_node = committed, node
                continue
            for o in range(hw):
                a, b = reference.get(o), committed.get(o)
                if a is not None and b is not None and a != b:
                    r.fail("replica_diverged", f"partition {p} offset {o}: node {ref_node} has "
                                               f"{a[1]} (epoch {a[0]}), node {node} has {b[1]} (epoch {b[0]})")
    return r


def first_gap(offsets: list[int]) -> int | None:
    for i, o in enumerate(offsets):
        if o != i:
            return i
    return None


# ---- the workload ------------------------------------------------------------------------------

class Workload:
    """Producers and one observing consumer against `topic`, until stop()."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, idempotent: bool,
                 producers: int = 2, rate_per_producer: int = 150):
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.history = History(idempotent=idempotent)
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.rate = rate_per_producer
        self.threads = [threading.Thread(target=self._produce, args=(i,), daemon=True, name=f"producer-{i}")
                        for i in range(producers)]
        self.threads.append(threading.Thread(target=self._consume, daemon=True, name="observer"))
        self.errors: list[BaseException] = []

    def producer_config(self) -> dict:
        return {
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "enable.idempotence": self.history.idempotent,
            "max.in.flight.requests.per.connection": 5,
            "retries": 2147483647,
            "retry.backoff.ms": 100,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            "request.timeout.ms": 5000,
            "socket.timeout.ms": 5000,
            "linger.ms": 5,
            "compression.type": "none",
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 1000,
        }

    def start(self) -> "Workload":
        for t in self.threads:
            t.start()
        return self

    def acked(self) -> int:
        with self.lock:
            return sum(1 for op in self.history.ops.values() if op.outcome == "ok")

    def wait_acked(self, more_than: int, timeout_s: float = 30) -> None:
        """Blocks until more than `more_than` values are acked (progress after a fault)."""
        deadline = time.monotonic() + timeout_s
        while self.acked() <= more_than:
            if self.errors:
                raise self.errors[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no acks beyond {more_than} in {timeout_s}s")
            time.sleep(0.1)

    def stop(self) -> History:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=MESSAGE_TIMEOUT_MS / 1000 + 30)
            assert not t.is_alive(), f"{t.name} did not stop"
        if self.errors:
            raise self.errors[0]
        return self.history

    def _produce(self, producer: int) -> None:
        """One producer; a fatal producer error (possible with idempotence) ends its session
        and a new producer instance (a new producer id: a new ordering scope) carries on."""
        try:
            session, seq = 0, 0
            while not self.stopping.is_set():
                session += 1
                fatal, seq = self._produce_session(producer, session, seq)
                if not fatal:
                    break
        except BaseException as e:  # surfaced by stop()/wait_acked()
            self.errors.append(e)

    def _produce_session(self, producer: int, session: int, seq: int) -> tuple[bool, int]:
        """Sends until stopping or a fatal error; returns (fatal, next seq)."""
        fatal = threading.Event()

        def on_error(err):
            if err.fatal() and not fatal.is_set():
                self.history.fatal_errors.append(f"producer {producer} session {session}: {err.str()}")
                fatal.set()

        def on_delivery(err, msg, op):
            with self.lock:
                if err is None:
                    # No offset on a success happens: librdkafka reports a retried batch the
                    # broker recognised as a duplicate (DUPLICATE_SEQUENCE_NUMBER) that way.
                    offset = msg.offset()
                    op.outcome, op.offset = "ok", (offset if offset is not None and offset >= 0 else None)
                else:
                    op.outcome, op.error = "failed", err.name()
                    if err.fatal() and not fatal.is_set():
                        self.history.fatal_errors.append(
                            f"producer {producer} session {session}: {op.value}: {err.str()}")
                        fatal.set()

        p = Producer({**self.producer_config(), "error_cb": on_error})
        interval = 1.0 / self.rate
        next_send = time.monotonic()
        while not self.stopping.is_set() and not fatal.is_set():
            now = time.monotonic()
            if now < next_send:
                p.poll(min(next_send - now, 0.05))
                continue
            next_send += interval
            op = Op(producer, session, seq, seq % self.partitions, f"p{producer}-{seq}")
            try:
                p.produce(self.topic, value=op.value.encode(), partition=op.partition,
                          on_delivery=lambda err, msg, op=op: on_delivery(err, msg, op))
            except BufferError:
                p.poll(0.1)
                continue
            except KafkaException as e:  # fatal producer state: produce() refuses
                if e.args and e.args[0].fatal():
                    self.history.fatal_errors.append(f"producer {producer} session {session}: {e}")
                    fatal.set()
                    break
                raise
            with self.lock:
                self.history.add(op)
            seq += 1
            p.poll(0)
        if fatal.is_set():
            p.purge()  # queued and in-flight values get an error: outcome failed (indeterminate)
            p.poll(1)
            return True, seq
        p.flush(MESSAGE_TIMEOUT_MS / 1000 + 10)
        return False, seq

    def _consume(self) -> None:
        c = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"observer-{self.topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            # A partition (DROP) leaves a fetch hanging on a silent socket: give up on it soon
            # so the observer reconnects after the heal instead of a minute later.
            "socket.timeout.ms": 5000,
            "fetch.wait.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.max.ms": 1000,
        })
        try:
            c.assign([TopicPartition(self.topic, p, 0) for p in range(self.partitions)])
            while not self.stopping.is_set():
                for msg in c.consume(500, 0.2):
                    if msg.error() is None:
                        with self.lock:
                            self.history.observed.append((msg.partition(), msg.offset(), msg.value().decode()))
        except BaseException as e:
            self.errors.append(e)
        finally:
            c.close()


# ---- reading the final log -------------------------------------------------------------------

def read_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60):
    """Reads every partition from 0 to its HW; returns ({p: [(offset, value)]}, {p: hw})."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"final-reader-{topic}",
                  "enable.auto.commit": False, "auto.offset.reset": "error", "socket.timeout.ms": 10000})
    try:
        highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1] for p in range(partitions)}
        log: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
        todo = {p for p in range(partitions) if highs[p] > 0}
        c.assign([TopicPartition(topic, p, 0) for p in todo])
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"final read stuck: {({p: len(v) for p, v in log.items()})} of {highs}")
            for msg in c.consume(1000, 0.5):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(msg.error())
                p = msg.partition()
                if msg.offset() < highs[p]:
                    log[p].append((msg.offset(), msg.value().decode()))
                if msg.offset() + 1 >= highs[p]:
                    todo.discard(p)
        return log, highs
    finally:
        c.close()


def dump_partition(strata_bin: Path, partition_dir: Path) -> list[tuple[int, int | None, str]]:
    """`strata log dump --dir D --json`: one JSON object per record line."""
    proc = subprocess.run([str(strata_bin), "log", "dump", "--dir", str(partition_dir), "--json"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"strata log dump --dir {partition_dir} failed ({proc.returncode}): "
                           f"{proc.stderr.strip()[-2000:]}\n(set STRATA_CLUSTER_REPLICA_READ=fetch to "
                           f"compare replicas through Fetch instead)")
    out = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        value = rec.get("value")
        out.append((int(rec["offset"]), rec.get("leader_epoch"),
                    base64.b64decode(value).decode() if value is not None else None))
    return out


def replica_read_mode() -> str:
    mode = os.environ.get("STRATA_CLUSTER_REPLICA_READ", "dump")
    assert mode in ("dump", "fetch"), f"STRATA_CLUSTER_REPLICA_READ={mode}: expected dump or fetch"
    return mode


# ---- the summary file --------------------------------------------------------------------------

def write_summary(test_id: str, summary: dict) -> None:
    """Adds this test's summary to last-run.json (restarted per pytest session) and prints it."""
    try:
        data = json.loads(SUMMARY_PATH.read_text())
        if data.get("session") != SESSION_ID:
            data = {}
    except (OSError, ValueError):
        data = {}
    data.setdefault("session", SESSION_ID)
    data.setdefault("runs", {})[test_id] = summary
    SUMMARY_PATH.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"\n=== {test_id} summary ===\n{json.dumps(summary, indent=2, sort_keys=True)}")


def summarize(history: History, report: Report, faults: list[dict], **extra) -> dict:
    return {
        "idempotent": history.idempotent,
        "faults_injected": len(faults),
        "faults": faults,
        "operations": len(history.ops),
        "fatal_producer_errors": history.fatal_errors,
        "passed": report.ok,
        "violations": report.violations[:50],
        **report.stats,
        **extra,
    }


# ---- transactional copy: Jepsen's transactional anomalies ---------------------------------------
#
# Workload (tests/clients/test_txn_copier.py, tests/cluster/test_cluster_txn.py): an input topic
# holds unique values, "p<partition>-<index>" at increasing index per partition; Kafka's
# TransactionalMessageCopier copies input partition p to output partition p, one transaction per
# poll (records + the consumer offsets), aborting about a third of them, while copiers and brokers
# are killed. Exactly-once means a read_committed reader of the output sees every input record
# exactly once, in input order per partition, and nothing of an aborted transaction.
#
# The raw output log (read_uncommitted, control batches included) tells which transaction each
# data record belongs to and its outcome, independently of what the broker's read_committed path
# hides: a transaction is the data a producer id wrote on the partition since its previous control
# marker, closed by the next COMMIT or ABORT marker of that producer id (markers after fencing
# carry a bumped epoch, so matching is by producer id). The anomalies, named as Jepsen names them:
#
#   aborted read        read_committed returned a record of a transaction that aborted
#   uncommitted read    read_committed returned a record of a transaction with no marker yet
#   torn transaction    read_committed returned some but not all records of a committed transaction
#   duplicate           an input value is visible more than once to read_committed
#   lost write          an input value is not visible to read_committed
#   order violation     the visible copies of partition p's values are not in input order
#   wrong partition / never written / phantom record   a value in the wrong partition, a value
#                       the input never had, or a read_committed offset the raw log lacks

CONTROL_ABORT, CONTROL_COMMIT = 0, 1


@dataclass
class RawRecord:
    offset: int
    producer_id: int
    transactional: bool
    control: int | None  # None for data, else CONTROL_ABORT or CONTROL_COMMIT
    value: str | None


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def parse_raw_batches(data: bytes) -> tuple[list[RawRecord], int | None]:
    """The records of the complete v2 batches in a Fetch response's record bytes, control
    batches included, and the offset after the last complete batch (None if there is none)."""
    import struct
    out: list[RawRecord] = []
    pos, next_offset = 0, None
    while pos + 61 <= len(data):
        base, blen = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + blen
        if end > len(data):
            break  # a partial batch at the end of a Fetch response
        attrs, last_delta = struct.unpack_from(">hi", data, pos + 21)
        pid, _epoch, _seq, count = struct.unpack_from(">qhii", data, pos + 43)
        if attrs & 0x07:
            raise ValueError(f"batch at offset {base} is compressed (codec {attrs & 7}): not expected "
                             f"from the copier, which produces uncompressed")
        transactional, control = bool(attrs & 0x10), bool(attrs & 0x20)
        rpos = pos + 61
        for _ in range(count):
            _len, rpos = _varint(data, rpos)
            rpos += 1  # attributes
            _ts, rpos = _varint(data, rpos)
            delta, rpos = _varint(data, rpos)
            klen, rpos = _varint(data, rpos)
            key = data[rpos:rpos + max(klen, 0)]
            rpos += max(klen, 0)
            vlen, rpos = _varint(data, rpos)
            value = data[rpos:rpos + vlen] if vlen >= 0 else None
            rpos += max(vlen, 0)
            nheaders, rpos = _varint(data, rpos)
            for _ in range(nheaders):
                hk, rpos = _varint(data, rpos)
                rpos += max(hk, 0)
                hv, rpos = _varint(data, rpos)
                rpos += max(hv, 0)
            if control:
                (ctype,) = struct.unpack_from(">h", key, 2)
                out.append(RawRecord(base + delta, pid, transactional, ctype, None))
            else:
                out.append(RawRecord(base + delta, pid, transactional, None,
                                     value.decode() if value is not None else None))
        next_offset = base + last_delta + 1
        pos = end
    return out, next_offset


def read_raw_partition(bootstrap: str, topic: str, partition: int, high: int,
                       replica_id: int = -1) -> list[RawRecord]:
    """Every record below `high` of one partition from its leader at `bootstrap`, with a plain
    read_uncommitted Fetch v4 so control batches and aborted data come back as stored.
    replica_id=-2 (Kafka's debugging consumer) reads the local replica of any broker, follower
    or leader, up to its log end."""
    import struct
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients"))
    import kproto
    out: list[RawRecord] = []
    offset = 0
    with kproto.connect(bootstrap, 10.0) as sock:
        corr = 0
        while offset < high:
            corr += 1
            body = (struct.pack(">iiiib", replica_id, 0, 0, 8 << 20, 0) + struct.pack(">i", 1)
                    + kproto.kstring(topic) + struct.pack(">iiqi", 1, partition, offset, 8 << 20))
            sock.sendall(kproto.request(1, 4, corr, body))
            got, resp = kproto.recv_response(sock)
            assert got == corr, (got, corr)
            [(_, _, err, _hw, data)] = kproto.parse_fetch_v4(resp)
            if err != 0:
                raise RuntimeError(f"raw read of {topic}-{partition} at {offset}: error {err}")
            records, nxt = parse_raw_batches(data)
            if nxt is None or nxt <= offset:
                raise RuntimeError(f"raw read of {topic}-{partition} at {offset}: no progress "
                                   f"({len(data)} bytes)")
            out.extend(r for r in records if offset <= r.offset < high)
            offset = nxt
    return out


@dataclass
class Txn:
    producer_id: int
    offsets: list[int] = field(default_factory=list)
    outcome: str = "open"  # commit | abort | open


def transactions(raw: list[RawRecord]) -> tuple[list[Txn], dict[int, Txn]]:
    """Groups a partition's transactional data by producer id between markers; returns the
    transactions and, for each data offset, its transaction."""
    txns: list[Txn] = []
    open_by_pid: dict[int, Txn] = {}
    of: dict[int, Txn] = {}
    for rec in sorted(raw, key=lambda r: r.offset):
        if rec.control is not None:
            t = open_by_pid.pop(rec.producer_id, None)
            if t is not None:
                t.outcome = "commit" if rec.control == CONTROL_COMMIT else "abort"
            continue
        if not rec.transactional:
            continue
        t = open_by_pid.get(rec.producer_id)
        if t is None:
            t = open_by_pid[rec.producer_id] = Txn(rec.producer_id)
            txns.append(t)
        t.offsets.append(rec.offset)
        of[rec.offset] = t
    return txns, of


def input_value(partition: int, index: int) -> str:
    return f"p{partition}-{index:08d}"


def parse_input_value(value: str) -> tuple[int, int] | None:
    try:
        p, i = value[1:].split("-")
        return int(p), int(i)
    except (ValueError, IndexError):
        return None


def check_copy(input_counts: dict[int, int], committed: dict[int, list[tuple[int, str]]],
               raw: dict[int, list[RawRecord]], report: Report | None = None) -> Report:
    """The exactly-once check. input_counts = {p: n} (input partition p held input_value(p, 0..n-1)
    in that order); committed = {p: [(offset, value)]} as a read_committed consumer of the output
    returned them; raw = {p: [RawRecord]} the same output partitions read_uncommitted."""
    r = report or Report()
    seen: dict[str, list[tuple[int, int]]] = {}
    for p in sorted(set(committed) | set(raw)):
        records = committed.get(p, [])
        raw_at = {rec.offset: rec for rec in raw.get(p, []) if rec.control is None}
        txns, txn_of = transactions(raw.get(p, []))
        r.count("raw_records", len(raw_at))
        r.count("raw_markers", sum(1 for rec in raw.get(p, []) if rec.control is not None))
        for t in txns:
            r.count(f"transactions_{t.outcome}")
        visible_of: dict[int, int] = {}  # id(txn) -> visible records
        last_index = -1
        for o, v in records:
            r.count("committed_records")
            seen.setdefault(v, []).append((p, o))
            repeat = len(seen[v]) > 1  # a duplicate, reported below; not also an order violation
            rec = raw_at.get(o)
            if rec is None or rec.value != v:
                r.fail("phantom record", f"partition {p} offset {o}: read_committed returned {v!r}, "
                                         f"the raw log has {rec.value if rec else 'no data record'!r}")
            t = txn_of.get(o)
            if t is not None:
                visible_of[id(t)] = visible_of.get(id(t), 0) + 1
                if t.outcome == "abort":
                    r.fail("aborted read", f"partition {p} offset {o}: {v} belongs to the transaction of "
                                           f"producer {t.producer_id} at offsets {t.offsets[0]}..{t.offsets[-1]}, "
                                           f"which aborted")
                elif t.outcome == "open":
                    r.fail("uncommitted read", f"partition {p} offset {o}: {v} belongs to a transaction of "
                                               f"producer {t.producer_id} with no marker")
            parsed = parse_input_value(v)
            if parsed is None or parsed[1] >= input_counts.get(parsed[0], 0):
                r.fail("never written", f"partition {p} offset {o}: {v!r} is not an input value")
                continue
            src, index = parsed
            if src != p:
                r.fail("wrong partition", f"{v} from input partition {src} is in output partition {p} at {o}")
            elif repeat:
                continue
            elif index < last_index:
                r.fail("order violation", f"partition {p} offset {o}: {v} comes after "
                                          f"{input_value(p, last_index)}")
            else:
                last_index = index
        for t in txns:
            n = visible_of.get(id(t), 0)
            if t.outcome == "commit" and n != len(t.offsets):
                r.fail("torn transaction", f"partition {p}: committed transaction of producer {t.producer_id} "
                                           f"at offsets {t.offsets[0]}..{t.offsets[-1]}: {n} of "
                                           f"{len(t.offsets)} records visible to read_committed")
    for p, n in sorted(input_counts.items()):
        lost: list[int] = []
        for i in range(n):
            v = input_value(p, i)
            places = seen.get(v)
            if places is None:
                lost.append(i)
            elif len(places) > 1:
                r.fail("duplicate", f"{v} is visible {len(places)} times: at {places}")
        r.count("input_records", n)
        if lost:
            r.count("lost_writes", len(lost))
            shown = ", ".join(input_value(p, i) for i in lost[:10])
            r.fail("lost write", f"input partition {p}: {len(lost)} of {n} values not visible "
                                 f"(first: {shown}{', ...' if len(lost) > 10 else ''})")
    return r
