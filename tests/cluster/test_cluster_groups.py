"""Consumer groups on a 3-node Strata cluster when the group coordinator's broker dies.

A group's coordinator is the leader of its `__consumer_offsets` partition (Kafka:
abs(groupId.hashCode) % offsets.topic.num.partitions, 3 here). When that broker is killed the
partition gets a new leader, which replays the partition and becomes the coordinator: clients
find it again (NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS
meanwhile are retriable), every acknowledged offset commit is still there, and consumption goes
on from the committed positions.

Both tests use a topic with 3 partitions, replication factor 3, min.insync.replicas=2, and
acks=all keyed records whose (partition, offset) the delivery reports give. They run in the
plain `-m cluster` pass (no `faults` mark): one kill -9, no checker.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from harness import Cluster, require_cluster_support

pytestmark = [pytest.mark.cluster]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 3  # STRATA_OFFSETS_TOPIC_NUM_PARTITIONS in harness.CLUSTER_ENV
PARTITIONS = 3
TOPIC_CONFIG = {"min.insync.replicas": "2"}
FAILOVER_TIMEOUT_S = 20  # broker session timeout 3 s + election + metadata, with slack
GROUP_TIMEOUT_S = 30  # find the new coordinator, load, join (old members expire after 6 s)


# ---- helpers ---------------------------------------------------------------------------------

def java_hashcode(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrapping)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions (Utils.abs maps MIN_VALUE to 0)."""
    h = java_hashcode(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def produce(bootstrap: str, topic: str, n: int, tag: str) -> dict[int, list[tuple[int, str]]]:
    """n keyed acks=all records; every one must be acknowledged. {partition: [(offset, value)]}."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "message.timeout.ms": 30000,
                  "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500})
    acked: dict[int, list[tuple[int, str]]] = {}
    errors: list[str] = []

    def done(err, msg):
        if err is not None:
            errors.append(err.name())
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.value().decode()))

    for i in range(n):
        p.produce(topic, key=f"key-{i % 97}", value=f"{tag}-{i}", on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0, "records still queued after 60 s"
    assert not errors, f"acks=all produce failed: {sorted(set(errors))}"
    for recs in acked.values():
        recs.sort()
    return acked


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                     "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500,
                     "socket.timeout.ms": 5000, **extra})


def committed(cons: Consumer, topic: str, timeout_s: float = GROUP_TIMEOUT_S) -> dict[int, int]:
    """OffsetFetch through the group's coordinator, retried while it fails (coordinator moving
    or loading is retriable). {partition: offset}, -1001 (OFFSET_INVALID) when none."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            got = cons.committed(tps, timeout=5)
            bad = [tp for tp in got if tp.error is not None]
            if not bad:
                return {tp.partition: tp.offset for tp in got}
            last = bad
        except KafkaException as e:
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"committed() failed for {timeout_s}s: {last}")


def commit(cons: Consumer, offsets: dict[int, int] | None, topic: str,
           timeout_s: float = GROUP_TIMEOUT_S, retry: bool = True) -> dict[int, int]:
    """Synchronous OffsetCommit of `offsets` (None: the consumer's positions), retried while
    it fails if `retry`. Returns what the broker acknowledged."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if offsets is None:
                res = cons.commit(asynchronous=False)
            else:
                res = cons.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                                  asynchronous=False)
            bad = [tp for tp in res if tp.error is not None]
            if not bad:
                return {tp.partition: tp.offset for tp in res if tp.topic == topic}
            err: object = bad
        except KafkaException as e:
            err = e
        if not retry or time.monotonic() > deadline:
            raise AssertionError(f"offset commit failed: {err}")
        time.sleep(0.2)


def coordinator_id(c: Cluster, group: str, timeout_s: float = GROUP_TIMEOUT_S) -> int:
    """The group's coordinator as the admin API reports it (FindCoordinator + DescribeGroups)."""
    admin = AdminClient({"bootstrap.servers": c.live_bootstrap(), "socket.timeout.ms": 3000})

    def check():
        desc = admin.describe_consumer_groups([group], request_timeout=5)[group].result(timeout=10)
        return desc.coordinator.id if desc.coordinator is not None else None
    return c.poll_until(f"coordinator of group {group}", check, timeout_s, interval_s=0.5)


def find_coordinator(c: Cluster, group: str) -> tuple[int, int]:
    """(__consumer_offsets partition, coordinator node); FindCoordinator must name the leader
    of the group's partition."""
    p = offsets_partition(group)
    leader = c.leader(OFFSETS_TOPIC, p)
    coord = coordinator_id(c, group)
    assert coord == leader, \
        f"FindCoordinator names node {coord} but {OFFSETS_TOPIC}-{p} (group {group}) is led by {leader}"
    return p, coord


def check_offsets_topic_replicated(c: Cluster) -> None:
    parts = c.wait_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, full_isr=True, timeout_s=30)
    for i, pm in parts.items():
        assert sorted(pm.replicas) == [1, 2, 3], f"{OFFSETS_TOPIC}-{i} replicas {pm.replicas}, want RF 3"


def ends(acked: dict[int, list[tuple[int, str]]]) -> dict[int, int]:
    return {p: (recs[-1][0] + 1 if recs else 0) for p, recs in acked.items()}


# ---- tests -----------------------------------------------------------------------------------

def test_group_offsets_survive_coordinator_kill9(cluster_factory):
    """Proves a group's committed offsets and the group itself survive kill -9 of its
    coordinator's broker: a consumer commits half of each partition; the coordinator (found
    with FindCoordinator, which must name the leader of the group's __consumer_offsets
    partition) is killed; the partition gets a new leader and FindCoordinator names it; a new
    consumer in the same group reads back exactly the committed offsets, joins, receives
    exactly the records from those offsets on (none below, none missing, in offset order)
    and commits the ends. After the killed broker restarts (full ISR) a third consumer reads
    the final offsets."""
    require_cluster_support()
    c = cluster_factory()
    topic, group = "grp-idle", "strata-group-failover"
    c.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIG)
    acked = produce(c.bootstrap, topic, 600, "v")
    assert sorted(acked) == list(range(PARTITIONS)), f"keys did not spread: {sorted(acked)}"
    for p, recs in acked.items():
        assert [o for o, _ in recs] == list(range(len(recs))), f"partition {p}: offsets not 0..n-1"
    half = {p: len(recs) // 2 for p, recs in acked.items()}

    # 1. First consumer: exactly offsets 0..half-1 of each partition, then commit them.
    c1 = consumer(c.live_bootstrap(), group)
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    try:
        c1.subscribe([topic])
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        while any(len(seen[p]) < half[p] for p in seen):
            assert time.monotonic() < deadline, f"first consumer stuck at {({p: len(v) for p, v in seen.items()})}"
            for msg in c1.consume(100, 0.5):
                assert msg.error() is None, f"consumer error: {msg.error()}"
                p, o = msg.partition(), msg.offset()
                if o < half[p]:
                    seen[p].append(o)
                else:  # past the half: stop this partition; what is buffered is ignored
                    c1.pause([TopicPartition(topic, p)])
        for p in seen:
            assert seen[p] == list(range(half[p])), f"partition {p}: first consumer read {seen[p][:20]}..."
        assert commit(c1, half, topic) == half
        before = committed(c1, topic)
        assert before == half, f"committed {before}, expected {half}"
        check_offsets_topic_replicated(c)
        op, coord = find_coordinator(c, group)
    finally:
        c1.close()

    # 2. Kill the coordinator; its __consumer_offsets partition must move.
    c.kill9(coord)
    new_leader = c.leader(OFFSETS_TOPIC, op, timeout_s=FAILOVER_TIMEOUT_S, not_on=coord)
    new_coord = c.poll_until("FindCoordinator names the new leader",
                             lambda: (lambda n: n if n != coord else None)(coordinator_id(c, group)),
                             GROUP_TIMEOUT_S, interval_s=0.5)
    assert new_coord == new_leader, f"new coordinator {new_coord}, new {OFFSETS_TOPIC}-{op} leader {new_leader}"
    print(f"group {group}: {OFFSETS_TOPIC}-{op}, coordinator {coord} killed, now {new_coord}")

    # 3. Second consumer: the committed offsets, then exactly the rest.
    t0 = time.monotonic()
    c2 = consumer(c.live_bootstrap(), group)
    try:
        after = committed(c2, topic)
        assert after == before, f"committed offsets changed across the coordinator failover: {before} -> {after}"
        c2.subscribe([topic])
        want = {p: [(o, v) for o, v in recs if o >= half[p]] for p, recs in acked.items()}
        got: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + GROUP_TIMEOUT_S + FAILOVER_TIMEOUT_S
        errors: list[str] = []
        while any(len(got[p]) < len(want[p]) for p in got):
            assert time.monotonic() < deadline, \
                f"second consumer got {({p: len(v) for p, v in got.items()})} of {({p: len(v) for p, v in want.items()})}; errors {errors[-5:]}"
            for msg in c2.consume(100, 0.5):
                if msg.error() is not None:
                    errors.append(str(msg.error()))  # e.g. a fetch from the dead broker
                    continue
                got[msg.partition()].append((msg.offset(), msg.value().decode()))
        for msg in c2.consume(100, 1.0):  # nothing more may come
            if msg.error() is None:
                got[msg.partition()].append((msg.offset(), msg.value().decode()))
        print(f"second consumer: all {sum(map(len, want.values()))} remaining records "
              f"{time.monotonic() - t0:.1f}s after the failover; transient errors: {len(errors)}")
        for p in got:
            below = [o for o, _ in got[p] if o < half[p]]
            assert not below, f"partition {p}: redelivered below the committed offset {half[p]}: {below[:10]}"
            assert got[p] == want[p], \
                f"partition {p}: got offsets {[o for o, _ in got[p]][:10]}... ({len(got[p])}), want {half[p]}..{ends(acked)[p] - 1}"
        end = ends(acked)
        assert commit(c2, end, topic) == end
        assert committed(c2, topic) == end
    finally:
        c2.close()

    # 4. The killed broker back, everything in sync; a third member sees the final offsets.
    c.restart(coord)
    c.wait_topic(topic, PARTITIONS, full_isr=True, timeout_s=60)
    c.wait_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, full_isr=True, timeout_s=60)
    c3 = consumer(c.live_bootstrap(), group)
    try:
        assert committed(c3, topic) == end, "final offsets differ after the old coordinator restarted"
    finally:
        c3.close()


def test_group_keeps_consuming_through_coordinator_kill9(cluster_factory):
    """Proves an active consumer survives kill -9 of its group coordinator's broker: it
    consumes and commits every 50 records; after a third of the records the coordinator is
    killed while the consumer is a member with an assignment; it keeps polling, its offsets
    read back through the new coordinator are the last acknowledged ones (no committed offset
    lost), records produced after the kill reach it, and its commits succeed again. At least
    once: every acknowledged record is delivered, never one below an offset whose commit was
    acknowledged, and acknowledged commits never go backwards."""
    require_cluster_support()
    c = cluster_factory()
    topic, group = "grp-active", "strata-active-group"
    c.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIG)
    acked = produce(c.bootstrap, topic, 450, "a")
    # Small fetches, so the consumer is still fetching, not just draining a buffer, when the
    # coordinator dies; more records are produced after the kill anyway.
    cons = consumer(c.live_bootstrap(), group, **{"max.partition.fetch.bytes": 1024,
                                                 "queued.min.messages": 20})
    seen: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    commits: list[dict[int, int]] = []  # acknowledged commits, in order
    floor = {p: 0 for p in range(PARTITIONS)}  # last acknowledged commit per partition
    violations: list[str] = []
    failed_commits: list[str] = []
    since_commit = 0

    def poll_once(timeout: float = 0.2) -> None:
        nonlocal since_commit
        for msg in cons.consume(50, timeout):
            if msg.error() is not None:
                continue  # transient (dead broker); the consumer retries by itself
            p, o = msg.partition(), msg.offset()
            if o < floor[p]:
                violations.append(f"partition {p}: offset {o} delivered after a commit of {floor[p]} was acknowledged")
            seen[p].append(o)
            since_commit += 1

    def try_commit() -> bool:
        nonlocal since_commit
        try:
            res = cons.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                failed_commits.append(e.args[0].name())
            return False
        if any(tp.error is not None for tp in res):
            failed_commits.append(str([tp.error for tp in res if tp.error is not None]))
            return False
        ok = {tp.partition: tp.offset for tp in res if tp.topic == topic and tp.offset >= 0}
        for p, o in ok.items():
            if o < floor[p]:
                violations.append(f"partition {p}: acknowledged commit {o} after acknowledged {floor[p]}")
            floor[p] = max(floor[p], o)
        commits.append(ok)
        since_commit = 0
        return True

    def all_seen(records: dict[int, list[tuple[int, str]]]) -> bool:
        return all({o for o, _ in recs} <= set(seen[p]) for p, recs in records.items())

    try:
        cons.subscribe([topic])
        total = sum(map(len, acked.values()))
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        while sum(map(len, seen.values())) < total // 3 or not commits:
            assert time.monotonic() < deadline, f"consumer stuck before the kill: {({p: len(v) for p, v in seen.items()})}"
            poll_once()
            if since_commit >= 50:
                try_commit()
        assert try_commit() or commits, f"no commit acknowledged before the kill: {failed_commits}"
        check_offsets_topic_replicated(c)
        op, coord = find_coordinator(c, group)
        pre_kill = dict(floor)

        c.kill9(coord)
        t_kill = time.monotonic()
        # Keep polling (no commits) until the group's offsets can be read back again.
        while True:
            poll_once(0.1)
            try:
                got = cons.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=2)
                if all(tp.error is None for tp in got):
                    break
            except KafkaException:
                pass
            assert time.monotonic() - t_kill < GROUP_TIMEOUT_S + FAILOVER_TIMEOUT_S, \
                f"offsets unreadable {GROUP_TIMEOUT_S + FAILOVER_TIMEOUT_S}s after the coordinator died"
        back = {tp.partition: tp.offset for tp in got}
        for p in range(PARTITIONS):
            want = pre_kill.get(p, 0)
            assert back[p] >= want or (want == 0 and back[p] < 0), \
                f"committed offsets lost in the failover: before the kill {pre_kill}, after {back}"
        new_coord = c.leader(OFFSETS_TOPIC, op, timeout_s=FAILOVER_TIMEOUT_S, not_on=coord)
        print(f"group {group}: coordinator {coord} killed, {OFFSETS_TOPIC}-{op} now led by {new_coord}; "
              f"offsets readable after {time.monotonic() - t_kill:.1f}s: {back}")

        more = produce(c.live_bootstrap(), topic, 450, "b")  # written after the kill
        everything = {p: acked.get(p, []) + more.get(p, []) for p in range(PARTITIONS)}
        end = ends(everything)
        deadline = time.monotonic() + GROUP_TIMEOUT_S + FAILOVER_TIMEOUT_S
        while not all_seen(everything) or floor != end:
            assert time.monotonic() < deadline, (
                f"consumer did not finish: seen {({p: len(set(v)) for p, v in seen.items()})}, "
                f"want {({p: len(v) for p, v in everything.items()})}; floor {floor}, end {end}; "
                f"failed commits {failed_commits[-5:]}")
            poll_once()
            if since_commit >= 50 or all_seen(everything):
                try_commit()
        assert not violations, "\n".join(violations[:20])
        assert committed(cons, topic) == end
        dupes = sum(len(v) - len(set(v)) for v in seen.values())
        print(f"delivered {sum(map(len, seen.values()))} for {sum(map(len, everything.values()))} records "
              f"({dupes} redelivered); {len(commits)} commits acknowledged; failed commits: {failed_commits}")
    finally:
        cons.close()

    c.restart(coord)
    c.wait_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, full_isr=True, timeout_s=60)
    c2 = consumer(c.live_bootstrap(), group)
    try:
        assert committed(c2, topic) == end, "final offsets differ after the old coordinator restarted"
    finally:
        c2.close()
