"""Syslog and HTTP ingestion into topics, proved with the senders hosts really run: `logger`
(util-linux) over UDP and TCP, rsyslog forwarding with omfwd (TCP, octet-counted), omrelp
(RELP) and omkafka (Kafka protocol), syslog-ng with its network() and syslog() destinations
(TCP, newline and octet-counted) and its kafka-c destination, and HTTP produce as agents'
HTTP outputs use it. Each sender is a real process with its own config in the test's temp
dir; records are read back with kcat and a consumer group. syslog-ng runs from the tree
tests/fetch-syslog-ng.sh unpacks (its Debian package conflicts with rsyslog's).

What every path must show: each line arrives exactly once (RELP across a broker kill -9: at
least once, and every line rsyslog considers delivered is there), each host's lines stay in
order in one partition (key = hostname), and the record carries the documented headers.

Lines per path: STRATA_TEST_SYSLOG_LINES (default 100000; the 1M-line runs are perf/syslog.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from harness import free_port

LINES = int(os.environ.get("STRATA_TEST_SYSLOG_LINES", "100000"))
HOSTS = 4
# How long a path may take to deliver them all (a loaded 2-core machine: ~2,000 lines/s at the
# slowest, RELP across a broker kill, leaves room).
WAIT_S = max(240, LINES // 2000)


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ingest_factory(broker_factory, monkeypatch):
    """Starts a broker with TCP, UDP and RELP syslog listeners and an HTTP listener, 4
    partitions per topic, and the extra settings given (STRATA_* names); returns (broker,
    ports)."""
    def start(**settings: str):
        ports = {"tcp": free_port(), "udp": free_udp_port(), "relp": free_port(),
                 "http": free_port()}
        monkeypatch.setenv(
            "STRATA_SYSLOG_LISTENERS",
            f"tcp://127.0.0.1:{ports['tcp']},udp://127.0.0.1:{ports['udp']},"
            f"relp://127.0.0.1:{ports['relp']}")
        monkeypatch.setenv("STRATA_HTTP_LISTEN", f"127.0.0.1:{ports['http']}")
        monkeypatch.setenv("STRATA_NUM_PARTITIONS", "4")
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        b = broker_factory(start=False)
        if not b.persistent:
            pytest.skip("ingestion is Strata's own")
        b.start()
        wait_for_topic(b, "syslog")
        return b, ports
    return start


@pytest.fixture
def ingest(ingest_factory):
    """A broker with every ingestion listener (see ingest_factory); returns (broker, ports)."""
    return ingest_factory()


def stats(ports) -> dict:
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports['http']}/stats").read())


def wait_for_topic(b, topic: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = subprocess.run(["kcat", "-b", b.bootstrap, "-L", "-t", topic, "-m", "5"],
                             capture_output=True, text=True)
        if out.returncode == 0 and "partitions" in out.stdout and "Broker:" not in out.stdout:
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} not created:\n{b.log_tail()}")


def read_all(bootstrap: str, topic: str) -> list[dict]:
    """Every record of `topic`, with kcat (JSON envelope per record)."""
    out = subprocess.run(
        ["kcat", "-b", bootstrap, "-C", "-t", topic, "-e", "-q", "-J", "-o", "beginning",
         "-m", "30"],
        capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def count(bootstrap: str, topic: str) -> int:
    """Records in `topic`: the sum of its partitions' high watermarks (ListOffsets)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "counter"})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in meta.partitions)
    finally:
        c.close()


def wait_count(bootstrap: str, topic: str, n: int, broker=None) -> list[dict]:
    """Waits until `topic` holds at least `n` records, then reads them all."""
    deadline = time.monotonic() + WAIT_S
    have = 0
    while time.monotonic() < deadline:
        try:
            have = count(bootstrap, topic)
        except Exception:  # the broker is restarting
            have = 0
        if have >= n:
            return read_all(bootstrap, topic)
        time.sleep(0.5)
    tail = broker.log_tail() if broker else ""
    raise AssertionError(f"{have} of {n} records in {topic} after {WAIT_S}s\n{tail}")


def check_lines(records: list[dict], hosts: int, per_host: int, exactly_once: bool = True):
    """Each host's `seq=H:I` lines: all there, in order within its one partition."""
    seen: dict[int, list[int]] = {h: [] for h in range(hosts)}
    partitions: dict[int, set[int]] = {h: set() for h in range(hosts)}
    for r in records:
        payload = r["payload"] or ""
        at = payload.find("seq=")
        assert at >= 0, payload
        host, i = payload[at + 4:].split(" ", 1)[0].split(":")
        host, i = int(host), int(i)
        assert r["key"] == f"host{host}", (r["key"], payload)
        seen[host].append(i)
        partitions[host].add(r["partition"])
    for h in range(hosts):
        assert len(partitions[h]) == 1, f"host{h} spread over partitions {partitions[h]}"
        got = seen[h]
        if exactly_once:
            assert got == list(range(per_host)), f"host{h}: {len(got)} lines, first bad at " \
                f"{next((k for k, (a, b) in enumerate(zip(got, range(per_host))) if a != b), None)}"
        else:
            assert set(got) == set(range(per_host)), f"host{h}: missing {per_host - len(set(got))}"
            # Resent after a crash, a line may come twice, but never out of order apart from
            # the resent run: the first occurrence of each line keeps the host's order.
            firsts = list(dict.fromkeys(got))
            assert firsts == sorted(firsts)


def headers(record: dict) -> dict:
    h = record.get("headers") or []
    return dict(zip(h[0::2], h[1::2]))


def lines_5424(hosts: int, per_host: int, app: str = "app"):
    """RFC 5424 lines, hosts interleaved, `seq=H:I` in each message."""
    for i in range(per_host):
        for h in range(hosts):
            yield (f"<134>1 2026-11-30T12:00:00.000Z host{h} {app} {1000 + h} ID{h} "
                   f"[meta@1 k=\"v\"] seq={h}:{i} payload").encode()


def test_logger_udp_and_tcp_lines_arrive_once_in_order(ingest, tmp_path):
    # Proves util-linux logger over TCP (octet counting and newline framing) and UDP lands
    # every line once, in order, with the documented key, value and headers.
    b, ports = ingest
    n = 200
    for transport, flags in [("tcp-octet", ["-T", "--octet-count"]), ("tcp-nl", ["-T"]),
                             ("udp", ["-d"])]:
        src = tmp_path / f"{transport}.txt"
        src.write_text("".join(f"seq=0:{i} {transport}\n" for i in range(n)))
        port = ports["udp"] if transport == "udp" else ports["tcp"]
        subprocess.run(["logger", "-n", "127.0.0.1", "-P", str(port), *flags, "--rfc5424",
                        "-t", "loggertest", "--id=4242", "-p", "local0.info", "-f", str(src)], check=True, timeout=60)
        # UDP has no back-pressure: give the broker a moment per path so loopback drops
        # cannot happen in the socket buffer.
        time.sleep(0.5)
    records = wait_count(b.bootstrap, "syslog", 3 * n, b)
    assert len(records) == 3 * n
    by_transport: dict[str, list[int]] = {}
    for r in records:
        seq, transport = r["payload"].split("seq=0:", 1)[1].split(" ")
        by_transport.setdefault(transport, []).append(int(seq))
    for transport, seqs in by_transport.items():
        assert seqs == list(range(n)), transport
    r = records[0]
    # logger writes this machine's hostname: the key, the same for every line.
    assert r["key"] and r["payload"].split(" ")[2] == r["key"]
    assert len({x["key"] for x in records}) == 1 and len({x["partition"] for x in records}) == 1
    assert r["payload"].startswith("<134>1 ")
    h = headers(r)
    assert h["facility"] == "local0" and h["severity"] == "info"
    assert h["app-name"] == "loggertest" and h["procid"] == "4242"
    assert h["sender"].startswith("127.0.0.1:")
    counters = stats(ports)
    assert counters["syslog_messages"] == 3 * n and counters["udp_dropped"] == 0


def test_malformed_lines_are_kept_and_counted(ingest):
    # Proves a line that is not syslog is stored with a parse-error header, keyed by the
    # sender's address, and counted.
    b, ports = ingest
    with socket.create_connection(("127.0.0.1", ports["tcp"])) as s:
        s.sendall(b"not syslog at all\n<13>1 - host0 a - - - seq=0:0 ok\n")
    records = wait_count(b.bootstrap, "syslog", 2, b)
    bad = [r for r in records if "parse-error" in headers(r)]
    assert len(bad) == 1 and bad[0]["payload"] == "not syslog at all"
    assert bad[0]["key"] == "127.0.0.1"
    assert stats(ports)["syslog_malformed"] == 1


def test_http_produce_answers_durable_offsets(ingest):
    # Proves POST /topics/{topic} with lines and with Kafka REST JSON records answers each
    # record's partition and offset, and a consumer group reads exactly those records.
    b, ports = ingest
    url = f"http://127.0.0.1:{ports['http']}/topics/http-logs"

    def post(body: bytes, ctype: str) -> dict:
        req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype})
        return json.loads(urllib.request.urlopen(req, timeout=60).read())

    answer = post(b"one\ntwo\nthree\n", "text/plain")
    offsets = answer["offsets"]
    assert len(offsets) == 3 and all(o["error_code"] is None for o in offsets)
    assert len({o["partition"] for o in offsets}) == 1
    assert [o["offset"] for o in offsets] == sorted(o["offset"] for o in offsets)
    body = json.dumps({"records": [
        {"key": "k1", "value": "v1", "headers": {"h": "x"}},
        {"key": "k2", "value": "v2", "partition": 3}]}).encode()
    answer = post(body, "application/json")
    assert answer["offsets"][1]["partition"] == 3

    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "http-readers",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["http-logs"])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value(), m.headers()))
    c.close()
    assert sorted(v for _, v, _ in got) == [b"one", b"three", b"two", b"v1", b"v2"]
    assert (b"k1", b"v1", [("h", b"x")]) in got


def test_keyless_lines_on_a_compacted_topic_fail_alone(ingest):
    # Proves that on a compacted topic each keyless record is refused on its own (the
    # partition refuses keyless records with INVALID_RECORD) while the keyed records of the
    # same HTTP request, batched with them, land and are readable.
    from confluent_kafka.admin import AdminClient, NewTopic
    b, ports = ingest
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    fut = admin.create_topics([NewTopic("compacted-logs", 1, 1,
                                        config={"cleanup.policy": "compact"})])
    fut["compacted-logs"].result(30)
    wait_for_topic(b, "compacted-logs")
    body = json.dumps({"records": [
        {"key": "k1", "value": "v1", "partition": 0},
        {"value": "no key", "partition": 0},
        {"key": "k2", "value": "v2", "partition": 0}]}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{ports['http']}/topics/compacted-logs",
                                 data=body, headers={"Content-Type": "application/json"})
    # A request with any failed record answers 500, with every record's outcome in the body.
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(req, timeout=60)
    assert failed.value.code == 500
    offsets = json.loads(failed.value.read())["offsets"]
    assert offsets[0]["error_code"] is None and offsets[2]["error_code"] is None, offsets
    assert offsets[2]["offset"] == offsets[0]["offset"] + 1
    assert offsets[1]["error_code"] is not None
    assert "without key" in offsets[1]["error"], offsets[1]

    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compacted-readers",
                  "enable.auto.commit": False})
    c.assign([TopicPartition("compacted-logs", 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append((m.key(), m.value()))
    c.close()
    assert got == [(b"k1", b"v1"), (b"k2", b"v2")]


def start_rsyslog(tmp_path: Path, name: str, action: str) -> tuple[subprocess.Popen, int]:
    """rsyslogd in the foreground with its own config: an imtcp input on a free port and
    `action` as its only output."""
    if shutil.which("rsyslogd") is None:
        pytest.skip("rsyslog is not installed (.ci/run installs it)")
    work = tmp_path / f"rsyslog-{name}"
    work.mkdir()
    port = free_port()
    conf = work / "rsyslog.conf"
    conf.write_text(f"""
global(workDirectory="{work}" maxMessageSize="64k")
# One worker: with more, rsyslog itself may hand batches to the output out of order.
main_queue(queue.workerThreads="1")
module(load="imtcp")
input(type="imtcp" address="127.0.0.1" port="{port}")
{action}
""")
    proc = subprocess.Popen(["rsyslogd", "-n", "-f", str(conf), "-i", str(work / "pid")],
                            stdout=open(work / "out.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    return listening(proc, port, work / "out.log")


def listening(proc: subprocess.Popen, port: int, log: Path) -> tuple[subprocess.Popen, int]:
    """Waits until the sender `proc` accepts on `port`; kills it and raises with its log if
    it exits or does not within 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(log.read_text())


def feed(port: int, lines) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        buf = bytearray()
        for line in lines:
            buf += line + b"\n"
            if len(buf) > 1 << 16:
                s.sendall(buf)
                buf.clear()
        s.sendall(buf)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_rsyslog_omfwd_tcp(ingest, tmp_path):
    # Proves rsyslog's omfwd over TCP (octet-counted RFC 5424) delivers every line once,
    # each host's lines in order in one partition.
    b, ports = ingest
    proc, port = start_rsyslog(tmp_path, "omfwd", f"""
action(type="omfwd" target="127.0.0.1" port="{ports['tcp']}" protocol="tcp"
       TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format")
""")
    try:
        per_host = LINES // HOSTS
        feed(port, lines_5424(HOSTS, per_host))
        records = wait_count(b.bootstrap, "syslog", per_host * HOSTS, b)
        check_lines(records, HOSTS, per_host)
        h = headers(records[0])
        assert h["app-name"] == "app" and h["facility"] == "local0"
    finally:
        stop(proc)


def need_rsyslog_module(name: str) -> None:
    if shutil.which("rsyslogd") and not Path(f"/usr/lib/x86_64-linux-gnu/rsyslog/{name}.so").exists():
        pytest.skip(f"rsyslog's {name} is not installed (.ci/run installs it)")


def kill9_midstream_then_check(b, topic: str, port: int) -> None:
    """Feeds the lines to the sender listening on `port`, kills the broker with SIGKILL once
    some (not all) are in `topic`, restarts it, and checks that every line arrives (at least
    once, each host's lines in order): what the sender was not told is durable, it resends."""
    per_host = LINES // HOSTS
    feed(port, lines_5424(HOSTS, per_host))
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if count(b.bootstrap, topic) >= min(1000, per_host * HOSTS // 10):
            break
        time.sleep(0.2)
    b.kill9()
    b.start()
    records = wait_count(b.bootstrap, topic, per_host * HOSTS, b)
    check_lines(records, HOSTS, per_host, exactly_once=False)


def test_rsyslog_omrelp_survives_broker_kill9(ingest, tmp_path):
    # Proves RELP's promise end to end: rsyslog's omrelp sends, the broker is killed with
    # SIGKILL mid-stream and restarted, and every line is in the topic afterwards (a line
    # the broker never answered is sent again: at least once, order kept per host).
    b, ports = ingest
    need_rsyslog_module("omrelp")
    proc, port = start_rsyslog(tmp_path, "omrelp", f"""
module(load="omrelp")
action(type="omrelp" target="127.0.0.1" port="{ports['relp']}"
       template="RSYSLOG_SyslogProtocol23Format"
       action.resumeRetryCount="-1" action.resumeInterval="1"
       queue.type="LinkedList" queue.size="1000000")
""")
    try:
        kill9_midstream_then_check(b, "syslog", port)
    finally:
        stop(proc)


def create_topic(b, topic: str) -> None:
    """Creates `topic` (auto-create on metadata, the broker's 4 partitions) and waits for it."""
    subprocess.run(["kcat", "-b", b.bootstrap, "-L", "-t", topic], capture_output=True,
                   timeout=30)
    wait_for_topic(b, topic)


def test_rsyslog_omkafka_acks_all_survives_broker_kill9(ingest, tmp_path):
    # Proves rsyslog's Kafka output (omkafka, librdkafka, acks=all) into Strata: the broker
    # is killed with SIGKILL mid-stream and restarted, and every line is in the topic after
    # (librdkafka retries what was not acknowledged: at least once, order kept per host).
    b, ports = ingest
    need_rsyslog_module("omkafka")
    create_topic(b, "rsyslog-kafka")
    proc, port = start_rsyslog(tmp_path, "omkafka", f"""
module(load="omkafka")
template(name="line" type="string" string="%rawmsg%")
template(name="host" type="string" string="%hostname%")
action(type="omkafka" broker=["{b.bootstrap}"] topic="rsyslog-kafka" template="line"
       key="host" dynaKey="on" partitions.auto="on"
       confParam=["acks=all", "message.timeout.ms=0", "retry.backoff.ms=200",
                  "enable.idempotence=false", "max.in.flight.requests.per.connection=1",
                  "compression.codec=lz4"]
       action.resumeRetryCount="-1" resubmitOnFailure="on"
       queue.type="LinkedList" queue.size="1000000")
""")
    try:
        kill9_midstream_then_check(b, "rsyslog-kafka", port)
    finally:
        stop(proc)


def syslog_ng_root() -> Path:
    """The tree tests/fetch-syslog-ng.sh unpacks syslog-ng into (same default)."""
    base = os.environ.get("STRATA_SYSLOG_NG_ROOT") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata-ci/syslog-ng")
    return Path(base) / "root"


def start_syslog_ng(tmp_path: Path, name: str, destination: str) -> tuple[subprocess.Popen, int]:
    """syslog-ng from its unpacked tree, in the foreground, with its own config, module path,
    pid, control socket and persist file in the test's temp dir: a TCP source on a free port
    (RFC 5424 lines, newline-framed) and `destination` as its only output, under flow
    control (the source stops reading when the destination's queue is full: nothing is
    dropped)."""
    root = syslog_ng_root()
    binary = root / "usr/sbin/syslog-ng"
    if not binary.exists():
        pytest.skip(f"syslog-ng is not unpacked in {root} (.ci/run runs tests/fetch-syslog-ng.sh)")
    work = tmp_path / f"syslog-ng-{name}"
    work.mkdir()
    port = free_port()
    conf = work / "syslog-ng.conf"
    conf.write_text(f"""@version: 3.38
options {{ keep-hostname(yes); threaded(yes); stats-freq(0); log-fifo-size(200000); }};
source s_in {{ network(transport("tcp") ip("127.0.0.1") port({port}) log-iw-size(100000)
                       flags(syslog-protocol, store-raw-message)); }};
destination d_out {{ {destination} }};
log {{ source(s_in); destination(d_out); flags(flow-control); }};
""")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(
        str(root / d) for d in ["usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib/syslog-ng"])
    proc = subprocess.Popen(
        [str(binary), "-F", "-e", "--no-caps", "-f", str(conf),
         f"--module-path={root}/usr/lib/syslog-ng/3.38", f"--pidfile={work}/pid",
         f"--control={work}/ctl", f"--persist-file={work}/persist"],
        env=env, stdout=open(work / "out.log", "wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    return listening(proc, port, work / "out.log")


@pytest.mark.parametrize("driver", ["network", "syslog"])
def test_syslog_ng_network_and_syslog_destinations(ingest, tmp_path, driver):
    # Proves syslog-ng's network() destination (RFC 3164 lines, newline-framed TCP) and its
    # syslog() destination (RFC 5424, octet-counted TCP) deliver every line once, each
    # host's lines in order in one partition, keyed by the hostname the line carries.
    b, ports = ingest
    proc, port = start_syslog_ng(
        tmp_path, driver, f'{driver}("127.0.0.1" port({ports["tcp"]}) transport("tcp"));')
    try:
        per_host = LINES // HOSTS
        feed(port, lines_5424(HOSTS, per_host))
        records = wait_count(b.bootstrap, "syslog", per_host * HOSTS, b)
        check_lines(records, HOSTS, per_host)
        h = headers(records[0])
        # The value is the line without its framing: syslog() counts a trailing LF in
        # the frame, which is framing too.
        assert not records[0]["payload"].endswith("\n")
        # lines_5424 gives host H the procid 1000 + H; which host's partition read_all
        # returns first is not fixed, so the expected procid comes from the record's key.
        host = int(records[0]["key"].removeprefix("host"))
        assert h["app-name"] == "app" and h["facility"] == "local0"
        assert h["procid"] == str(1000 + host), (h, records[0]["key"])
        assert ("parse-error" in h) is False
    finally:
        stop(proc)


def test_syslog_ng_kafka_destination(ingest, tmp_path):
    # Proves syslog-ng's Kafka destination (kafka-c, librdkafka, acks=all) into Strata:
    # every line once, as received (the raw line), keyed by host, each host's lines in order.
    b, _ = ingest
    create_topic(b, "syslog-ng-kafka")
    proc, port = start_syslog_ng(tmp_path, "kafka", f"""kafka-c(
        bootstrap-servers("{b.bootstrap}") topic("syslog-ng-kafka")
        key("$HOST") message("$RAWMSG")
        config("acks" => "all" "compression.codec" => "lz4" "enable.idempotence" => "false"));""")
    try:
        per_host = LINES // HOSTS
        feed(port, lines_5424(HOSTS, per_host))
        records = wait_count(b.bootstrap, "syslog-ng-kafka", per_host * HOSTS, b)
        check_lines(records, HOSTS, per_host)
        assert records[0]["payload"].startswith("<134>1 2026-11-30T12:00:00.000Z host")
    finally:
        stop(proc)


def closed_by_peer(s: socket.socket, within_s: float) -> float | None:
    """Seconds until the broker closed `s` (EOF or reset), reading whatever it sends; None
    if still open after `within_s`."""
    start = time.monotonic()
    s.settimeout(0.2)
    while time.monotonic() - start < within_s:
        try:
            if s.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def relp_open(s: socket.socket) -> None:
    offers = b"relp_version=0\nrelp_software=test\ncommands=syslog"
    s.sendall(b"1 open %d %s\n" % (len(offers), offers))
    s.settimeout(10)
    assert b" rsp " in s.recv(4096)


def test_silent_connections_are_closed_and_trickled_frames_time_out(ingest_factory):
    # Proves the ingestion connections' deadlines: a TCP, RELP (opened) or HTTP connection
    # with nothing sent is closed after connections_max_idle_ms; one trickling a byte
    # every half second (never idle) but never finishing its frame or request is closed
    # after request_timeout_ms from the frame's first byte; a connection sending whole
    # lines in the same rhythm stays open; each closure is counted.
    # An idle limit of 3 s: the steady sender below, one line per 0.5 s, has 2.5 s of room
    # for a stall of this test's process on a loaded machine before it would look idle.
    b, ports = ingest_factory(STRATA_CONNECTIONS_MAX_IDLE_MS="3000",
                              STRATA_REQUEST_TIMEOUT_MS="6000")
    addr = {k: ("127.0.0.1", ports[k]) for k in ("tcp", "relp", "http")}
    silent = {k: socket.create_connection(a) for k, a in addr.items()}
    relp_open(silent["relp"])
    for kind, s in silent.items():
        took = closed_by_peer(s, 20)
        assert took is not None, f"silent {kind} connection still open"
        s.close()

    trickle = {k: socket.create_connection(a) for k, a in addr.items()}
    relp_open(trickle["relp"])
    partial = {"tcp": b"<13>1 - host0 app - - - never ends",
               "relp": b"2 syslog 900 <13>1 - host0 app - - - never",
               "http": b"POST /topics/trickle HTTP/1.1\r\nContent-Length: 5\r\n"}
    steady = socket.create_connection(addr["tcp"])
    start = time.monotonic()
    open_ = dict(trickle)
    i = 0
    while open_ and time.monotonic() - start < 30:
        for kind, s in list(open_.items()):
            data = partial[kind]
            try:
                s.sendall(data[i:i + 1] if i < len(data) else b"x")
                s.settimeout(0.01)
                if s.recv(4096) == b"":
                    raise ConnectionResetError
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                # Closed: after the partial-frame timeout, never at the idle one.
                assert time.monotonic() - start >= 5.5, kind
                del open_[kind]
        steady.sendall(b"<13>1 - host0 app - - - seq=0:%d steady\n" % i)
        i += 1
        time.sleep(0.5)
    assert not open_, f"trickling connections still open: {list(open_)}"
    assert closed_by_peer(steady, 0.5) is None, "a steady sender was closed"
    steady.close()
    assert stats(ports)["connections_timed_out"] == 6


def test_a_syslog_listener_holds_at_most_syslog_connections_max(ingest_factory):
    # Proves the per-listener bound, across shards: with syslog_connections_max = 6, six
    # TCP senders are held and their lines arrive, a seventh is closed at once and
    # counted, and once one sender leaves a new one is held again.
    b, ports = ingest_factory(STRATA_SYSLOG_CONNECTIONS_MAX="6")
    addr = ("127.0.0.1", ports["tcp"])
    held = [socket.create_connection(addr) for _ in range(6)]
    for i, s in enumerate(held):
        s.sendall(b"<13>1 - host%d app - - - seq=%d:0 held\n" % (i, i))
    wait_count(b.bootstrap, "syslog", 6, b)
    extra = socket.create_connection(addr)
    assert closed_by_peer(extra, 10) is not None, "a seventh connection was held"
    for s in held:
        assert closed_by_peer(s, 0.2) is None
    assert stats(ports)["connections_refused"] == 1
    assert stats(ports)["syslog_connections"] == 6
    held.pop().close()
    deadline = time.monotonic() + 10
    while stats(ports)["syslog_connections"] != 5 and time.monotonic() < deadline:
        time.sleep(0.1)
    again = socket.create_connection(addr)
    assert closed_by_peer(again, 1) is None
    again.sendall(b"<13>1 - host9 app - - - seq=9:0 again\n")
    wait_count(b.bootstrap, "syslog", 7, b)
    for s in held + [again, extra]:
        s.close()
