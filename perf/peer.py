#!/usr/bin/env python3
"""Strata beside Apache Kafka 4.1, in the same run on the same machine (issue 14).

Three brokers run side by side on loopback, each with its data on the same disk:
  strata         `strata serve` with its defaults: every acks=all answer waits for fdatasync
  kafka          Apache Kafka 4.1 as shipped (one KRaft node, tests/kafka/reference_kafka.py):
                 acks come from the page cache, the OS writes back later
  kafka-flush1   the same with `log.flush.interval.messages=1` (the broker-wide
                 `flush.messages=1`): Kafka syncs before it answers, Strata's durability

Figures are interleaved per round (figure 1 on every broker, then figure 2, ...) so machine
drift hits all three alike; the report gives each figure's median over the rounds and the
ratio to each peer. The same client drives every broker: `strata bench` (a generic Kafka
client) for the throughput and open-loop figures, and Kafka's own ProducerPerformance and
EndToEndLatency (kafka-tools 4.1, the Java client) so no figure depends on our client alone.
Machine limits (fio direct-I/O write/read, fdatasync latency) are measured in the same run.
Before every run the page cache is synced and the disk left to go idle (`settle`), so no
broker's run pays for the writeback of the one before it.
Broker CPU is read from /proc (utime + stime of the broker process) around each produce run.

Partition counts (issue 14: "the matrix includes 1 and 1,000 partitions"; "5,000 partitions,
1 KiB acks=all, 4 producers: >= 0.7x the 8-partition figure; >= Kafka"): produce 1 KiB
acks=all from 4 producers (`strata bench`, the flags of perf/partitions_ab.sh) to a topic of
1, 8, 1,000 and 5,000 partitions, every broker alike: create the topic and wait until every
partition has a leader and answers ListOffsets (Kafka takes ~30 s at 5,000; at most
TOPIC_READY_TIMEOUT_S); an untimed run of 4 x max(P, 512) batches, so each producer writes
every partition once (as WARM_EVERY_PARTITION=1 in perf/partitions_ab.sh: no partition's
first write, which creates its files, lands in the measured window) and the JVM is warm at
1 and 8 partitions too; a second untimed run of STEADY_WARM_S (30 s), since Kafka is slow on
a new 1,000-partition topic for its first ~25 s; wait until no broker has a deleted log left
to unlink (Kafka unlinks a deleted topic's files 60 s after the delete,
log.segment.delete.delay.ms as shipped, i.e. in another broker's run otherwise); settle; the
measured run (2 s warm-up, then --seconds); delete the topic. Broker CPU per GB counts the
measured run's 2 s warm-up too, as in the other figures. The report adds a table with each
broker's ratio to its own 8-partition figure (1,000/8 and 5,000/8), Strata's ratio to each
peer, CPU per GB, p99 and the descriptors each broker had open. Open files: the brokers
inherit a raised RLIMIT_NOFILE (OPEN_FILES_MAX where this process may raise the hard limit,
else the hard limit), since Kafka keeps every partition's active segment open. `--figures "4
producers"` runs only these four ("acks=all" now selects them too); they take ~18 minutes a
round at --seconds 5.

Usage: perf/peer.py [--rounds N] [--seconds S] [--data-dir DIR] [--out DIR] [--quick]
       (also `perf/run.sh --peer kafka [same options]`)
Needs: target/release/strata (or STRATA_BIN), tests/kafka/lib (tests/fetch-jars.sh kafka),
fio (installed from Debian's packages if missing), util-linux `fincore` (to show the page
cache was emptied before the cold-read figure). `--figures TEXT` runs only the figures whose
title contains TEXT, or one of several texts separated by `|` (`--figures "acks=all, 16|open
loop"`: the closed-loop figure whose rate the open-loop one halves, and that one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "kafka"))
from reference_kafka import ReferenceKafka, free_port  # noqa: E402

BIN = Path(os.environ.get("STRATA_BIN", ROOT / "target" / "release" / "strata"))
RUN_CLASS = ROOT / "tests" / "kafka" / "run-class.sh"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# The reference broker's heap: Kafka's scripts ship with 1 GiB; Kafka's operations docs run
# production brokers with 6 GiB. The machine has 24 GiB; 4 GiB keeps GC out of the figures.
KAFKA_HEAP = os.environ.get("STRATA_PEER_KAFKA_HEAP", "4g")
BENCH_TIMEOUT_S = 600
# Java tools' client heap (ProducerPerformance buffers up to buffer.memory = 32 MiB).
TOOL_HEAP = "-Xmx1g"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process, in seconds (fields 14 and 15 of /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Strata:
    name = "strata"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_file = open(self.workdir / "strata.log", "ab")
        self.proc = subprocess.Popen([str(BIN), "serve", "--listen", self.bootstrap,
                                      "--data-dir", str(self.workdir / "data")],
                                     stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"strata exited ({self.proc.returncode}); see {self.workdir}/strata.log")
            if subprocess.run([str(BIN), "topic", "list", "--bootstrap", self.bootstrap],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError("strata did not answer within 60 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def make_cold(self) -> dict:
        """Nothing of the log in memory: Strata reads with O_DIRECT, so only its tail cache
        holds data, and a restart empties it. The page cache is emptied as for Kafka all the
        same, so the two are treated alike (it holds only small state files here)."""
        self.stop()
        cache = evict_page_cache(self.workdir / "data")
        self.start()
        return cache


class Kafka:
    def __init__(self, name: str, workdir: Path, overrides: dict[str, str]):
        self.name = name
        self.ref = ReferenceKafka(workdir, overrides=overrides, heap=KAFKA_HEAP)

    @property
    def bootstrap(self) -> str:
        return self.ref.bootstrap

    @property
    def pid(self) -> int:
        assert self.ref.proc is not None
        return self.ref.proc.pid

    @property
    def data_dir(self) -> Path:
        return self.ref.data_dir

    def start(self) -> None:
        self.ref.start()

    def stop(self) -> None:
        self.ref.stop()

    def make_cold(self) -> dict:
        """Kafka's data cache is the page cache. Restart it (as Strata is restarted) and, while
        it is down, evict its log files' pages: the read after it then comes from the disk."""
        self.stop()
        cache = evict_page_cache(self.ref.data_dir)
        self.start()
        return cache


def resident_bytes(files: list[Path]) -> int:
    """Bytes of `files` in the page cache now (util-linux `fincore`, which asks mincore(2))."""
    total = 0
    for i in range(0, len(files), 200):
        r = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES",
                            *map(str, files[i:i + 200])], capture_output=True, text=True)
        total += sum(int(x) for x in r.stdout.split() if x.isdigit())
    return total


def evict_page_cache(data_dir: Path) -> dict:
    """Drops every cached page of the files under `data_dir`. `/proc/sys/vm/drop_caches` is
    refused in this VM, but POSIX_FADV_DONTNEED on a file whose dirty pages were written back
    (fsync first) drops its clean pages for any process that can open it, so this works
    without that privilege and touches only the broker being measured. Returns the resident
    bytes before and after, which the report shows: a cold figure read from memory would
    otherwise look like a fast disk."""
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    before = resident_bytes(files)
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # removed meanwhile (a deleted segment): nothing of it to read back
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    after = resident_bytes(files)
    log(f"page cache of {data_dir}: {before / 1e6:,.1f} MB resident before eviction, "
        f"{after / 1e6:,.1f} MB after")
    return {"cache_resident_before_bytes": before, "cache_resident_after_bytes": after}


def strata_bench(broker, label: str, args: list[str], commands: list[str]) -> dict:
    cmd = [str(BIN), "bench", *args, "--bootstrap", broker.bootstrap, "--json", "--label", label]
    commands.append(" ".join(cmd).replace(str(ROOT) + "/", ""))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    if r.returncode != 0:
        return {"label": label, "failed": True, "error": (r.stderr or r.stdout)[-300:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def java_tool(args: list[str], commands: list[str]) -> str:
    commands.append(" ".join(["tests/kafka/run-class.sh", *args]))
    env = dict(os.environ, KAFKA_HEAP_OPTS=TOOL_HEAP, KAFKA_LOG_LEVEL="WARN")
    r = subprocess.run([str(RUN_CLASS), *args], capture_output=True, text=True, env=env,
                       timeout=BENCH_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({r.returncode}): {r.stderr[-500:]}")
    return r.stdout


def create_topic(broker, topic: str, partitions: int) -> None:
    subprocess.run([str(BIN), "topic", "create", topic, "--partitions", str(partitions),
                    "--bootstrap", broker.bootstrap], capture_output=True, timeout=60)


def delete_topic(broker, topic: str) -> None:
    subprocess.run([str(BIN), "topic", "delete", topic, "--bootstrap", broker.bootstrap],
                   capture_output=True, timeout=60)
    time.sleep(1)  # Kafka deletes asynchronously; let the files go before the next figure


def create_topic_ready(broker, topic: str, partitions: int, timeout_s: float) -> float:
    """Creates `topic` and waits until every partition has a leader and answers ListOffsets
    (`strata topic describe` shows a leader and a numeric log end offset on each line):
    Kafka applies a 5,000-partition topic's metadata and creates its logs for a while after
    CreateTopics returns. Returns the seconds it took; RuntimeError after `timeout_s`."""
    started = time.monotonic()
    subprocess.run([str(BIN), "topic", "create", topic, "--partitions", str(partitions),
                    "--bootstrap", broker.bootstrap], capture_output=True, timeout=timeout_s)
    ready = 0
    while time.monotonic() - started < timeout_s:
        r = subprocess.run([str(BIN), "topic", "describe", topic, "--bootstrap", broker.bootstrap],
                           capture_output=True, text=True, timeout=timeout_s)
        lines = [line for line in r.stdout.splitlines() if line.startswith("\tPartition: ")]
        ready = sum(1 for line in lines
                    if re.search(r"\tLeader: \d+\t", line) and re.search(r"\tLogEndOffset: \d+", line))
        if r.returncode == 0 and ready == partitions:
            return time.monotonic() - started
        time.sleep(1)
    raise RuntimeError(f"{topic}: {ready} of {partitions} partitions ready after {timeout_s:.0f} s")


# A deleted topic's files go later: Kafka renames each log `...-delete` and unlinks it
# `log.segment.delete.delay.ms` (60 s as shipped) afterwards, Strata on a removal thread.
DELETIONS_WAIT_MAX_S = 120


def pending_deletions(brokers) -> int:
    """Logs renamed `-delete` (both brokers' marker for a deleted log not yet removed) in the
    brokers' data directories (both keep every partition's directory at the top)."""
    return sum(1 for b in brokers for name in os.listdir(b.data_dir) if name.endswith("-delete"))


def wait_deletions(brokers) -> None:
    """Waits (at most DELETIONS_WAIT_MAX_S) until no broker has a deleted log left to unlink,
    so no deletion of an earlier figure's data (GBs freed with `discard`) lands in a
    measured run; logs the wait."""
    started = time.monotonic()
    left = pending_deletions(brokers)
    while left and time.monotonic() - started < DELETIONS_WAIT_MAX_S:
        time.sleep(1)
        left = pending_deletions(brokers)
    if time.monotonic() - started > 1 or left:
        log(f"  waited {time.monotonic() - started:.0f} s for deleted logs to be removed; {left} left")


def open_files(pid: int) -> tuple[int, int]:
    """Descriptors open in process `pid` now, and its soft RLIMIT_NOFILE."""
    count = len(os.listdir(f"/proc/{pid}/fd"))
    limit = -1
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            limit = int(line.split()[3])
    return count, limit


# Open files for every broker: Kafka keeps each partition's active segment open (and maps its
# two indexes), so 5,000 partitions take 5,000+ descriptors. Set in this process before the
# brokers start, so all three inherit the same limit (the JVM and Strata raise their soft
# limit to the hard one themselves).
OPEN_FILES_MAX = 200_000


def raise_open_files_limit() -> tuple[int, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(hard, OPEN_FILES_MAX) if hard != resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))  # raising the hard limit needs root
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def dirty_mb() -> float:
    """The kernel's dirty page cache, MB (/proc/meminfo `Dirty:`)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) / 1024
    return 0.0


def disk_sectors(read: bool = True) -> int:
    """Sectors written (and, with `read`, read) so far by the machine's disk(s)
    (/proc/diskstats fields 10 and 6)."""
    total = 0
    with open("/proc/diskstats") as f:
        for line in f:
            p = line.split()
            if p[2] in ("vda", "sda", "nvme0n1"):
                total += int(p[9]) + (int(p[5]) if read else 0)
    return total


def settle() -> None:
    """Starts a run with nothing of the previous one still reaching the disk: Kafka as shipped
    leaves its produced GBs dirty in the page cache, and the kernel writes them back ~30 s
    later, i.e. during the next broker's run, whose fsyncs then queue behind them (seen: a
    Strata open-loop p99 of 650-840 ms right after Kafka's runs, 11 ms after its own). So:
    `sync`, then wait (at most 30 s) until the disk moves less than 1 MiB a second for 2 s;
    the idle brokers' own periodic checkpoints stay below that. Logs what was pending."""
    dirty = dirty_mb()
    started = time.monotonic()
    os.sync()
    quiet, prev = 0, disk_sectors()
    while quiet < 4 and time.monotonic() - started < 30:
        time.sleep(0.5)
        cur = disk_sectors()
        quiet = quiet + 1 if cur - prev < 1024 else 0  # 1024 sectors = 512 KiB per 0.5 s
        prev = cur
    log(f"  settle: {dirty:,.0f} MB dirty before sync, disk quiet after {time.monotonic() - started:.1f} s")


# ------------------------------------------------------------------ figures
# Each takes (broker, round, ctx) and returns a dict of named values (or {"failed": ...}).

def with_cpu(broker, run) -> dict:
    before = cpu_seconds(broker.pid)
    result = run()
    used = cpu_seconds(broker.pid) - before
    gb = result.get("bytes", 0) / 1e9
    if gb > 0:
        result["broker_cpu_s_per_gb"] = round(used / gb, 3)
    return result


def fig_produce_1k_all(broker, rnd, ctx) -> dict:
    topic = f"p1k-{rnd}"
    r = with_cpu(broker, lambda: strata_bench(broker, f"{broker.name} produce 1KiB acks=all", [
        "produce", "--topic", topic, "--partitions", "16", "--record-size", "1024", "--producers", "8",
        "--acks", "all", "--warmup", "2", "--duration", str(ctx["seconds"])], ctx["commands"]))
    delete_topic(broker, topic)
    return r


def fig_produce_100_acks1(broker, rnd, ctx) -> dict:
    topic = f"p100-{rnd}"
    r = with_cpu(broker, lambda: strata_bench(broker, f"{broker.name} produce 100B acks=1", [
        "produce", "--topic", topic, "--partitions", "16", "--record-size", "100", "--producers", "8",
        "--acks", "1", "--warmup", "2", "--duration", str(ctx["seconds"])], ctx["commands"]))
    delete_topic(broker, topic)
    return r


def fig_open_loop(broker, rnd, ctx) -> dict:
    """acks=all at a fixed rate: half of what Strata reached closed loop in this round (the
    same offered load for every broker)."""
    rate = ctx.get("open_loop_rate")
    if not rate:
        return {"failed": True, "error": "no Strata closed-loop rate this round"}
    topic = f"ol-{rnd}"
    r = strata_bench(broker, f"{broker.name} acks=all at {rate} rec/s", [
        "produce", "--topic", topic, "--partitions", "16", "--record-size", "1024", "--producers", "8",
        "--acks", "all", "--rate", str(rate), "--warmup", "2", "--duration", str(ctx["seconds"])],
        ctx["commands"])
    r["offered_rate"] = rate
    delete_topic(broker, topic)
    return r


# The partition-count matrix (issue 14: "the matrix includes 1 and 1,000 partitions";
# "5,000 partitions, 1 KiB acks=all, 4 producers: >= 0.7x the 8-partition figure; >= Kafka").
PARTITION_COUNTS = (1, 8, 1_000, 5_000)
# Topic creation, until every partition has a leader: Kafka at 5,000 partitions takes a while.
TOPIC_READY_TIMEOUT_S = 300
# `strata bench produce` sends one batch of 128 records (128 KiB of 1 KiB values) per request,
# producer i's k-th request to partition (i + k) mod P, every run starting at partition 0: so
# 4 x P batches have each of the 4 producers write every partition once.
RECORDS_PER_BATCH = 128
PARTITION_PRODUCERS = 4
# The untimed run sends at least this many batches per producer (64 MiB of values each), so
# at 1 and 8 partitions it also warms the brokers up (Kafka's JIT) as it does at 1,000+.
WARM_BATCHES_PER_PRODUCER_MIN = 512
# Then a second untimed run of this many seconds, for every broker and count alike: Kafka on a
# new 1,000-partition topic ran at ~12 MB/s for at least its first 2 GB / 25 s and then at
# ~400 MB/s (perf/RESULTS.md, "Partition counts beside Apache Kafka"), so without it the figure
# measured Kafka's start-up phase, not its steady state.
STEADY_WARM_S = 30


def partitions_title(count: int) -> str:
    return (f"produce 1 KiB acks=all, {count:,} partition{'s' if count != 1 else ''}, "
            f"{PARTITION_PRODUCERS} producers (strata bench, every partition written first)")


def untimed_failure(what: str, run: dict) -> dict | None:
    """The figure's failed result if an untimed run before it failed or saw errors: a figure
    measured after a broken warm-up would not be the steady state it claims."""
    if run.get("failed") or run.get("errors"):
        return {"failed": True, "error": f"{what} run: {run.get('error') or run.get('errors')}"}
    return None


def fig_partitions(count: int):
    """1 KiB acks=all from 4 producers to a topic of `count` partitions, in the steady state:
    the topic is created and waited for until every partition has a leader, then an untimed
    run writes every partition (4 x max(`count`, 512) batches; the first write to a partition
    creates its files, which is not what this figure measures; see perf/partitions_ab.sh's
    WARM_EVERY_PARTITION), a second untimed run of STEADY_WARM_S seconds lets a broker that is
    slow on a new topic reach its steady state, earlier deletions are waited for, the disk is
    settled, and the measured run follows (its own 2 s warm-up, then `seconds`). The same
    steps and client for every broker."""
    def fig(broker, rnd, ctx) -> dict:
        topic = f"parts{count}-{rnd}"
        base = ["produce", "--topic", topic, "--partitions", str(count), "--record-size", "1024",
                "--producers", str(PARTITION_PRODUCERS), "--acks", "all"]
        try:
            created_s = create_topic_ready(broker, topic, count, TOPIC_READY_TIMEOUT_S)
            started = time.monotonic()
            warm = strata_bench(broker, f"{broker.name} warm {count} partitions",
                                base + ["--records", str(PARTITION_PRODUCERS * RECORDS_PER_BATCH
                                                         * max(count, WARM_BATCHES_PER_PRODUCER_MIN))],
                                ctx["commands"])
            warm_s = time.monotonic() - started
            if failed := untimed_failure("warm-up", warm):
                return failed
            steady = strata_bench(broker, f"{broker.name} steady warm-up {count} partitions", base + [
                "--warmup", "0", "--duration", str(STEADY_WARM_S)], ctx["commands"])
            if failed := untimed_failure("steady warm-up", steady):
                return failed
            wait_deletions(ctx["brokers"])
            settle()
            r = with_cpu(broker, lambda: strata_bench(broker, f"{broker.name} {count} partitions", base + [
                "--warmup", "2", "--duration", str(ctx["seconds"])], ctx["commands"]))
            r["open_files"], r["open_files_limit"] = open_files(broker.pid)
            r.update({"partitions": count, "topic_ready_s": round(created_s, 1), "warm_s": round(warm_s, 1),
                      "warm_mb_per_sec": warm.get("mb_per_sec"),
                      "steady_warm_mb_per_sec": steady.get("mb_per_sec")})
            log(f"  topic ready after {created_s:.1f} s; warm run {warm_s:.1f} s, then "
                f"{STEADY_WARM_S} s at {steady.get('mb_per_sec')} MB/s; "
                f"{r['open_files']:,} files open (limit {r['open_files_limit']:,})")
            return r
        finally:
            delete_topic(broker, topic)
    return fig


PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg "
                       r"latency, ([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th")


def last_perf_line(out: str):
    """The final summary line of ProducerPerformance's output (its match), or None."""
    m = None
    for m in PERF_LINE.finditer(out):
        pass
    return m


def fig_java_producer_perf(broker, rnd, ctx) -> dict:
    """Kafka's ProducerPerformance (the Java client), 1 KiB acks=all, as fast as it goes."""
    topic = f"jpp-{rnd}"
    create_topic(broker, topic, 16)
    records = ctx["java_records"]

    def run() -> dict:
        out = java_tool(["org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                         "--num-records", str(records), "--record-size", "1024", "--throughput", "-1",
                         "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all",
                         "linger.ms=5", "batch.size=131072"], ctx["commands"])
        m = last_perf_line(out)
        if not m:
            return {"failed": True, "error": out[-300:]}
        # The tool's MB/sec is MiB of record values per second; report 10^6 bytes like bench.
        rps = float(m.group(2))
        return {"records": int(m.group(1)), "records_per_sec": rps, "mb_per_sec": round(rps * 1024 / 1e6, 3),
                "bytes": int(m.group(1)) * 1024,
                "latency_ms": {"avg": float(m.group(4)), "p50": int(m.group(6)), "p99": int(m.group(8)),
                               "max": float(m.group(5))}}
    r = with_cpu(broker, run)
    delete_topic(broker, topic)
    return r


def fig_java_e2e(broker, rnd, ctx) -> dict:
    """Kafka's EndToEndLatency: one record at a time, acks=all, produce to consume."""
    topic = f"e2e-{rnd}"
    create_topic(broker, topic, 1)
    out = java_tool(["org.apache.kafka.tools.EndToEndLatency", broker.bootstrap, topic,
                     str(ctx["e2e_records"]), "all", "1024"], ctx["commands"])
    delete_topic(broker, topic)
    avg = re.search(r"Avg latency: ([\d.]+) ms", out)
    pct = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99.9th = ([\d.]+)", out)
    if not (avg and pct):
        return {"failed": True, "error": out[-300:]}
    return {"latency_ms": {"avg": float(avg.group(1)), "p50": float(pct.group(1)),
                           "p99": float(pct.group(2)), "p999": float(pct.group(3))}}


def fill_and_make_cold(broker, topic: str, ctx) -> dict:
    """Writes the cold-read figures' data (2 partitions of 1 KiB records, strata bench) and
    empties the broker's caches; returns the failed fill, or the page-cache residency."""
    fill = strata_bench(broker, f"{broker.name} fill", [
        "produce", "--topic", topic, "--partitions", "2", "--record-size", "1024", "--producers", "4",
        "--acks", "1", "--records", str(ctx["cold_records"])], ctx["commands"])
    if fill.get("failed"):
        return fill
    return broker.make_cold()


def fig_cold_read(broker, rnd, ctx) -> dict:
    """Consume 2 partitions from disk after the broker's caches were emptied (strata bench)."""
    topic = f"cold-{rnd}"
    cache = fill_and_make_cold(broker, topic, ctx)
    if cache.get("failed"):
        return cache
    r = strata_bench(broker, f"{broker.name} cold read", [
        "consume", "--topic", topic, "--consumers", "2", "--from", "earliest",
        "--records", str(ctx["cold_records"])], ctx["commands"])
    r.update(cache)
    delete_topic(broker, topic)
    return r


def fig_cold_read_java(broker, rnd, ctx) -> dict:
    """The same cold read through Kafka's ConsumerPerformance (the Java consumer, one
    consumer in a group), so the figure does not rest on our client alone."""
    topic = f"coldj-{rnd}"
    cache = fill_and_make_cold(broker, topic, ctx)
    if cache.get("failed"):
        return cache
    records = ctx["cold_records"]
    out = java_tool(["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", broker.bootstrap,
                     "--topic", topic, "--messages", str(records), "--timeout", "60000",
                     "--group", f"coldj-{broker.name}-{rnd}"], ctx["commands"])
    delete_topic(broker, topic)
    # One CSV line after the header: start, end, MB, MB.sec, nMsg, nMsg.sec, rebalance.time.ms,
    # fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec. The fetch.* rates leave out the group join.
    rows = [line.split(",") for line in out.splitlines() if line.count(",") >= 9 and line[:1].isdigit()]
    if not rows:
        return {"failed": True, "error": out[-300:]}
    row = [x.strip() for x in rows[-1]]
    consumed, fetch_rps = int(row[4]), float(row[9])
    if consumed < records:
        return {"failed": True, "error": f"ConsumerPerformance read {consumed} of {records} records"}
    # 10^6 bytes of record values per second (the tool's MB are MiB of keys and values).
    r = {"records": consumed, "records_per_sec": fetch_rps, "mb_per_sec": round(fetch_rps * 1024 / 1e6, 3)}
    r.update(cache)
    return r


FIGURES = [
    ("produce 1 KiB acks=all, 16 partitions, 8 connections (strata bench)", "mb_per_sec", "MB/s",
     fig_produce_1k_all),
    ("produce 100 B acks=1, 16 partitions, 8 connections (strata bench)", "records_per_sec", "records/s",
     fig_produce_100_acks1),
    ("produce 1 KiB acks=all, Kafka's ProducerPerformance (Java client)", "mb_per_sec", "MB/s",
     fig_java_producer_perf),
    ("open loop acks=all at half Strata's closed-loop rate: p99", "p99_ms", "ms", fig_open_loop),
    ("end to end, Kafka's EndToEndLatency (1 record at a time, acks=all): p99", "p99_ms", "ms",
     fig_java_e2e),
    ("consume cold from disk (after a restart, page cache emptied), 2 partitions", "mb_per_sec", "MB/s", fig_cold_read),
    ("consume cold from disk, Kafka's ConsumerPerformance (Java client), 2 partitions", "mb_per_sec", "MB/s",
     fig_cold_read_java),
    *[(partitions_title(n), "mb_per_sec", "MB/s", fig_partitions(n)) for n in PARTITION_COUNTS],
]
PARTITION_TITLES = {partitions_title(n): n for n in PARTITION_COUNTS}


def value_of(result: dict, key: str):
    if result.get("failed"):
        return None
    if key == "p99_ms":
        if "latency_us" in result and result["latency_us"]:
            return result["latency_us"]["p99"] / 1000
        return (result.get("latency_ms") or {}).get("p99")
    return result.get(key)


# ------------------------------------------------------------------ machine limits
def fio_limits(data_dir: Path, out: Path) -> dict:
    if not shutil.which("fio"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "fio"], capture_output=True)
    f = data_dir / "fio.tmp"
    res = {}

    def fio(name: str, args: list[str]) -> dict:
        r = subprocess.run(["fio", f"--name={name}", f"--filename={f}", "--output-format=json", *args],
                           capture_output=True, text=True)
        (out / f"fio-{name}.json").write_text(r.stdout)
        return json.loads(r.stdout)["jobs"][0]

    log("fio: direct-I/O write and read, 1 MiB, queue depth 8; fdatasync latency at 16 KiB")
    w = fio("write-1m", ["--rw=write", "--bs=1M", "--direct=1", "--size=2G", "--ioengine=io_uring",
                         "--iodepth=8", "--runtime=15", "--end_fsync=1"])
    res["fio_write_mb_s"] = round(w["write"]["bw_bytes"] / 1e6, 1)
    r = fio("read-1m", ["--rw=read", "--bs=1M", "--direct=1", "--size=2G", "--ioengine=io_uring",
                        "--iodepth=8", "--runtime=15"])
    res["fio_read_mb_s"] = round(r["read"]["bw_bytes"] / 1e6, 1)
    s = fio("fdatasync-16k", ["--rw=write", "--bs=16k", "--size=256M", "--fdatasync=1", "--ioengine=sync",
                              "--runtime=10", "--time_based"])
    sync = s.get("sync") or {}
    pct = (sync.get("lat_ns") or {}).get("percentile") or {}
    p99 = pct.get("99.000000")
    res["fdatasync_p99_ms"] = round(p99 / 1e6, 3) if p99 else None
    f.unlink(missing_ok=True)
    return res


# ------------------------------------------------------------------ report
def median_of(runs: list[dict], key: str):
    vals = [v for v in (value_of(r, key) for r in runs) if v is not None]
    return statistics.median(vals) if vals else None


def partitions_report(results: dict, brokers: list[str]) -> list[str]:
    """The partition-count figures side by side: per broker the MB/s, its ratio to the same
    broker's 8-partition figure, the broker CPU per GB and the p99; then Strata's ratio to
    each peer. Medians over the rounds."""
    counts = [(PARTITION_TITLES[t], t) for t in results if t in PARTITION_TITLES]
    if not counts:
        return []
    med = {(n, b): median_of(results[t][b], "mb_per_sec") for n, t in counts for b in brokers}

    def fmt(v, spec: str, suffix: str = "") -> str:
        return "-" if v is None else f"{v:{spec}}{suffix}"

    def div(a, b):
        return a / b if a is not None and b else None
    lines = [f"Partition counts: produce 1 KiB acks=all, {PARTITION_PRODUCERS} producers (strata bench), "
             "every partition written once before the measured run; medians (MB/s; ratio to the "
             "same broker's 8 partitions; broker CPU s per GB; client p99 ms):", ""]
    head = ["partitions", *(f"{b} MB/s" for b in brokers), *(f"{b} / its 8" for b in brokers),
            *(f"strata / {b}" for b in brokers if b != "strata"), *(f"{b} CPU s/GB" for b in brokers),
            *(f"{b} p99 ms" for b in brokers), "client errors + failed runs", "files open (max)"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, t in sorted(counts):
        runs = results[t]
        cells = [f"{n:,}"]
        cells += [fmt(med[(n, b)], ",.1f") for b in brokers]
        cells += [fmt(div(med[(n, b)], med.get((8, b))), ".2f", "x") for b in brokers]
        cells += [fmt(div(med[(n, "strata")], med[(n, b)]), ".2f", "x") for b in brokers if b != "strata"]
        for b in brokers:
            cpu = [r["broker_cpu_s_per_gb"] for r in runs[b] if r.get("broker_cpu_s_per_gb")]
            cells.append(fmt(statistics.median(cpu) if cpu else None, ".2f"))
        cells += [fmt(median_of(runs[b], "p99_ms"), ",.1f") for b in brokers]
        cells.append(" / ".join(str(sum(r.get("errors", 0) or 0 for r in runs[b])
                                    + sum(1 for r in runs[b] if r.get("failed"))) for b in brokers))
        cells.append(" / ".join(f"{max((r.get('open_files', 0) for r in runs[b]), default=0):,}"
                                for b in brokers))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Per run (MB/s, in round order): " + "; ".join(
        f"{n:,} partition{'s' if n != 1 else ''}: " + ", ".join(
            f"{b} " + "/".join(fmt(value_of(r, 'mb_per_sec'), ".0f") for r in results[t][b]) for b in brokers)
        for n, t in sorted(counts)) + ". Topic ready after (s, max): " + "; ".join(
        f"{n:,}: " + ", ".join(f"{b} {max((r.get('topic_ready_s', 0) for r in results[t][b]), default=0)}"
                               for b in brokers) for n, t in sorted(counts)) + ".")
    lines.append("")
    return lines


def report(results: dict, limits: dict, ctx: dict, brokers: list[str], started: str) -> str:
    lines = [f"### Strata beside Apache Kafka 4.1.1 (`perf/run.sh --peer kafka`, {started})", ""]
    lines.append(f"Build {ctx['build']}; {ctx['rounds']} round(s), medians; {ctx['seconds']} s measured per "
                 f"strata-bench run (2 s warm-up); load average at start {ctx['load_start']}, at end "
                 f"{ctx['load_end']}. Machine limits of this run: fio direct write "
                 f"{limits.get('fio_write_mb_s')} MB/s, direct read {limits.get('fio_read_mb_s')} MB/s, "
                 f"fdatasync p99 {limits.get('fdatasync_p99_ms')} ms (16 KiB). Open files limit given to "
                 f"the brokers (soft, hard): {ctx.get('open_files_limit')}.")
    lines.append("")
    head = "| figure | " + " | ".join(brokers) + " | strata / kafka | strata / kafka-flush1 |"
    lines += [head, "|" + "---|" * (len(brokers) + 3)]
    for title, key, unit, _ in FIGURES:
        if title not in results:
            continue  # left out with --figures
        med = {}
        for b in brokers:
            vals = [v for v in (value_of(r, key) for r in results[title][b]) if v is not None]
            med[b] = statistics.median(vals) if vals else None
        cells = [f"{med[b]:,.1f}" if med[b] is not None else "failed" for b in brokers]

        def ratio(peer: str) -> str:
            if med.get("strata") is None or not med.get(peer):
                return "-"
            return f"{med['strata'] / med[peer]:.2f}x"
        lines.append(f"| {title} ({unit}) | " + " | ".join(cells) + f" | {ratio('kafka')} | {ratio('kafka-flush1')} |")
    cpu_rows = []
    for title in results:
        if title in PARTITION_TITLES:
            continue  # in the partition table below
        vals = {b: [r.get("broker_cpu_s_per_gb") for r in results[title][b] if r.get("broker_cpu_s_per_gb")]
                for b in brokers}
        if any(vals.values()):
            cells = [f"{statistics.median(v):.2f}" if v else "-" for v in vals.values()]
            cpu_rows.append(f"| broker CPU s per GB: {title} | " + " | ".join(cells) + " | | |")
    lines += cpu_rows
    lines.append("")
    achieved = []
    for b in brokers:
        runs = [r for r in results.get(FIGURES[3][0], {}).get(b, []) if not r.get("failed")]
        if runs:
            achieved.append(f"{b} {statistics.median(r['records_per_sec'] for r in runs):,.0f}")
    offered = ctx.get("open_loop_rate")
    if achieved and offered:
        lines.append(f"Open loop: offered {offered:,} records/s (last round); achieved (median) "
                     + ", ".join(achieved) + " records/s: a broker below the offered rate was "
                     "saturated, and its p99 is a queue, not a service time.")
        lines.append("")
    cold = [(b, r) for t in results for b in brokers for r in results[t][b]
            if "cache_resident_after_bytes" in r]
    if cold:
        lines.append("Page cache of each broker's data before the cold reads (evicted with "
                     "POSIX_FADV_DONTNEED while it was down; MB resident before -> after): "
                     + ", ".join(f"{b} round {r['round'] + 1} {r['cache_resident_before_bytes'] / 1e6:,.0f}"
                                 f" -> {r['cache_resident_after_bytes'] / 1e6:,.1f}" for b, r in cold) + ".")
        lines.append("")
    lines += partitions_report(results, brokers)
    errors = {b: sum(r.get("errors", 0) or 0 for t in results for r in results[t][b]) for b in brokers}
    failed = {b: sum(1 for t in results for r in results[t][b] if r.get("failed")) for b in brokers}
    lines.append("Errors seen by the clients: " + ", ".join(f"{b} {errors[b]}" for b in brokers)
                 + "; failed runs: " + ", ".join(f"{b} {failed[b]}" for b in brokers) + ".")
    lines.append("")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=int, default=6)
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("PERF_DATA_DIR", "/var/tmp/strata-peer")))
    p.add_argument("--out", type=Path, default=ROOT / "perf" / "out-peer")
    p.add_argument("--quick", action="store_true", help="small runs, to check the harness")
    p.add_argument("--no-limits", action="store_true")
    p.add_argument("--figures", default="",
                   help="run only the figures whose title contains this text, or one of several "
                        "separated by '|' (e.g. 'cold')")
    args = p.parse_args()
    wanted = [t.strip().lower() for t in args.figures.split("|")]
    figures = [f for f in FIGURES if any(t in f[0].lower() for t in wanted)]
    if not figures:
        p.error(f"no figure title contains {args.figures!r}")
    ctx = {"seconds": args.seconds, "rounds": args.rounds, "commands": [],
           "java_records": 300_000 if args.quick else 2_000_000,
           "e2e_records": 1_000 if args.quick else 10_000,
           "cold_records": 200_000 if args.quick else 2_000_000,
           "build": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip(),
           "load_start": os.getloadavg()[0]}
    if args.quick:
        ctx["seconds"] = min(args.seconds, 2)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    shutil.rmtree(args.data_dir, ignore_errors=True)
    args.data_dir.mkdir(parents=True)
    args.out.mkdir(parents=True, exist_ok=True)
    limits = {} if args.no_limits else fio_limits(args.data_dir, args.out)
    brokers = [Strata(args.data_dir / "strata"),
               Kafka("kafka", args.data_dir / "kafka", {}),
               Kafka("kafka-flush1", args.data_dir / "kafka-flush1", {"log.flush.interval.messages": "1"})]
    ctx["brokers"] = brokers
    ctx["open_files_limit"] = raise_open_files_limit()
    log(f"open files limit for the brokers (soft, hard): {ctx['open_files_limit']}")
    results = {title: {b.name: [] for b in brokers} for title, *_ in figures}
    raw = open(args.out / "results.jsonl", "w")
    try:
        for b in brokers:
            log(f"starting {b.name}")
            b.start()
        for rnd in range(args.rounds):
            for title, key, unit, fig in figures:
                for b in brokers:
                    log(f"round {rnd + 1}: {b.name}: {title}")
                    settle()
                    try:
                        r = fig(b, rnd, ctx)
                    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                        r = {"failed": True, "error": str(e)[-300:]}
                    if fig is fig_produce_1k_all and b.name == "strata" and not r.get("failed"):
                        ctx["open_loop_rate"] = int(r["records_per_sec"] / 2)
                    r.update({"figure": title, "broker": b.name, "round": rnd})
                    raw.write(json.dumps(r) + "\n")
                    raw.flush()
                    results[title][b.name].append(r)
                    v = value_of(r, key)
                    log(f"  {'FAILED: ' + r.get('error', '') if v is None else f'{v:,.2f} {unit}'}")
    finally:
        for b in brokers:
            try:
                b.stop()
            except Exception as e:  # a broker that will not stop must not hide the results
                log(f"stopping {b.name}: {e}")
        raw.close()
    ctx["load_end"] = os.getloadavg()[0]
    text = report(results, limits, ctx, [b.name for b in brokers], started)
    (args.out / "commands.txt").write_text("\n".join(dict.fromkeys(ctx["commands"])) + "\n")
    (args.out / "report.md").write_text(text)
    print(text)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
