#!/usr/bin/env python3
"""Group coordinator load time, before and after `__consumer_offsets` is cleaned.

Starts one Strata broker on a fresh data directory with the cleaner off, commits
GROUPS x REQUESTS OffsetCommits of PARTITIONS partitions each (raw OffsetCommit v2,
generation -1: no consumer joins, nothing is consumed), pipelined on one connection, so
GROUPS x REQUESTS x PARTITIONS offsets in all (1,000 x 100 x 10 = 1M by default). Then:

1. restarts the broker (cleaner still off) and times from process start until OffsetFetch
   answers every group with its last offsets ("before cleaning");
2. restarts it with the cleaner on (backoff 200 ms, any dirty ratio) and waits until every
   `__consumer_offsets` partition has cleaned up to its active segment;
3. restarts it once more and times the same ("after cleaning").

Usage: perf/offsets_load.py [--bin target/release/strata] [--groups 1000] [--requests 100]
       [--partitions 10] [--offsets-partitions 50] [--dir /tmp/offsets-load]
Prints one JSON line per phase and a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "clients"))
import kproto  # noqa: E402

API_OFFSET_COMMIT = 8
API_OFFSET_FETCH = 9
API_CREATE_TOPICS = 19
TOPIC = "load"
IN_FLIGHT = 64
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    started: list["Broker"] = []

    def __init__(self, binary: str, data_dir: Path, offsets_partitions: int):
        self.binary = binary
        self.data_dir = data_dir
        self.port = free_port()
        self.offsets_partitions = offsets_partitions
        self.proc: subprocess.Popen | None = None
        self.log_path = data_dir.parent / "broker.log"
        self.log = open(self.log_path, "ab")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, cleaner: bool) -> float:
        env = dict(os.environ)
        env.update({
            "STRATA_OFFSETS_TOPIC_NUM_PARTITIONS": str(self.offsets_partitions),
            "STRATA_LOG_CLEANER_ENABLE": "true" if cleaner else "false",
            "STRATA_LOG_CLEANER_BACKOFF_MS": "200",
            "STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO": "0.01",
            "STRATA_LOG": "info",
        })
        started = time.monotonic()
        Broker.started.append(self)
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", self.bootstrap, "--data-dir", str(self.data_dir),
             "--shards", "1"], env=env, stdout=self.log, stderr=self.log)
        return started

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        self.proc.wait(120)
        self.proc = None


def connect(bootstrap: str, deadline: float) -> socket.socket:
    while True:
        try:
            return kproto.connect(bootstrap, 60)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)


def create_topic(bootstrap: str, partitions: int) -> None:
    body = (struct.pack(">i", 1) + kproto.kstring(TOPIC) + struct.pack(">ihi", partitions, 1, 0)
            + struct.pack(">i", 0) + struct.pack(">i", 30_000) + b"\x00")
    # CreateTopics v2: v1's validate_only after the timeout.
    with connect(bootstrap, time.monotonic() + 30) as s:
        s.sendall(kproto.request(API_CREATE_TOPICS, 2, 1, body))
        kproto.recv_response(s)


def commit_body(group: str, offset: int, partitions: int) -> bytes:
    # OffsetCommit v2: group, generation -1, member "", retention -1, one topic.
    parts = b"".join(struct.pack(">iq", p, offset) + kproto.kstring(None) for p in range(partitions))
    return (kproto.kstring(group) + struct.pack(">i", -1) + kproto.kstring("")
            + struct.pack(">q", -1) + struct.pack(">i", 1) + kproto.kstring(TOPIC)
            + struct.pack(">i", partitions) + parts)


def commit_errors(body: bytes) -> list[int]:
    pos = 0
    (ntopics,) = struct.unpack_from(">i", body, pos)
    pos += 4
    errors = []
    for _ in range(ntopics):
        (n,) = struct.unpack_from(">h", body, pos)
        pos += 2 + n
        (nparts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(nparts):
            _, err = struct.unpack_from(">ih", body, pos)
            pos += 6
            errors.append(err)
    return errors


def commit_all(bootstrap: str, groups: int, requests: int, partitions: int) -> int:
    """Pipelined commits: request r of every group carries offset r + 1. Returns errors."""
    errors = 0
    with connect(bootstrap, time.monotonic() + 30) as s:
        sent = received = 0
        total = groups * requests
        while received < total:
            while sent < total and sent - received < IN_FLIGHT:
                r, g = divmod(sent, groups)
                s.sendall(kproto.request(API_OFFSET_COMMIT, 2, sent,
                                         commit_body(f"group-{g}", r + 1, partitions)))
                sent += 1
            _, body = kproto.recv_response(s)
            errors += sum(1 for e in commit_errors(body) if e != 0)
            received += 1
    return errors


def fetch_body(group: str, partitions: int) -> bytes:
    # OffsetFetch v1: group, one topic, its partitions.
    return (kproto.kstring(group) + struct.pack(">i", 1) + kproto.kstring(TOPIC)
            + struct.pack(">i", partitions) + b"".join(struct.pack(">i", p) for p in range(partitions)))


def fetch_offsets(body: bytes) -> list[tuple[int, int]]:
    pos = 4
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n
    (nparts,) = struct.unpack_from(">i", body, pos)
    pos += 4
    out = []
    for _ in range(nparts):
        _, offset = struct.unpack_from(">iq", body, pos)
        pos += 12
        (mlen,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(mlen, 0)
        (err,) = struct.unpack_from(">h", body, pos)
        pos += 2
        out.append((err, offset))
    return out


def time_to_all_groups(b: Broker, started: float, groups: int, requests: int, partitions: int) -> float:
    """Seconds from `started` until every group's OffsetFetch answers its last offsets."""
    deadline = started + 600
    pending = list(range(groups))
    expected = requests if requests > 0 else -1  # -1: nothing committed
    while pending:
        try:
            with connect(b.bootstrap, deadline) as s:
                while pending:
                    g = pending[0]
                    s.sendall(kproto.request(API_OFFSET_FETCH, 1, g, fetch_body(f"group-{g}", partitions)))
                    _, body = kproto.recv_response(s)
                    answers = fetch_offsets(body)
                    if all(e == 0 and o == expected for e, o in answers) and len(answers) == partitions:
                        pending.pop(0)
                        continue
                    codes = {e for e, _ in answers}
                    if codes & {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR}:
                        time.sleep(0.005)
                        continue
                    raise SystemExit(f"group-{g}: unexpected answer {answers[:3]}")
        except (OSError, kproto.ProtocolError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.005)
    return time.monotonic() - started


def replay_stats(log_path: Path, offset: int) -> tuple[int, float]:
    """From the broker's log since `offset`: the group records replayed, and the seconds from
    the first `__consumer_offsets` partition led to the last "group coordinator loaded"."""
    text = log_path.read_bytes()[offset:].decode(errors="replace")
    first = last = None
    records = 0
    for line in text.splitlines():
        stamp = line.split(" ", 1)[0].rstrip("Z")
        if "leading topic=__consumer_offsets" in line and first is None:
            first = stamp
        m = re.search(r"group coordinator loaded .*records=(\d+)", line)
        if m:
            records += int(m.group(1))
            last = stamp
    if first is None or last is None:
        return records, 0.0
    def t(stamp: str) -> float:
        return datetime.fromisoformat(stamp).timestamp()
    return records, round(t(last) - t(first), 3)


def offsets_dirs(data_dir: Path) -> list[Path]:
    return sorted(data_dir.glob("__consumer_offsets-*"))


def log_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for d in offsets_dirs(data_dir) for f in d.glob("*.log"))


def cleaned_to_active(data_dir: Path) -> bool:
    """Every coordinator partition with a closed segment has a cleaner checkpoint at its
    active segment's base offset (the cleaner never cleans the active segment)."""
    for d in offsets_dirs(data_dir):
        logs = sorted(d.glob("*.log"))
        if len(logs) < 2:
            continue
        active = int(logs[-1].name.split(".")[0])
        cp = d / "cleaner-offset-checkpoint"
        if not cp.exists():
            return False
        raw = cp.read_bytes()
        # state_file's frame: "STS1", u32 length, u32 CRC, then the offset (rkyv i64, LE).
        if len(raw) < 20 or struct.unpack_from("<q", raw, 12)[0] < active:
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "target" / "release" / "strata"))
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--offsets-partitions", type=int, default=50)
    ap.add_argument("--dir", default="/tmp/offsets-load")
    a = ap.parse_args()
    root = Path(a.dir)
    shutil.rmtree(root, ignore_errors=True)
    (root / "data").mkdir(parents=True)
    b = Broker(a.bin, root / "data", a.offsets_partitions)
    commits = a.groups * a.requests * a.partitions

    started = b.start(cleaner=False)
    connect(b.bootstrap, started + 60).close()
    create_topic(b.bootstrap, a.partitions)
    t0 = time.monotonic()
    errors = commit_all(b.bootstrap, a.groups, a.requests, a.partitions)
    commit_s = time.monotonic() - t0
    print(json.dumps({"phase": "commit", "offsets": commits, "requests": a.groups * a.requests,
                      "seconds": round(commit_s, 2), "errors": errors}), flush=True)
    b.stop()

    def timed_restart(phase: str, cleaner: bool) -> float:
        log_from = b.log_path.stat().st_size
        started = b.start(cleaner=cleaner)
        s = time_to_all_groups(b, started, a.groups, a.requests, a.partitions)
        records, replay_s = replay_stats(b.log_path, log_from)
        print(json.dumps({"phase": phase, "log_mib": round(log_bytes(b.data_dir) / 2**20, 1),
                          "records_replayed": records, "replay_seconds": replay_s,
                          "seconds_to_all_groups": round(s, 3)}), flush=True)
        return s

    empty = Broker(a.bin, root / "empty", a.offsets_partitions)
    (root / "empty").mkdir()
    started = empty.start(cleaner=False)
    connect(empty.bootstrap, started + 60).close()
    create_topic(empty.bootstrap, a.partitions)
    empty.stop()
    started = empty.start(cleaner=False)
    baseline = time_to_all_groups(empty, started, a.groups, 0, a.partitions)
    empty.stop()
    print(json.dumps({"phase": "restart of a broker without commits (baseline)",
                      "seconds_to_all_groups": round(baseline, 3)}), flush=True)

    before = timed_restart("restart before cleaning", cleaner=False)
    b.stop()
    started = b.start(cleaner=True)
    t0 = time.monotonic()
    deadline = t0 + 600
    while not cleaned_to_active(b.data_dir):
        if time.monotonic() > deadline:
            raise SystemExit("the cleaner did not finish in 600 s")
        time.sleep(0.5)
    clean_s = time.monotonic() - t0
    print(json.dumps({"phase": "cleaned", "seconds": round(clean_s, 1),
                      "log_mib": round(log_bytes(b.data_dir) / 2**20, 1)}), flush=True)
    b.stop()
    after = timed_restart("restart after cleaning", cleaner=False)
    b.stop()
    print(json.dumps({"summary": {"offsets": commits, "groups": a.groups,
                                  "load_before_s": round(before, 3), "load_after_s": round(after, 3)}}))


if __name__ == "__main__":
    try:
        main()
    finally:
        # A broker left by a failed phase is stopped, not orphaned.
        for b in list(Broker.started):
            if b.proc is not None:
                b.proc.kill()
                b.proc.wait(30)
