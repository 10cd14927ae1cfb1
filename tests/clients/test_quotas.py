"""Client quotas (issue 15; Kafka's KIP-13, KIP-124, KIP-546, KIP-219) with real clients.

- The Java AdminClient's alterClientQuotas/describeClientQuotas (tests/clients/java/
  QuotaCheck.java) print every answer; Strata's lines must equal Kafka 4.1's
  (tests/kafka/reference_kafka.py), errors included.
- `strata quota set|list|remove`, and quotas surviving a kill -9 (they are in the metadata
  log).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kproto
from common import compile_java_checks
from harness import strata_bin

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))

import reference_kafka  # noqa: E402

JAVA_LIB = Path(__file__).resolve().parent / "java" / "lib"
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def quota_check(tmp_path_factory) -> Path:
    return compile_java_checks(tmp_path_factory, "quota-check", ["QuotaCheck.java"])


def run_quota_check(build: Path, bootstrap: str) -> list[str]:
    r = subprocess.run(["java", "-cp", f"{JAVA_LIB}/*:{build}", "QuotaCheck", bootstrap],
                       capture_output=True, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-6000:]
    lines = r.stdout.decode().splitlines()
    assert lines and lines[-1].startswith("OK: "), out[-3000:]
    return lines


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    if not reference_kafka.jars_present():
        reason = f"no Kafka jars in {reference_kafka.LIB}; run tests/fetch-jars.sh kafka"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    k = reference_kafka.ReferenceKafka(tmp_path_factory.mktemp("reference-kafka"), heap="512m")
    try:
        k.start()
    except Exception:
        k.kill9()
        raise
    yield k
    try:
        k.stop()
    finally:
        k.kill9()


@pytest.mark.reference_kafka
def test_quota_calls_answer_as_kafka(broker, kafka, quota_check):
    """Proves AlterClientQuotas and DescribeClientQuotas answer the Java AdminClient as Kafka
    4.1 does: the same quotas for every filter (exact, default, any name; strict or not), the
    same errors (unknown key, fractional byte rate, unknown entity type, ip with user), and
    validateOnly and removals behaving the same. Runs QuotaCheck against both and compares its
    output line by line."""
    on_kafka = run_quota_check(quota_check, kafka.bootstrap)
    on_strata = run_quota_check(quota_check, broker.bootstrap)
    assert on_strata == on_kafka, "\n".join(
        f"kafka : {k}\nstrata: {s}" for k, s in zip(on_kafka, on_strata) if k != s)


def strata(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, timeout=TIMEOUT_S)
    if check:
        assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    return r


def quota_list(bootstrap: str, *filters: str) -> list[list[str]]:
    out = strata("quota", "list", "--bootstrap", bootstrap, *filters).stdout.decode()
    rows = [line.rsplit(None, 2) for line in out.splitlines()[1:] if line.strip()]
    return sorted(rows)


def test_quota_cli_survives_kill9(persistent_broker):
    """Proves `strata quota set|list|remove` sets, lists and removes quotas of user, client-id
    and user+client-id entities (names and defaults), refuses a bad key with the broker's
    INVALID_REQUEST message, and that the quotas survive a kill -9 and restart (they live in
    the metadata log, replayed at start)."""
    b = persistent_broker
    boot = b.bootstrap
    strata("quota", "set", "--bootstrap", boot, "--client-id", "app", "--config", "producer_byte_rate=1048576",
           "--config", "request_percentage=25.5")
    strata("quota", "set", "--bootstrap", boot, "--user-default", "--config", "consumer_byte_rate=2097152")
    strata("quota", "set", "--bootstrap", boot, "--user", "alice", "--client-default",
           "--config", "producer_byte_rate=4096")
    bad = strata("quota", "set", "--bootstrap", boot, "--user", "alice", "--config", "bogus=1", check=False)
    assert bad.returncode != 0
    assert "Invalid configuration key bogus" in bad.stderr.decode(), bad.stderr.decode()
    expected = sorted([
        ["client-id=app", "producer_byte_rate", "1048576"],
        ["client-id=app", "request_percentage", "25.5"],
        ["user=<default>", "consumer_byte_rate", "2097152"],
        ["user=alice, client-id=<default>", "producer_byte_rate", "4096"],
    ])
    deadline = time.monotonic() + 20
    while quota_list(boot) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert quota_list(boot) == expected
    assert quota_list(boot, "--client-id", "app") == expected[:2]
    b.kill9()
    b.start()
    assert quota_list(boot) == expected
    strata("quota", "remove", "--bootstrap", boot, "--client-id", "app", "--config", "request_percentage")
    strata("quota", "remove", "--bootstrap", boot, "--user", "alice", "--client-default")
    expected = [expected[0], expected[2]]
    deadline = time.monotonic() + 20
    while quota_list(boot) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    assert quota_list(boot) == expected


# --- throttling: producer_byte_rate and consumer_byte_rate held by real clients -------------

QUOTA_BYTES_PER_S = 1024 * 1024
VALUE = b"q" * 1024


def _produce(bootstrap: str, topic: str, client_id: str, seconds: float, out, extra: dict | None = None) -> None:
    """Produces 1 KiB records as fast as the client takes them for `seconds`; sends back the
    delivery timeline [(monotonic time, bytes)] and the largest throttle time librdkafka's
    statistics reported (its brokers' `throttle` window)."""
    from confluent_kafka import Producer
    import json

    timeline: list[tuple[float, int]] = []
    throttle_max = [0]

    def on_stats(text):
        for b in json.loads(text).get("brokers", {}).values():
            throttle_max[0] = max(throttle_max[0], b.get("throttle", {}).get("max", 0))

    def on_delivery(err, msg):
        if err is None:
            timeline.append((time.monotonic(), len(msg.value())))

    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
                  "statistics.interval.ms": 500, "stats_cb": on_stats, **(extra or {})})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.01)
            continue
        p.poll(0)
    p.purge()
    p.flush(5)
    p.poll(1)
    out.put((timeline, throttle_max[0]))


def rate_between(timeline: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(n for t, n in timeline if start <= t < end) / (end - start)


def run_producers(bootstrap: str, topic: str, jobs: list[tuple[str, float, float, dict]]) -> list:
    """Starts each (client id, delay, seconds, extra config) producer in its own process (no GIL between
    them); returns their (timeline, throttle max) and the common start time."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    start = time.monotonic()
    procs = []
    for client_id, delay, seconds, extra in jobs:
        q = ctx.Queue()
        p = ctx.Process(target=_delayed_produce,
                        args=(bootstrap, topic, client_id, start + delay, seconds, q, extra))
        p.start()
        procs.append((p, q))
    results = [q.get(timeout=max(d + s for _, d, s, _ in jobs) + 60) for _, q in procs]
    for p, _ in procs:
        p.join(10)
    return start, results


def _delayed_produce(bootstrap, topic, client_id, at, seconds, out, extra):
    time.sleep(max(0.0, at - time.monotonic()))
    _produce(bootstrap, topic, client_id, seconds, out, extra)


def test_producer_quota_holds_one_producer_and_spares_the_other(broker_factory, monkeypatch):
    """Proves producer_byte_rate (KIP-13): a confluent-kafka producer whose client id has a
    1 MiB/s quota is held to 1 MiB/s within 10 % over 30 s, sees throttle_time_ms (librdkafka's
    statistics), and an unquota'd producer running beside it gets at least 55 % of what it
    gets alone (measured just before, on the same broker).

    quota_window_num is 2 here (STRATA_QUOTA_WINDOW_NUM). With Kafka's default 11 x 1 s, a
    client that always has data bursts about ten windows' worth each time its oldest (burst)
    sample leaves the ring, and then waits that burst off: measured with this producer, Kafka
    4.1 sends ~12 MB, then ~1 MB every 3 s, then ~11 MB 14 s later (0.96 MB/s over [13, 43] s),
    and Strata the same (1.26 MB/s over that span, another phase of the same sawtooth). Over
    30 s that average depends on where the bursts fall, on both brokers; with 2 windows a burst
    is one window's worth and the 30 s average is the quota."""
    from common import create_topic

    monkeypatch.setenv("STRATA_QUOTA_WINDOW_NUM", "2")
    broker = broker_factory()
    topic = "quota-produce"
    create_topic(broker.bootstrap, topic, 2)
    strata("quota", "set", "--bootstrap", broker.bootstrap, "--client-id", "slow",
           "--config", f"producer_byte_rate={QUOTA_BYTES_PER_S}")
    time.sleep(1)
    def fast_alone() -> float:
        start, [(alone, _)] = run_producers(broker.bootstrap, topic, [("fast", 0, 8, {})])
        return rate_between(alone, start + 2, start + 8)

    before = fast_alone()
    # Requests small beside the quota (64 KiB batches, not librdkafka's 1 MB), so one
    # request's overshoot is a small part of a window.
    small = {"batch.size": 65536}
    start, [(slow, slow_throttle), (fast, _)] = run_producers(
        broker.bootstrap, topic, [("slow", 0, 40, small), ("fast", 15, 8, {})])
    slow_rate = rate_between(slow, start + 8, start + 38)
    fast_rate = rate_between(fast, start + 17, start + 23)
    # Alone once before and once after the shared run: this machine's speed drifts over a
    # minute, and the mean of the two is what the shared run is compared with.
    alone_rate = (before + fast_alone()) / 2
    print(f"slow {slow_rate / 1e6:.3f} MB/s (quota {QUOTA_BYTES_PER_S / 1e6:.3f}), throttle max "
          f"{slow_throttle} ms; fast alone {alone_rate / 1e6:.1f} MB/s, beside slow {fast_rate / 1e6:.1f} MB/s")
    assert abs(slow_rate / QUOTA_BYTES_PER_S - 1) <= 0.10, slow_rate
    assert slow_throttle > 0
    # Unquota'd, the two would share the broker about evenly (0.5); muting the slow channel
    # must leave the other clearly more than that. Not 0.7 or 0.6: on 2 cores the slow
    # client's own process (librdkafka's threads, its queue refilled all the time) takes CPU
    # from the fast one and from the broker (0.695 seen once in CI, 0.593 on 2026-12-03 with
    # the slow client held to 1.064 MB/s, the quota doing its job).
    assert fast_rate >= 0.55 * alone_rate, (fast_rate, alone_rate)
    assert fast_rate > 5 * QUOTA_BYTES_PER_S


def test_consumer_quota_holds_rate(broker_factory, monkeypatch):
    """Proves consumer_byte_rate with shorter windows (quota_window_num = 3 through
    STRATA_QUOTA_WINDOW_NUM, so the test is short): a consumer whose client id has a 1 MiB/s
    quota reads at most 1 MiB/s (+10 %) and at least 75 % of it over 10 s once its first
    windows have passed, and sees throttle_time_ms; the same data read by an unquota'd
    consumer comes far faster. (Measured: 0.89 MB/s of record values for 1.05 MB/s of
    quota, which counts whole responses; a throttled fetch is answered empty, as Kafka's.)"""
    from confluent_kafka import Consumer, Producer, TopicPartition
    import json

    monkeypatch.setenv("STRATA_QUOTA_WINDOW_NUM", "3")
    broker = broker_factory()
    topic = "quota-fetch"
    from common import create_topic
    create_topic(broker.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    total = 24 * QUOTA_BYTES_PER_S
    for _ in range(total // len(VALUE)):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    del p
    strata("quota", "set", "--bootstrap", broker.bootstrap, "--client-id", "slowc",
           "--config", f"consumer_byte_rate={QUOTA_BYTES_PER_S}")
    time.sleep(1)

    def consume(client_id: str, seconds: float):
        throttle_max = [0]

        def on_stats(text):
            for b in json.loads(text).get("brokers", {}).values():
                throttle_max[0] = max(throttle_max[0], b.get("throttle", {}).get("max", 0))

        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": client_id, "client.id": client_id,
                      "enable.auto.commit": False, "statistics.interval.ms": 500, "stats_cb": on_stats})
        c.assign([TopicPartition(topic, 0, 0)])
        timeline = []
        start = time.monotonic()
        while time.monotonic() < start + seconds:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                timeline.append((time.monotonic(), len(m.value())))
        c.close()
        return start, timeline, throttle_max[0]

    start, slow, slow_throttle = consume("slowc", 15)
    slow_rate = rate_between(slow, start + 4, start + 14)
    start, fast, _ = consume("fastc", 6)
    fast_bytes = sum(n for _, n in fast)
    print(f"slow consumer {slow_rate / 1e6:.3f} MB/s, throttle max {slow_throttle} ms; "
          f"unquota'd read {fast_bytes / 1e6:.1f} MB in 6 s")
    assert 0.75 <= slow_rate / QUOTA_BYTES_PER_S <= 1.10, slow_rate
    assert slow_throttle > 0
    assert fast_bytes >= total * 0.9


# --- request_percentage (KIP-124): every API with the field shows the throttle ---------------

API_LIST_OFFSETS, API_METADATA, API_FIND_COORDINATOR = 2, 3, 10
REQUEST_BODIES = {
    # Metadata v3: all topics (null list); throttle_time_ms is the body's first field.
    (API_METADATA, 3): struct.pack(">i", -1),
    # ListOffsets v2: replica -1, READ_UNCOMMITTED, no topics.
    (API_LIST_OFFSETS, 2): struct.pack(">ibi", -1, 0, 0),
    # FindCoordinator v1: group "g".
    (API_FIND_COORDINATOR, 1): kproto.kstring("g") + b"\0",
}


def flood(bootstrap: str, client_id: str, api: int, version: int, seconds: float) -> tuple[int, int, float]:
    """Sends one request after another on one connection until a response carries a
    throttle or `seconds` pass. Returns (requests sent, throttle_time_ms of the last
    response, seconds from receiving that response to receiving the next one)."""
    body = REQUEST_BODIES[(api, version)]
    with kproto.connect(bootstrap, timeout_s=30) as s:
        deadline = time.monotonic() + seconds
        n, throttle = 0, 0
        while time.monotonic() < deadline:
            n += 1
            s.sendall(kproto.request(api, version, n, body, client_id=client_id))
            corr, resp = kproto.recv_response(s)
            assert corr == n
            (throttle,) = struct.unpack(">i", resp[:4])
            if throttle > 0:
                break
        received = time.monotonic()
        n += 1
        s.sendall(kproto.request(api, version, n, body, client_id=client_id))
        assert kproto.recv_response(s)[0] == n
        return n, throttle, time.monotonic() - received


def test_request_quota_throttles_other_apis(broker):
    """Proves request_percentage (KIP-124) beyond Produce and Fetch: a raw client whose
    client id has request_percentage=1 (10 ms of broker time a second) and floods Metadata v3,
    ListOffsets v2 and FindCoordinator v1 on one connection gets responses with
    throttle_time_ms > 0 (at most the quota window, 1 s), and its connection is muted for
    that long after such a response (KIP-219): the next answer comes no sooner than about the
    throttle. A client with another id is not throttled."""
    strata("quota", "set", "--bootstrap", broker.bootstrap, "--client-id", "flood",
           "--config", "request_percentage=1")
    time.sleep(1)
    for api, version in REQUEST_BODIES:
        n, throttle, wait_s = flood(broker.bootstrap, "flood", api, version, 30)
        print(f"api {api} v{version}: throttle {throttle} ms after {n} requests; next answer after {wait_s:.3f} s")
        assert 0 < throttle <= 1000, (api, throttle, n)
        assert wait_s >= 0.5 * throttle / 1000, (api, throttle, wait_s)
    n, throttle, _ = flood(broker.bootstrap, "free", API_METADATA, 3, 2)
    assert throttle == 0 and n > 10, (n, throttle)


# --- both at once: the answer carries the larger throttle (KIP-124 beside KIP-13) ------------

API_PRODUCE = 0


def produce_v9(correlation_id: int, client_id: str, topic: str, batch: bytes) -> bytes:
    """A framed Produce v9 (flexible: request header v2, compact strings, tagged fields) of
    one batch to partition 0, acks=1."""
    header = (struct.pack(">hhi", API_PRODUCE, 9, correlation_id) + kproto.kstring(client_id)
              + b"\0")
    name = topic.encode()
    body = (b"\0" + struct.pack(">hi", 1, 10_000)  # null transactional id, acks, timeout
            + kproto.uvarint(2) + kproto.uvarint(len(name) + 1) + name
            + kproto.uvarint(2) + struct.pack(">i", 0) + kproto.uvarint(len(batch) + 1) + batch + b"\0"
            + b"\0" + b"\0")
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def produce_throttle(sock, correlation_id: int) -> int:
    """Reads one Produce v9 answer; returns its throttle_time_ms (the body's last field,
    before its empty tagged fields) after checking the partition was written."""
    corr, resp = kproto.recv_response(sock)
    assert corr == correlation_id
    assert resp[-1] == 0, resp
    (throttle,) = struct.unpack(">i", resp[-5:-1])
    return throttle


def test_produce_and_fetch_answers_carry_the_larger_of_byte_and_request_throttles(broker):
    """Proves a client under both a byte-rate quota and request_percentage gets, in Produce
    (v9, flexible) and Fetch (v4) answers, the larger of the two throttles, as Kafka's
    KafkaApis does (KIP-124: both recorded, max answered), and is muted that long (KIP-219):
    - client "req" (request_percentage=1, byte rates of 1 GB/s it never nears) flooding small
      Produce requests, then Fetch requests, gets throttle_time_ms in (0, 1000] (the request
      throttle, bounded by the 1 s window); Produce answers used to carry 0 there;
    - client "bytes" (request_percentage=1, producer_byte_rate=20000) sending 300 KB gets a
      throttle above 1000 ms (the byte-rate one, larger than any request throttle), and its
      next answer comes no sooner than about that."""
    from common import create_topic

    topic = "quota-both"
    create_topic(broker.bootstrap, topic, 1)
    strata("quota", "set", "--bootstrap", broker.bootstrap, "--client-id", "req",
           "--config", "request_percentage=1", "--config", "producer_byte_rate=1000000000",
           "--config", "consumer_byte_rate=1000000000")
    strata("quota", "set", "--bootstrap", broker.bootstrap, "--client-id", "bytes",
           "--config", "request_percentage=1", "--config", "producer_byte_rate=20000")
    time.sleep(1)
    small = kproto.record_batch([(None, b"r" * 100)] * 20)
    with kproto.connect(broker.bootstrap, timeout_s=30) as s:
        deadline = time.monotonic() + 30
        n, throttle = 0, 0
        while throttle == 0 and time.monotonic() < deadline:
            n += 1
            s.sendall(produce_v9(n, "req", topic, small))
            throttle = produce_throttle(s, n)
        print(f"produce: request throttle {throttle} ms after {n} requests")
        assert 0 < throttle <= 1000, (throttle, n)
    n, throttle, wait_s = 0, 0, 0.0
    body = kproto.fetch_v4_body(topic, 0, 0, 1 << 20, 1 << 20)
    with kproto.connect(broker.bootstrap, timeout_s=30) as s:
        deadline = time.monotonic() + 30
        while throttle == 0 and time.monotonic() < deadline:
            n += 1
            s.sendall(kproto.request(kproto.API_FETCH, 4, n, body, client_id="req"))
            corr, resp = kproto.recv_response(s)
            assert corr == n
            (throttle,) = struct.unpack(">i", resp[:4])
        print(f"fetch: request throttle {throttle} ms after {n} requests")
        assert 0 < throttle <= 1000, (throttle, n)
    big = kproto.record_batch([(None, b"b" * 1000)] * 300)
    with kproto.connect(broker.bootstrap, timeout_s=60) as s:
        s.sendall(produce_v9(1, "bytes", topic, big))
        throttle = produce_throttle(s, 1)
        received = time.monotonic()
        s.sendall(produce_v9(2, "bytes", topic, small))
        produce_throttle(s, 2)
        wait_s = time.monotonic() - received
    print(f"produce: byte-rate throttle {throttle} ms; next answer after {wait_s:.3f} s")
    assert throttle > 1000, throttle
    assert wait_s >= 0.5 * throttle / 1000, (throttle, wait_s)
