#!/usr/bin/env python3
"""Syslog and HTTP ingestion measured (issue 16): lines/s and MB/s per path, p99 from send to
durable, broker CPU per million lines, TCP sender connections one broker holds with its
memory, and the built-in syslog path against rsyslog omkafka into Strata and into Apache
Kafka 4.1 — in one run, with the machine's limits measured in the same run.

Paths (each on a fresh broker, 4 partitions, 4 sending hosts, `--lines` lines in all):
  tcp          4 sender processes, octet-counted RFC 5424 over TCP, straight to Strata
  relp         rsyslog omrelp -> Strata's RELP listener (answered once durable)
  http         4 sender processes, POST /topics/load with 1,000 JSON records a request
  omfwd        rsyslog omfwd (TCP, octet-counted) -> Strata's syslog TCP listener
  omkafka      rsyslog omkafka (acks=all, lz4) -> Strata's Kafka listener
  omkafka-apache-kafka  the same rsyslog omkafka -> Apache Kafka 4.1 (tests/fetch-jars.sh kafka)
rsyslog is fed over its imtcp by 4 processes, one per host (its main queue has one worker,
so each host's lines stay in order).

Every run then checks what the tests check: every line arrived once, each host's lines in
order in one partition (`--no-check` skips it); this is where the 1M-line runs the issue asks
for live (tests/clients/test_syslog.py runs 100k per path in CI).

Latency: a probe sends one line every 20 ms through the same path during the load (host
`probe`, routed to topic `probe`) with its send time in it; a consumer (fetch.wait.max.ms=5)
reads it, and send -> read is the latency. A consumer only reads below the high watermark,
which under acks=all is durable, so this is send -> durable plus one fetch; through rsyslog
it includes rsyslog's queue (everything the feeders pushed ahead of the probe). HTTP's and
RELP's probes are exact: a POST's answer and a RELP `200` come once durable (the RELP probe is
its own session on Strata's listener, beside rsyslog's).

Usage: perf/syslog.py [--lines N] [--sizes 200,1024] [--paths tcp,relp,...] [--senders 10000]
                      [--no-check] [--no-limits] [--out perf/out-syslog]
Writes OUT/results.json and OUT/results.md (the tables for perf/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests/clients"))
sys.path.insert(0, str(ROOT / "tests/kafka"))

import harness  # noqa: E402
import test_syslog as ts  # noqa: E402

HOSTS = 4
PARTITIONS = 4
PROBE_INTERVAL_S = 0.02
HZ = os.sysconf("SC_CLK_TCK")


# --- lines ------------------------------------------------------------------------------------

def line(h: int, i: int, size: int) -> bytes:
    """An RFC 5424 line of exactly `size` bytes (padded), `seq=H:I` in it."""
    head = f"<134>1 2026-11-30T12:00:00.000Z host{h} app {1000 + h} ID{h} - seq={h}:{i} "
    return (head + "x" * max(0, size - len(head))).encode()


def host_lines(h: int, per_host: int, size: int) -> list[bytes]:
    return [line(h, i, size) for i in range(per_host)]


# --- process accounting -----------------------------------------------------------------------

def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` and its descendants (threads included)."""
    total = 0
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / HZ


def rss_mib(pid: int) -> float:
    total = 0
    for p in descendants(pid):
        try:
            for row in open(f"/proc/{p}/status"):
                if row.startswith("VmRSS:"):
                    total += int(row.split()[1])
        except OSError:
            pass
    return total / 1024


def loadavg() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


# --- brokers ------------------------------------------------------------------------------------

class Strata:
    def __init__(self, work: Path, **settings: str):
        self.ports = {"tcp": harness.free_port(), "relp": harness.free_port(),
                      "http": harness.free_port()}
        env = {
            "STRATA_SYSLOG_LISTENERS": f"tcp://127.0.0.1:{self.ports['tcp']},"
                                       f"relp://127.0.0.1:{self.ports['relp']}",
            "STRATA_HTTP_LISTEN": f"127.0.0.1:{self.ports['http']}",
            "STRATA_NUM_PARTITIONS": str(PARTITIONS),
            "STRATA_SYSLOG_TOPIC": "load",
            "STRATA_SYSLOG_ROUTES": "host=probe:probe",
            **settings,
        }
        self.saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        self.broker = harness.Broker(work / "data", work / "logs")
        self.broker.start()
        ts.wait_for_topic(self.broker, "load")
        ts.wait_for_topic(self.broker, "probe")

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    @property
    def pid(self) -> int:
        return self.broker.proc.pid

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(
            f"http://127.0.0.1:{self.ports['http']}/stats", timeout=30).read())

    def stop(self) -> None:
        try:
            self.broker.stop()
        finally:
            self.broker.kill9()
            for k, v in self.saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class ApacheKafka:
    def __init__(self, work: Path):
        import reference_kafka
        if not reference_kafka.jars_present():
            raise RuntimeError("no Kafka jars: run tests/fetch-jars.sh kafka")
        self.k = reference_kafka.ReferenceKafka(work, heap="1g", overrides={
            "num.partitions": str(PARTITIONS), "auto.create.topics.enable": "true"})
        self.k.start()
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic("load", PARTITIONS, 1),
                                      NewTopic("probe", 1, 1)]).values():
            f.result(timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if ts.count(self.bootstrap, "load") == 0:
                    break
            except Exception:
                pass
            time.sleep(0.5)

    @property
    def bootstrap(self) -> str:
        return self.k.bootstrap

    @property
    def pid(self) -> int:
        return self.k.proc.pid

    def stop(self) -> None:
        try:
            self.k.stop()
        finally:
            self.k.kill9()


# --- senders ------------------------------------------------------------------------------------

def send_tcp(port: int, h: int, per_host: int, size: int, start) -> None:
    frames = b"".join(b"%d %s" % (len(x), x) for x in host_lines(h, per_host, size))
    with socket.create_connection(("127.0.0.1", port)) as s:
        start.wait()
        view = memoryview(frames)
        for at in range(0, len(view), 1 << 18):
            s.sendall(view[at:at + (1 << 18)])


def send_lines_nl(port: int, h: int, per_host: int, size: int, start) -> None:
    data = b"\n".join(host_lines(h, per_host, size)) + b"\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        start.wait()
        view = memoryview(data)
        for at in range(0, len(view), 1 << 18):
            s.sendall(view[at:at + (1 << 18)])


def send_http(port: int, h: int, per_host: int, size: int, start) -> None:
    import http.client
    lines = host_lines(h, per_host, size)
    bodies = []
    for at in range(0, len(lines), 1000):
        bodies.append(json.dumps({"records": [
            {"key": f"host{h}", "value": x.decode()} for x in lines[at:at + 1000]]}).encode())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start.wait()
    for body in bodies:
        conn.request("POST", "/topics/load", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        answer = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {answer[:300]!r}")
    conn.close()


def run_senders(target, port: int, per_host: int, size: int) -> float:
    """Starts one sender process per host, waits until each has built its lines and
    connected, then releases them all at once; returns the monotonic time of the release."""
    start = multiprocessing.Barrier(HOSTS + 1)
    procs = [multiprocessing.Process(target=target, args=(port, h, per_host, size, start))
             for h in range(HOSTS)]
    for p in procs:
        p.start()
    start.wait(timeout=600)
    t0 = time.monotonic()
    run_senders.procs = procs
    return t0


# --- probe: latency send -> durable ---------------------------------------------------------

class Probe:
    """Sends a timestamped probe line every PROBE_INTERVAL_S through `send` and reads them
    back from topic `probe`; `latencies_ms` are send -> read."""

    def __init__(self, bootstrap: str, send, exact: bool = False):
        self.bootstrap, self.send, self.exact = bootstrap, send, exact
        self.sent: dict[int, float] = {}
        self.latencies_ms: list[float] = []
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._send, daemon=True)]
        if not exact:
            self.threads.append(threading.Thread(target=self._read, daemon=True))

    def start(self) -> "Probe":
        for t in self.threads:
            t.start()
        return self

    def _send(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            t = time.time()
            self.sent[i] = t
            try:
                took = self.send(i)
                if self.exact and took is not None:
                    self.latencies_ms.append((i, took * 1000))
            except Exception:
                pass
            i += 1
            time.sleep(max(0.0, PROBE_INTERVAL_S - (time.time() - t)))

    def _read(self) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition, OFFSET_BEGINNING
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"probe-{time.time()}",
                      "fetch.wait.max.ms": 5, "enable.auto.commit": False})
        # Assigned, not subscribed: no group join delays the first reads.
        partitions = c.list_topics("probe", timeout=30).topics["probe"].partitions
        c.assign([TopicPartition("probe", p, OFFSET_BEGINNING) for p in partitions])
        while not self.stop_flag.is_set():
            m = c.poll(0.1)
            if m is None or m.error() is not None:
                continue
            now = time.time()
            v = m.value() or b""
            at = v.find(b"probe=")
            if at < 0:
                continue
            i = int(v[at + 6:].split(b" ", 1)[0])
            if i in self.sent:
                self.latencies_ms.append((i, (now - self.sent[i]) * 1000))
        c.close()

    def stop(self, from_wall: float, to_wall: float) -> dict:
        """Latencies of the probes sent between `from_wall` and `to_wall` (the load)."""
        time.sleep(1)  # the last probes' way through
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=10)
        lat = sorted(ms for i, ms in self.latencies_ms if from_wall <= self.sent[i] <= to_wall)
        if not lat:
            return {"probes": 0}
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]  # noqa: E731
        return {"probes": len(lat), "p50_ms": round(q(0.5), 1), "p99_ms": round(q(0.99), 1),
                "max_ms": round(lat[-1], 1)}


def probe_line(i: int) -> bytes:
    return b"<134>1 2026-11-30T12:00:00.000Z probe app 1 ID - probe=%d sent" % i


def tcp_prober(port: int):
    s = socket.create_connection(("127.0.0.1", port))

    def send(i: int):
        x = probe_line(i)
        s.sendall(b"%d %s" % (len(x), x))
    return send


def relp_prober(port: int):
    """A RELP session straight to Strata's listener: each probe is answered once durable,
    so its round trip is exactly send -> durable (under rsyslog's load on the same
    listener)."""
    s = socket.create_connection(("127.0.0.1", port))
    offers = b"relp_version=0\nrelp_software=probe\ncommands=syslog"
    s.sendall(b"1 open %d %s\n" % (len(offers), offers))
    s.recv(4096)
    txnr = [1]

    def send(i: int):
        txnr[0] += 1
        x = probe_line(i)
        t = time.monotonic()
        s.sendall(b"%d syslog %d %s\n" % (txnr[0], len(x), x))
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("RELP probe closed")
            answer += chunk
        return time.monotonic() - t if b" 200 " in answer else None
    return send


def http_prober(port: int):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def send(i: int):
        t = time.monotonic()
        conn.request("POST", "/topics/probe", body=probe_line(i), headers={"Content-Type": "text/plain"})
        r = conn.getresponse()
        r.read()
        return time.monotonic() - t if r.status == 200 else None
    return send


# --- reading back and checking ---------------------------------------------------------------

def wait_durable(bootstrap: str, n: int, timeout_s: float) -> float:
    """Polls the sum of `load`'s high watermarks until it reaches `n`; returns when."""
    deadline = time.monotonic() + timeout_s
    have = 0
    while time.monotonic() < deadline:
        try:
            have = ts.count(bootstrap, "load")
        except Exception:
            have = 0
        if have >= n:
            return time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"{have} of {n} lines durable after {timeout_s}s")


def check(bootstrap: str, n: int) -> str:
    """Every line once, each host's in order in one partition (the tests' check), reading
    with kcat in a compact format (1M JSON envelopes would dominate the run)."""
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", "load", "-e", "-q", "-o", "beginning",
         "-f", "%k\t%p\t%s\n"], capture_output=True, timeout=1200, check=True).stdout
    records = []
    for row in out.splitlines():
        if not row:
            continue
        key, partition, payload = row.split(b"\t", 2)
        records.append({"key": key.decode(), "partition": int(partition),
                        "payload": payload[:payload.find(b" ", payload.find(b"seq=")) + 1].decode()})
    assert len(records) == n, f"{len(records)} records, {n} lines sent"
    ts.check_lines(records, HOSTS, n // HOSTS)
    return f"{n:,} lines: each once, in order per host"


# --- rsyslog ---------------------------------------------------------------------------------------

def rsyslog_action(path: str, target: dict) -> str:
    if path == "relp":
        return f"""
module(load="omrelp")
action(type="omrelp" target="127.0.0.1" port="{target['relp']}"
       template="RSYSLOG_SyslogProtocol23Format"
       action.resumeRetryCount="-1" queue.type="LinkedList" queue.size="2000000")"""
    if path == "omfwd":
        return f"""
action(type="omfwd" target="127.0.0.1" port="{target['tcp']}" protocol="tcp"
       TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format"
       action.resumeRetryCount="-1" queue.type="LinkedList" queue.size="2000000")"""
    # omkafka: the probe host to its own topic, so the latency reader sees only probes.
    kafka = lambda topic: f"""action(type="omkafka" broker=["{target['bootstrap']}"] topic="{topic}"
       template="line" key="host" dynaKey="on" partitions.auto="on"
       confParam=["acks=all", "compression.codec=lz4", "linger.ms=5"]
       action.resumeRetryCount="-1" queue.type="LinkedList" queue.size="2000000")"""  # noqa: E731
    return f"""
module(load="omkafka")
template(name="line" type="string" string="%rawmsg%")
template(name="host" type="string" string="%hostname%")
if $hostname == "probe" then {{
  {kafka("probe")}
}} else {{
  {kafka("load")}
}}"""


# --- one run -----------------------------------------------------------------------------------

def run_path(path: str, size: int, lines: int, work: Path, do_check: bool) -> dict:
    per_host = lines // HOSTS
    n = per_host * HOSTS
    work.mkdir(parents=True, exist_ok=True)
    broker = ApacheKafka(work / "kafka") if path == "omkafka-apache-kafka" else Strata(work)
    rsyslog = None
    try:
        target = {"bootstrap": broker.bootstrap, **getattr(broker, "ports", {})}
        if path in ("tcp", "http"):
            port = broker.ports[path]
            sender = send_tcp if path == "tcp" else send_http
            probe = Probe(broker.bootstrap, tcp_prober(port) if path == "tcp" else http_prober(port),
                          exact=path == "http")
        else:
            rsyslog, port = ts.start_rsyslog(work, path, rsyslog_action(
                "omkafka" if path.startswith("omkafka") else path, target))
            sender = send_lines_nl
            if path == "relp":
                # rsyslog's queue holds what it accepted: a probe through it measures the
                # queue. Straight to the listener it measures the broker's send -> durable.
                probe = Probe(broker.bootstrap, relp_prober(broker.ports["relp"]), exact=True)
            else:
                probe_socket = socket.create_connection(("127.0.0.1", port))
                probe = Probe(broker.bootstrap,
                              lambda i: probe_socket.sendall(probe_line(i) + b"\n"))
        load_before = loadavg()
        probe.start()
        t0 = run_senders(sender, port, per_host, size)
        t0_wall = time.time()
        cpu0 = cpu_s(broker.pid)
        sender_cpu0 = cpu_s(rsyslog.pid) if rsyslog else 0.0
        t1 = wait_durable(broker.bootstrap, n, timeout_s=max(600, lines / 2000))
        t1_wall = time.time()
        cpu1 = cpu_s(broker.pid)
        sender_cpu1 = cpu_s(rsyslog.pid) if rsyslog else 0.0
        latency = probe.stop(t0_wall, t1_wall)
        for p in run_senders.procs:
            p.join(timeout=60)
        elapsed = t1 - t0
        result = {
            "path": path, "line_bytes": size, "lines": n, "seconds": round(elapsed, 2),
            "lines_per_s": round(n / elapsed), "mb_per_s": round(n * size / elapsed / 1e6, 1),
            "broker_cpu_s_per_m_lines": round((cpu1 - cpu0) / (n / 1e6), 2),
            "broker_cpu_util": round((cpu1 - cpu0) / elapsed, 2),
            "rsyslog_cpu_s_per_m_lines": round((sender_cpu1 - sender_cpu0) / (n / 1e6), 2) if rsyslog else None,
            "broker_rss_mib": round(rss_mib(broker.pid)),
            "latency": latency, "load_before": load_before, "load_after": loadavg(),
        }
        if do_check:
            try:
                result["check"] = check(broker.bootstrap, n)
            except AssertionError as e:  # the numbers stand; the failure is reported
                result["check"] = f"FAILED: {e}"[:300]
                if rsyslog is not None:
                    log = work / f"rsyslog-{path}" / "out.log"
                    result["rsyslog_log_tail"] = log.read_text(errors="replace")[-1500:]
        return result
    finally:
        if rsyslog is not None:
            ts.stop(rsyslog)
        broker.stop()


# --- many senders ------------------------------------------------------------------------------

def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def many_senders(count: int, work: Path) -> dict:
    """`count` TCP senders, each connected and sending one line, all held at once: the lines
    arrive, the broker reports them open; RSS before and after."""
    broker = Strata(work)
    conns: list[socket.socket] = []
    try:
        time.sleep(1)
        rss0 = rss_mib(broker.pid)
        t0 = time.monotonic()
        # Four source addresses, as a fleet has many: each stays under max_connections_per_ip.
        for i in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((f"127.0.0.{2 + i % 4}", 0))
            s.connect(("127.0.0.1", broker.ports["tcp"]))
            x = b"<134>1 2026-11-30T12:00:00.000Z sender%d app 1 - - hello from %d" % (i, i)
            s.sendall(b"%d %s" % (len(x), x))
            conns.append(s)
        connected_s = time.monotonic() - t0
        wait_durable(broker.bootstrap, count, timeout_s=300)
        all_in_s = time.monotonic() - t0
        time.sleep(2)
        st = broker.stats()
        rss1 = rss_mib(broker.pid)
        # And a second line on every connection: they are still being served.
        for i, s in enumerate(conns):
            x = b"<134>1 2026-11-30T12:00:00.000Z sender%d app 1 - - again from %d" % (i, i)
            s.sendall(b"%d %s" % (len(x), x))
        wait_durable(broker.bootstrap, 2 * count, timeout_s=300)
        return {"senders": count, "held": st["syslog_connections"],
                "refused": st["connections_refused"], "connect_s": round(connected_s, 1),
                "first_lines_durable_s": round(all_in_s, 1),
                "rss_idle_mib": round(rss0), "rss_with_senders_mib": round(rss1),
                "rss_per_sender_kib": round((rss1 - rss0) * 1024 / count, 1),
                "second_lines": "all durable", "load": loadavg()}
    finally:
        for s in conns:
            s.close()
        broker.stop()


# --- machine limits -------------------------------------------------------------------------------

def limits(work: Path) -> dict:
    out = {"cpus": os.cpu_count(), "mem_gib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
           "nofile_hard": resource.getrlimit(resource.RLIMIT_NOFILE)[1], "load": loadavg()}
    if shutil.which("fio") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "fio"],
                       capture_output=True)
    if shutil.which("fio"):
        f = work / "fio.tmp"
        r = json.loads(subprocess.run(
            ["fio", "--name=w", f"--filename={f}", "--rw=write", "--bs=1M", "--direct=1",
             "--size=1G", "--ioengine=libaio", "--iodepth=8", "--runtime=5", "--end_fsync=1",
             "--output-format=json"], capture_output=True, text=True, check=True).stdout)
        out["fio_write_1m_mb_s"] = round(r["jobs"][0]["write"]["bw_bytes"] / 1e6, 1)
        r = json.loads(subprocess.run(
            ["fio", "--name=s", f"--filename={f}", "--rw=write", "--bs=16k", "--size=256M",
             "--fdatasync=1", "--ioengine=sync", "--runtime=5", "--time_based",
             "--output-format=json"], capture_output=True, text=True, check=True).stdout)
        sync = r["jobs"][0]["sync"]["lat_ns"]["percentile"]
        out["fdatasync_16k_per_s"] = round(r["jobs"][0]["write"]["iops"])
        out["fdatasync_p99_us"] = round(sync.get("99.000000", 0) / 1000)
        f.unlink(missing_ok=True)
    return out


# --- report ------------------------------------------------------------------------------------------

def markdown(res: dict) -> str:
    lim = res["limits"]
    rows = ["| limit | value |", "|---|---|"]
    for k, v in lim.items():
        rows.append(f"| {k} | {v} |")
    rows += ["", "| path | line B | lines | s | lines/s | MB/s | broker CPU s / M lines | broker CPU util | "
             "rsyslog CPU s / M lines | p50 ms | p99 ms | probes | load before -> after | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["runs"]:
        if "error" in r:
            rows.append(f"| {r['path']} | {r['line_bytes']} | error: {r['error']} |")
            continue
        lat = r["latency"]
        rows.append(
            f"| {r['path']} | {r['line_bytes']} | {r['lines']:,} | {r['seconds']} | {r['lines_per_s']:,} | "
            f"{r['mb_per_s']} | {r['broker_cpu_s_per_m_lines']} | {r['broker_cpu_util']} | "
            f"{r['rsyslog_cpu_s_per_m_lines'] if r['rsyslog_cpu_s_per_m_lines'] is not None else '-'} | "
            f"{lat.get('p50_ms', '-')} | {lat.get('p99_ms', '-')} | {lat.get('probes', 0)} | "
            f"{r['load_before']} -> {r['load_after']} | {r.get('check', 'not checked')} |")
    if res.get("senders"):
        rows += ["", "| TCP senders held at once | value |", "|---|---|"]
        for k, v in res["senders"].items():
            rows.append(f"| {k} | {v} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--sizes", default="200,1024")
    ap.add_argument("--paths", default="tcp,relp,http,omkafka,omfwd,omkafka-apache-kafka")
    ap.add_argument("--compare-size", type=int, default=200,
                    help="line size of the omfwd and Apache Kafka runs (the comparison)")
    ap.add_argument("--senders", type=int, default=10_000)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-limits", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "perf/out-syslog"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    raise_nofile()
    work = Path(tempfile.mkdtemp(prefix="strata-perf-syslog-", dir=os.environ.get("TMPDIR", "/tmp")))
    res = {"command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "limits": {} if args.no_limits else limits(work), "runs": []}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for path in [p for p in args.paths.split(",") if p]:
        for size in (sizes if path in ("tcp", "relp", "http", "omkafka") else [args.compare_size]):
            print(f"== {path} {size} B x {args.lines:,} (load {loadavg()})", flush=True)
            try:
                r = run_path(path, size, args.lines, work / f"{path}-{size}", not args.no_check)
            except Exception as e:  # one failed path must not lose the others' numbers
                r = {"path": path, "line_bytes": size, "error": f"{type(e).__name__}: {e}"[:400]}
            print(json.dumps(r), flush=True)
            res["runs"].append(r)
            shutil.rmtree(work / f"{path}-{size}", ignore_errors=True)
            (out / "results.json").write_text(json.dumps(res, indent=1))
    if args.senders:
        print(f"== {args.senders:,} TCP senders", flush=True)
        try:
            res["senders"] = many_senders(args.senders, work / "senders")
        except Exception as e:
            res["senders"] = {"error": f"{type(e).__name__}: {e}"[:400]}
        print(json.dumps(res["senders"]), flush=True)
    res["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(res))
    print(markdown(res))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
