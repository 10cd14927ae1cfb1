"""The Prometheus metrics endpoint (`metrics_listen`): counters that move by the right amounts
after a known workload, a strict check of the text format, the HTTP edges (404, 405, HEAD,
bounds), and a real Prometheus (Debian's package) scraping the broker every second, queried
through its HTTP API.

The format check is a strict reader written here (no client library needed): every line is a
HELP, a TYPE or a sample; a family's HELP and TYPE come once and before its samples, which are
contiguous; names, label names and escapes are valid; histograms have cumulative buckets ending
in le="+Inf" equal to _count.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import kproto
from common import create_topic
from harness import free_port

RECORDS = 200
VALUE_LEN = 100
TOPIC = "metered"
PARTITIONS = 2
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
KINDS = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse_exposition(text: str) -> dict[tuple[str, frozenset], float]:
    """Parses the text format 0.0.4 strictly; returns {(name, frozenset(labels)): value}."""
    assert text.endswith("\n"), "the exposition must end with a newline"
    types: dict[str, str] = {}
    helped: set[str] = set()
    done: set[str] = set()
    current: str | None = None
    samples: dict[tuple[str, frozenset], float] = {}
    for line in text.split("\n")[:-1]:
        if line.startswith("# HELP "):
            name = line[7:].split(" ", 1)[0]
            assert NAME.match(name) and name not in helped and name not in types, line
            helped.add(name)
            continue
        if line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert NAME.match(name) and kind in KINDS and name not in types, line
            types[name] = kind
            if current is not None:
                done.add(current)
            current = name
            continue
        assert line and not line.startswith("#"), f"stray line {line!r}"
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", line)
        assert m, f"not a sample: {line!r}"
        name, labels_text, value_text = m.groups()
        family = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and types.get(name[: -len(suffix)]) == "histogram":
                family = name[: -len(suffix)]
        assert family == current and family not in done, f"sample outside its family: {line!r}"
        labels = parse_labels(labels_text[1:-1] if labels_text else "", line)
        value = float(value_text)  # accepts +Inf, NaN and Go's float forms
        key = (name, frozenset(labels.items()))
        assert key not in samples, f"duplicate series {line!r}"
        samples[key] = value
    check_histograms(types, samples)
    return samples


def parse_labels(text: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        key = text[i:eq]
        assert LABEL.match(key) and key not in labels, line
        assert text[eq + 1] == '"', line
        j, value = eq + 2, []
        while text[j] != '"':
            if text[j] == "\\":
                esc = text[j + 1]
                assert esc in '\\"n', f"bad escape in {line!r}"
                value.append("\n" if esc == "n" else esc)
                j += 2
            else:
                assert text[j] != "\n", line
                value.append(text[j])
                j += 1
        labels[key] = "".join(value)
        i = j + 1
        if i < len(text):
            assert text[i] == ",", line
            i += 1
    return labels


def check_histograms(types: dict[str, str], samples: dict) -> None:
    for name, kind in types.items():
        if kind != "histogram":
            continue
        series: dict[frozenset, list[tuple[float, float]]] = {}
        for (n, labels), v in samples.items():
            if n == f"{name}_bucket":
                d = dict(labels)
                le = float(d.pop("le"))
                series.setdefault(frozenset(d.items()), []).append((le, v))
        for labels, buckets in series.items():
            buckets.sort()
            assert buckets[-1][0] == math.inf, f"{name}{dict(labels)} has no +Inf bucket"
            counts = [c for _, c in buckets]
            assert counts == sorted(counts), f"{name}{dict(labels)} buckets not cumulative"
            assert samples[(f"{name}_count", labels)] == counts[-1]
            assert (f"{name}_sum", labels) in samples


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def scrape(port: int) -> tuple[dict, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
        text = r.read().decode()
    return parse_exposition(text), text


@pytest.fixture
def metered(broker_factory, monkeypatch):
    """A broker (2 shards) with its metrics listener on a free port: (broker, metrics port)."""
    port = free_port()
    monkeypatch.setenv("STRATA_METRICS_LISTEN", f"127.0.0.1:{port}")
    return broker_factory(), port


SASL_USER = ("admin", "secret")
API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36
SASL_AUTHENTICATION_FAILED = 58
CONSUMED = 70  # of RECORDS, by the group of the lag workload


@pytest.fixture
def metered_sasl(broker_factory, monkeypatch):
    """A broker with two listeners, PLAINTEXT (the workload) and SASL_PLAINTEXT (PLAIN and
    SCRAM-SHA-512 enabled), and its metrics listener: (broker, metrics port, SASL address)."""
    port, sasl_port, metrics_port = free_port(), free_port(), free_port()
    monkeypatch.setenv("STRATA_METRICS_LISTEN", f"127.0.0.1:{metrics_port}")
    monkeypatch.setenv("STRATA_SASL_PLAIN_USERS", f"{SASL_USER[0]}:{SASL_USER[1]}")
    monkeypatch.setenv("STRATA_SASL_ENABLED_MECHANISMS", "SCRAM-SHA-512,PLAIN")
    b = broker_factory(port=port, extra_args=[
        "--listeners", f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"])
    return b, metrics_port, f"127.0.0.1:{sasl_port}"


def wrong_plain_password(sasl_bootstrap: str) -> None:
    """One PLAIN login with a wrong password, on the wire: answered
    SASL_AUTHENTICATION_FAILED, then the connection closes. Exactly one failed attempt (a
    client library would reconnect and try again)."""
    with kproto.connect(sasl_bootstrap) as s:
        s.sendall(kproto.request(API_SASL_HANDSHAKE, 1, 1, kproto.kstring("PLAIN")))
        _, body = kproto.recv_response(s)
        assert body[:2] == b"\0\0", body
        token = b"\0" + SASL_USER[0].encode() + b"\0wrong"
        s.sendall(kproto.request(API_SASL_AUTHENTICATE, 1, 2, len(token).to_bytes(4, "big") + token))
        _, body = kproto.recv_response(s)
        assert int.from_bytes(body[:2], "big", signed=True) == SASL_AUTHENTICATION_FAILED
        with pytest.raises((kproto.ProtocolError, OSError)):
            kproto.recv_response(s)


def consume_part(bootstrap: str, topic: str, group: str, n: int) -> dict[int, int]:
    """A group consumer reads `n` records and commits, for every partition of the topic, the
    offset after the last record it read there (0 where it read none, so every partition has
    a committed offset); returns those offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    after = {p: 0 for p in range(PARTITIONS)}
    try:
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + 60
        while got < n and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            after[msg.partition()] = msg.offset() + 1
            got += 1
        assert got == n, after
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in after.items()], asynchronous=False)
    finally:
        c.close()
    return after


def sasl_and_lag_workload(b, sasl_bootstrap: str) -> dict[int, int]:
    """Produces RECORDS over PARTITIONS partitions, lets group `lagging` consume CONSUMED of
    them, fails one PLAIN login on the SASL listener. Returns the expected lag per partition."""
    create_topic(b.bootstrap, TOPIC, PARTITIONS)
    produce(b.bootstrap, TOPIC)
    committed = consume_part(b.bootstrap, TOPIC, "lagging", CONSUMED)
    assert sum(committed.values()) == CONSUMED
    wrong_plain_password(sasl_bootstrap)
    return {p: RECORDS // PARTITIONS - committed[p] for p in range(PARTITIONS)}


def produce(bootstrap: str, topic: str, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for i in range(start, start + RECORDS):
        p.produce(topic, value=b"v" * VALUE_LEN, key=f"k{i}".encode(), partition=i % PARTITIONS,
                  on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0 and not errors, errors


def consume_with_group(bootstrap: str, topic: str, group: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + 60
        while got < RECORDS and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert not msg.error(), msg.error()
            got += 1
        c.commit(asynchronous=False)
        return got
    finally:
        c.close()


def test_counters_move_by_the_workload(metered):
    """A known workload (200 records of 100 B over 2 partitions, acks=all; read back by a group
    consumer) moves the counters by exactly that much where they are exact (records, offsets)
    and by at least the payload where batches add overhead (bytes); every family parses."""
    b, port = metered
    create_topic(b.bootstrap, TOPIC, PARTITIONS)
    before, _ = scrape(port)
    assert value(before, "strata_topic_records_in_total", topic=TOPIC) == 0
    produce(b.bootstrap, TOPIC)
    assert consume_with_group(b.bootstrap, TOPIC, "metrics-group") == RECORDS
    after, text = scrape(port)

    assert value(after, "strata_topic_records_in_total", topic=TOPIC) == RECORDS
    bytes_in = value(after, "strata_topic_bytes_in_total", topic=TOPIC)
    assert RECORDS * VALUE_LEN <= bytes_in <= RECORDS * (VALUE_LEN + 100), bytes_in
    assert value(after, "strata_topic_bytes_out_total", topic=TOPIC) >= bytes_in
    hws = [value(after, "strata_partition_high_watermark", topic=TOPIC, partition=str(p))
           for p in range(PARTITIONS)]
    assert hws == [RECORDS / PARTITIONS] * PARTITIONS, hws
    for p in map(str, range(PARTITIONS)):
        assert value(after, "strata_partition_log_end_offset", topic=TOPIC, partition=p) == RECORDS / PARTITIONS
        assert value(after, "strata_partition_log_start_offset", topic=TOPIC, partition=p) == 0
        assert value(after, "strata_partition_size_bytes", topic=TOPIC, partition=p) > 0

    produced = value(after, "strata_requests_total", api="Produce") - value(before, "strata_requests_total", api="Produce")
    assert produced >= 1
    assert value(after, "strata_request_latency_seconds_count", api="Produce") == value(after, "strata_requests_total", api="Produce")
    assert value(after, "strata_requests_total", api="Fetch") > value(before, "strata_requests_total", api="Fetch")
    assert value(after, "strata_requests_total", api="JoinGroup") >= 1
    assert value(after, "strata_request_errors_total", api="Produce") == 0
    assert value(after, "strata_fsync_latency_seconds_count") > 0  # acks=all, flush policy sync
    assert value(after, "strata_consumer_groups") >= 1
    assert value(after, "strata_under_replicated_partitions") == 0
    assert value(after, "strata_leader_partitions") >= PARTITIONS
    assert value(after, "strata_connections_accepted_total", listener="PLAINTEXT") >= 2
    assert all(dict(k[1])["listener"] == "PLAINTEXT" and v >= 0
               for k, v in after.items() if k[0] == "strata_connections_open")
    # The consumer committed everything it read: no lag left.
    for p in map(str, range(PARTITIONS)):
        assert value(after, "strata_consumergroup_lag", group="metrics-group", topic=TOPIC, partition=p) == 0
    assert value(after, "strata_offline_partitions") == 0
    assert sum(value(after, "strata_shard_task_queue_seconds_count", shard=str(s)) for s in range(2)) > 0
    assert {dict(k[1]).get("shard") for k in after if k[0] == "strata_memory_limit_bytes"} == {"0", "1"}
    assert value(after, "strata_storage_free_bytes") > 0
    assert value(after, "strata_storage_reserve_bytes") > 0
    assert value(after, "process_resident_memory_bytes") > 1 << 20
    assert value(after, "process_cpu_seconds_total") > 0
    assert "# TYPE strata_request_latency_seconds histogram" in text


def test_authentication_failures_connections_and_lag(metered_sasl):
    """After one wrong PLAIN password on the SASL listener and a group that read CONSUMED of
    RECORDS: failures are 1 for (SASL_PLAINTEXT, PLAIN) and 0 elsewhere, connections are
    counted per listener, and the group's lag per partition is produced minus consumed. A
    SCRAM-SHA-512 login with a wrong password by librdkafka counts under its mechanism."""
    b, port, sasl_bootstrap = metered_sasl
    lag = sasl_and_lag_workload(b, sasl_bootstrap)
    s, _ = scrape(port)
    assert value(s, "strata_authentication_failures_total", listener="SASL_PLAINTEXT", mechanism="PLAIN") == 1
    failures = {dict(k[1])["listener"] + "/" + dict(k[1])["mechanism"]: v
                for k, v in s.items() if k[0] == "strata_authentication_failures_total" and v}
    assert failures == {"SASL_PLAINTEXT/PLAIN": 1}, failures
    assert value(s, "strata_connections_accepted_total", listener="SASL_PLAINTEXT") == 1
    assert value(s, "strata_connections_accepted_total", listener="PLAINTEXT") >= 2
    assert sum(v for k, v in s.items()
               if k[0] == "strata_connections_open" and dict(k[1])["listener"] == "SASL_PLAINTEXT") == 0
    for p, expected in lag.items():
        assert value(s, "strata_consumergroup_lag", group="lagging", topic=TOPIC, partition=str(p)) == expected
    assert sum(lag.values()) == RECORDS - CONSUMED

    c = Consumer({"bootstrap.servers": sasl_bootstrap, "group.id": "g", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "nobody", "sasl.password": "wrong"})
    with pytest.raises(Exception):
        c.list_topics(timeout=3)
    c.close()
    s, _ = scrape(port)
    assert value(s, "strata_authentication_failures_total", listener="SASL_PLAINTEXT",
                 mechanism="SCRAM-SHA-512") >= 1
    assert value(s, "strata_authentication_failures_total", listener="SASL_PLAINTEXT", mechanism="PLAIN") == 1


def raw_http(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_http_edges(metered):
    """Other paths are 404, other methods 405, HEAD answers the head only, the readiness path
    answers 200, an oversized head 431 and a body 413; keep-alive serves several scrapes."""
    _, port = metered
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for method, path, status in [("GET", "/nope", 404), ("POST", "/metrics", 405),
                                 ("GET", "/v1/status/ready", 200), ("GET", "/metrics", 200),
                                 ("GET", "/metrics?x=1", 200)]:
        conn.request(method, path)
        r = conn.getresponse()
        r.read()
        assert r.status == status, (method, path, r.status)
    conn.request("HEAD", "/metrics")
    r = conn.getresponse()
    assert r.status == 200 and int(r.headers["Content-Length"]) > 1000 and r.read() == b""
    conn.close()
    big = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
    assert raw_http(port, big).startswith(b"HTTP/1.1 431")
    body = b"GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
    assert raw_http(port, body).startswith(b"HTTP/1.1 413")


def prometheus_query(port: int, query: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as r:
        answer = json.load(r)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def test_a_real_prometheus_scrapes_the_broker(metered_sasl, tmp_path: Path):
    """Debian's Prometheus scrapes the broker every second; after a known workload (records
    produced, a group that consumed part of them, one wrong password on the SASL listener)
    its HTTP API reports the target up, the records, the failed authentication of that
    listener and mechanism, the group's lag (produced - consumed), and request and fsync
    histograms it can aggregate."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (apt-get install prometheus; .ci/run does)")
    b, metrics_port, sasl_bootstrap = metered_sasl
    lag = sasl_and_lag_workload(b, sasl_bootstrap)
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: strata\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{web_port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    try:
        deadline = time.monotonic() + 60
        records, last = None, None
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                up = prometheus_query(web_port, 'up{job="strata"}')
                records = prometheus_query(web_port, f'strata_topic_records_in_total{{topic="{TOPIC}"}}')
                if up and up[0]["value"][1] == "1" and records:
                    break
                last = (up, records)
            except OSError as e:
                last = e
            time.sleep(0.5)
        else:
            pytest.fail(f"prometheus never saw the broker up with the topic's records: {last}\n"
                        + (tmp_path / "prometheus.log").read_text()[-3000:])
        assert float(records[0]["value"][1]) == RECORDS
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/api/v1/targets", timeout=10) as r:
            targets = json.load(r)["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"], targets
        produce_rate = prometheus_query(
            web_port, 'sum(strata_request_latency_seconds_count{api="Produce"})')
        assert produce_rate and float(produce_rate[0]["value"][1]) >= 1
        p99 = prometheus_query(
            web_port, 'histogram_quantile(0.99, sum by (le) (strata_fsync_latency_seconds_bucket))')
        assert p99 and float(p99[0]["value"][1]) > 0
        hw = prometheus_query(web_port, f'sum(strata_partition_high_watermark{{topic="{TOPIC}"}})')
        assert float(hw[0]["value"][1]) == RECORDS

        failures = prometheus_query(web_port, "strata_authentication_failures_total > 0")
        assert [(f["metric"]["listener"], f["metric"]["mechanism"], f["value"][1]) for f in failures] \
            == [("SASL_PLAINTEXT", "PLAIN", "1")], failures
        lags = prometheus_query(web_port, f'strata_consumergroup_lag{{group="lagging",topic="{TOPIC}"}}')
        assert {int(x["metric"]["partition"]): float(x["value"][1]) for x in lags} == lag, lags
        total = prometheus_query(web_port, 'sum(strata_consumergroup_lag{group="lagging"})')
        assert float(total[0]["value"][1]) == RECORDS - CONSUMED
        conns = prometheus_query(web_port, 'strata_connections_accepted_total{listener="SASL_PLAINTEXT"}')
        assert float(conns[0]["value"][1]) == 1
        queue = prometheus_query(
            web_port, "histogram_quantile(0.5, sum by (le) (strata_shard_task_queue_seconds_bucket))")
        assert queue and float(queue[0]["value"][1]) >= 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
