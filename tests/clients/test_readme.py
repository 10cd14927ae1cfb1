"""The README, verbatim, on a fresh clone: what a new user runs first.

The test clones this repository (HEAD: committed work only) into a temp dir, starts the broker
from the clone's root with no flags (so the defaults are what is tested: relative `./data`,
127.0.0.1:9092), then runs every command and snippet of README.md's code blocks in the order the
README shows them, checking each one's output. The commands are read from README.md itself, so
the README and this test cannot drift: a README line this test has no check for fails the test
(add its check below), and so does a check whose line left the README.

Then the README's three-node quick start, exactly as written (relative `--data-dir d1` ..., ports
9092-9094 and 9193-9195), followed by the README's cluster commands and a produce/consume round
trip across it.

Either part fails if a broker logs a WARN or ERROR (or panics) or does not exit 0 on SIGTERM.

This is the one test allowed to bind 9092: the README says 9092. It fails (does not skip) when
something else holds the port, since then the README cannot be followed on this machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

import kproto
from harness import REPO_ROOT, strata_bin

COMMAND_TIMEOUT_S = 180.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
# 6514 and 8082: the README's syslog and HTTP ingestion listeners.
README_PORTS = (9092, 9093, 9094, 9193, 9194, 9195, 6514, 8082)

# The README's single-node start command. In a fresh clone it compiles the whole crate (minutes
# on a loaded CI machine) before running `strata serve`; the test runs the binary the suite
# already built (STRATA_BIN) as `strata serve`, from the clone's root and with no flags, which is
# what that cargo command runs.
START_COMMAND = "cargo run --release -- serve"
# The README's restart of that broker with settings (`NAME=VALUE ... cargo run --release --
# serve`): the test stops the running broker (checking its log) and starts `strata serve` with
# those variables.
RESTART_WITH = re.compile(r"^((?:[A-Z_]+=\S+ )+)" + re.escape(START_COMMAND) + "$")

# README lines that are not examples of using the broker, and why they are not run here.
NOT_RUN = {
    "bash .ci/run": "the test suite itself (this test is part of it)",
    "perf/run.sh": "the benchmark matrix: machine limits with fio/iperf3, tens of minutes",
    "perf/replication.sh --peer kafka": "two 3-node clusters (Strata, Apache Kafka) side by side, ~12 minutes a round",
}

ANSI = re.compile(r"\x1b\[[0-9;]*m")
BAD_LOG_LINE = re.compile(r"^\S+\s+(WARN|ERROR)\b|panicked at")


# ---- reading the README -------------------------------------------------------------------

def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced ```sh and ```python block, in README order."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(sh|python)\n(.*?)^```", text, re.M | re.S)]


def command_key(line: str) -> str:
    """A shell line without its trailing `# comment` (the README explains commands in them)."""
    return re.sub(r"\s+#.*$", "", line).strip()


def shell_lines(body: str) -> list[str]:
    return [line for line in (command_key(x) for x in body.splitlines()) if line]


# ---- checks of each README example's output --------------------------------------------------

Check = Callable[[str, str], None]


def expect(*needles: str) -> Check:
    """stdout+stderr contains every needle."""
    def check(out: str, err: str) -> None:
        for n in needles:
            assert n in out + err, f"expected {n!r} in the output"
    return check


def lines_are(*want: str) -> Check:
    """stdout has exactly these lines, in any order (partitions interleave)."""
    def check(out: str, err: str) -> None:
        assert sorted(out.splitlines()) == sorted(want), f"expected lines {sorted(want)}"
    return check


def consumed_json(out: str, err: str) -> None:
    records = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert sorted((r["key"], r["value"]) for r in records) == [("k1", "v1"), ("k2", "v2")]
    for r in records:
        assert r["topic"] == "orders"
        assert r["headers"] == [{"key": "src", "value": "cli"}], r


def bench_ok(kind: str) -> Check:
    def check(out: str, err: str) -> None:
        m = re.search(rf"^{kind}: (\d+) records in .* (\d+) errors$", out, re.M)
        assert m, f"no `{kind}: N records ... 0 errors` summary line"
        assert int(m.group(1)) > 0, "the benchmark moved no records"
        assert int(m.group(2)) == 0, "the benchmark saw errors"
    return check


def http_offsets(out: str, err: str) -> None:
    offsets = json.loads(out)["offsets"]
    assert [(o["offset"], o["error_code"]) for o in offsets] == [(0, None), (1, None)], offsets


def syslog_record(out: str, err: str) -> None:
    records = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert len(records) == 1, "one syslog line"
    r = records[0]
    assert r["topic"] == "syslog" and r["value"].endswith("hello from syslog"), r
    assert r["value"].startswith("<13>1 ") and r["key"], r  # RFC 5424; key = the hostname
    headers = {h["key"]: h["value"] for h in r["headers"]}
    assert headers["app-name"] == "myapp" and headers["severity"] == "notice", headers
    assert headers["facility"] == "user" and headers["sender"].startswith("127.0.0.1:"), headers


def group_described(out: str, err: str) -> None:
    assert "Group: my-group" in out
    assert re.search(r"^State: Empty$", out, re.M), "the README consumer left: the group is Empty"
    # greetings holds 3 records (2 from kcat, 1 from kafka-python); the snippet committed all.
    assert re.search(r"^greetings\s+0\s+3\s+3\s+0$", out, re.M), "committed 3, log end 3, lag 0"


def cluster_status(out: str, err: str) -> None:
    for node, port in ((1, 9092), (2, 9093), (3, 9094)):
        assert re.search(rf"^{node}\s+127\.0\.0\.1:{port}\s", out, re.M), f"broker {node} listed"
    rows = re.findall(r"^orders\s+(\d)\s+(-?\d+)\s+(\S+)\s+", out, re.M)
    assert sorted(p for p, _, _ in rows) == ["0", "1", "2"], "three orders partitions"
    for _, _, replicas in rows:
        assert sorted(replicas.split(",")) == ["1", "2", "3"], "replication factor 3"


# Keyed by the README line (without its comment). Each runs with `bash -c` from the clone's
# root, with `strata` on PATH, and must exit 0.
SINGLE_NODE_CHECKS: dict[str, Check] = {
    "printf 'user1:hello\\nuser2:world\\n' | kcat -b 127.0.0.1:9092 -P -t greetings -K:": expect(),
    "kcat -b 127.0.0.1:9092 -C -t greetings -e -f '%p/%o %k=%s\\n'":
        lines_are("0/0 user1=hello", "0/1 user2=world"),
    "strata topic create orders --partitions 6 --config retention.ms=86400000":
        expect("created topic orders (6 partitions, replication factor 1)"),
    "strata topic list": expect("greetings\n", "orders\n"),
    "strata topic describe orders": expect("PartitionCount: 6", "retention.ms=86400000"),
    "printf 'k1=v1\\nk2=v2\\n' | strata produce --topic orders --key-separator = --header src=cli "
    "--compression zstd": expect("produced 2 record(s)", "compression=zstd"),
    "strata consume --topic orders --from earliest --format json": consumed_json,
    "strata consume --topic orders --from @1700000000000 --count 10": lines_are("v1", "v2"),
    "strata topic alter orders --partitions 8 --config segment.bytes=268435456":
        expect("topic orders now has 8 partitions", "set 1 config(s)"),
    "strata group list": expect("my-group"),
    "strata group describe my-group": group_described,
    "strata group reset-offsets my-group --to-earliest --dry-run":
        expect("greetings", "(dry run: nothing committed)"),
    "strata group reset-offsets my-group --topic orders --to-datetime 1700000000000":
        expect("reset 8 partition(s) of group my-group"),
    "strata group delete my-group": expect("deleted group my-group"),
    "strata topic delete orders": expect("deleted topic orders"),
    "strata bench produce --topic load --partitions 8 --record-size 1024 --producers 8 --acks all "
    "--records 2000000": bench_ok("produce"),
    "strata bench consume --topic load --from earliest --records 2000000": bench_ok("consume"),
    "strata bench e2e --topic e2e --partitions 8 --rate 100000 --duration 10": bench_ok("e2e"),
    "logger -n 127.0.0.1 -P 6514 -T --octet-count --rfc5424 -t myapp 'hello from syslog'": expect(),
    "curl -s -H 'Content-Type: text/plain' --data-binary $'one\\ntwo\\n' "
    "http://127.0.0.1:8082/topics/web-logs": http_offsets,
    "strata consume --topic syslog --count 1 --timeout-ms 10000 --format json": syslog_record,
    "strata consume --topic web-logs": lines_are("one", "two"),
}

# The README's Python snippets, in order (run with this interpreter, which has kafka-python).
PYTHON_CHECKS: list[Check] = [
    lines_are("b'hello'"),
    lines_are("0 0 b'hello'", "0 1 b'world'", "0 2 b'hello'"),
]

CLUSTER_CHECKS: dict[str, Check] = {
    "strata topic create orders --partitions 3 --replication-factor 3":
        expect("created topic orders (3 partitions, replication factor 3)"),
    "strata cluster status": cluster_status,
    "strata cluster reassign --topic orders --partition 0 --replicas 2,3,1":
        expect("orders-0: reassignment to [2,3,1] accepted"),
    "strata cluster elect": expect("orders-0: leader elected"),
}


# ---- running things -------------------------------------------------------------------------

class Session:
    """The clone, the environment a README reader has, and the brokers started from it."""

    def __init__(self, root: Path, bin_dir: Path, logs: Path):
        self.root = root
        self.logs = logs
        self.brokers: list[tuple[subprocess.Popen, Path]] = []
        # A README reader has no STRATA_* settings exported. STRATA_BIN stays (run-all.sh
        # exports it): the broker must not warn about the variables the tooling itself uses.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("STRATA_") or k == "STRATA_BIN"}
        self.env["PATH"] = f"{bin_dir}{os.pathsep}{self.env.get('PATH', '')}"

    def serve(self, command: str, name: str) -> None:
        log = self.logs / f"{name}.stderr"
        with open(log, "wb") as f:
            proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=self.root, env=self.env,
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.brokers.append((proc, log))

    def run(self, command: list[str], check: Check, what: str) -> None:
        r = subprocess.run(command, cwd=self.root, env=self.env, capture_output=True, text=True,
                           timeout=COMMAND_TIMEOUT_S)
        context = f"{what}\nexit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"
        assert r.returncode == 0, context
        try:
            check(r.stdout, r.stderr)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{context}") from None

    def shell(self, line: str, check: Check) -> None:
        self.run(["bash", "-c", line], check, f"README command: {line}")

    def stop_all(self, allowed_while_stopping: tuple[str, ...] = ()) -> None:
        """SIGTERM every broker at once (Ctrl-C in each terminal); each must exit 0 and its log
        hold no WARN, ERROR or panic, except, once the broker logged its own stop, lines
        containing one of `allowed_while_stopping`."""
        for proc, _ in self.brokers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        problems = []
        for proc, log in self.brokers:
            try:
                code = proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                problems.append(f"{log.name}: exit code {code}")
            stopping = False
            for line in (ANSI.sub("", x) for x in log.read_text(errors="replace").splitlines()):
                stopping = stopping or re.search(r"\bstopping\b.*\bsignal=", line) is not None
                if not BAD_LOG_LINE.search(line):
                    continue
                if stopping and any(a in line for a in allowed_while_stopping):
                    continue
                problems.append(f"{log.name}: {line}")
        self.brokers.clear()
        assert not problems, "brokers did not run cleanly:\n" + "\n".join(problems[:40])

    def kill_all(self) -> None:
        for proc, _ in self.brokers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def wait_ready(port: int, session: Session) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        for proc, log in session.brokers:
            assert proc.poll() is None, f"broker exited {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}"
        try:
            kproto.api_versions(f"127.0.0.1:{port}", timeout_s=2.0)
            return
        except (OSError, kproto.ProtocolError):
            assert time.monotonic() < deadline, f"no broker answering on {port}"
            time.sleep(0.1)


def wait_brokers_registered(session: Session, ids: list[int]) -> None:
    """What a reader of the README waits for by watching the logs: every node registered.
    (Asked with `strata cluster status`: a Metadata request naming a topic would create it.)"""
    deadline = time.monotonic() + READY_TIMEOUT_S
    out = ""
    while time.monotonic() < deadline:
        r = subprocess.run(["strata", "cluster", "status"], cwd=session.root, env=session.env,
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        out = r.stdout + r.stderr
        listed = sorted(int(x) for x in re.findall(r"^(\d+)\s+127\.0\.0\.1:\d+\s", r.stdout, re.M))
        if r.returncode == 0 and listed == ids:
            return
        time.sleep(0.2)
    raise AssertionError(f"brokers {ids} not all registered; last status:\n{out}")


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@pytest.fixture
def session(tmp_path):
    if os.environ.get("STRATA_TEST_BROKER", "strata") != "strata":
        pytest.skip("the README runs strata itself")
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    busy = [p for p in README_PORTS if not port_free(p)]
    assert not busy, f"ports {busy} are in use: the README's commands cannot run on this machine"
    root = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(root)], check=True,
                   timeout=COMMAND_TIMEOUT_S)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "strata").symlink_to(Path(strata_bin()).resolve())
    logs = tmp_path / "logs"
    logs.mkdir()
    s = Session(root, bin_dir, logs)
    yield s
    s.kill_all()
    shutil.rmtree(root, ignore_errors=True)  # bench data: a few GB


def classify(blocks: list[tuple[str, str]]) -> tuple[str, list[str], list[tuple[str, str]]]:
    """(single-node start line, cluster block lines, the usage blocks in order)."""
    start = None
    cluster: list[str] = []
    usage: list[tuple[str, str]] = []
    for lang, body in blocks:
        lines = shell_lines(body) if lang == "sh" else []
        if START_COMMAND in lines:
            assert lines == [START_COMMAND], f"the start block has more than the start command: {lines}"
            start = START_COMMAND
        elif any("--controller-voters" in x for x in lines):
            cluster = lines
        elif lang == "sh" and all(x in NOT_RUN for x in lines):
            continue
        else:
            usage.append((lang, body))
    assert start, f"README.md no longer shows `{START_COMMAND}`: update this test"
    assert cluster, "README.md no longer shows the three-node quick start: update this test"
    return start, cluster, usage


def test_readme_single_node(session):
    """Proves a new user's first run works as README.md says: from a fresh clone's root, the
    start command with no flags (relative ./data, port 9092) serves, and every example the
    README shows (kcat, both kafka-python snippets, strata topic/produce/consume/group/bench,
    then the restart with syslog and HTTP ingestion, logger, curl and reading their records
    back) gives the output it should, in README order, while the broker logs no WARN or ERROR
    and exits 0 on SIGTERM."""
    _, _, usage = classify(readme_blocks((session.root / "README.md").read_text()))
    session.serve("strata serve", "single")
    wait_ready(9092, session)
    ran_shell: set[str] = set()
    python_blocks = 0
    for lang, body in usage:
        if lang == "python":
            assert python_blocks < len(PYTHON_CHECKS), f"README python snippet without a check:\n{body}"
            session.run([sys.executable, "-c", body], PYTHON_CHECKS[python_blocks],
                        f"README python snippet:\n{body}")
            python_blocks += 1
            continue
        for line in shell_lines(body):
            if line in NOT_RUN:
                continue
            restart = RESTART_WITH.match(line)
            if restart:
                session.stop_all()
                settings = dict(x.split("=", 1) for x in restart.group(1).split())
                session.env.update(settings)
                session.serve("strata serve", "single-with-settings")
                for name in settings:  # the reader set them for the broker only
                    del session.env[name]
                wait_ready(9092, session)
                ran_shell.add(line)
                continue
            assert line in SINGLE_NODE_CHECKS, f"README command without a check in this test: {line!r}"
            session.shell(line, SINGLE_NODE_CHECKS[line])
            ran_shell.add(line)
    assert python_blocks == len(PYTHON_CHECKS), "a python snippet this test checks left the README"
    missing = set(SINGLE_NODE_CHECKS) - ran_shell
    assert not missing, f"checked commands no longer in the README: {sorted(missing)}"
    # The data went where the README says: ./data of the directory the broker started in.
    assert (session.root / "data" / "greetings-0").is_dir()
    # The README restarts the broker: a clean restart must not warn either (recovery once
    # called a block's zero padding a torn tail).
    session.stop_all()


def test_readme_three_nodes(session):
    """Proves the README's three-node quick start works verbatim from a fresh clone's root
    (relative --data-dir d1/d2/d3): the three nodes form a cluster, the README's topic create,
    cluster status, reassign and elect commands give the output they should, records produced
    to the replicated topic are read back, every partition ends with a full ISR, and no node
    logs a WARN or ERROR."""
    _, cluster, _ = classify(readme_blocks((session.root / "README.md").read_text()))
    nodes = 0
    for line in cluster:
        assignment = re.fullmatch(r"([A-Z_]+)=(\S+)", line)
        if assignment:
            session.env[assignment.group(1)] = assignment.group(2)
        elif line.startswith("strata serve "):
            nodes += 1
            session.serve(line, f"node{nodes}")
    assert nodes == 3, "the quick start starts three nodes"
    for port in (9092, 9093, 9094):
        wait_ready(port, session)
    wait_brokers_registered(session, [1, 2, 3])
    ran: set[str] = set()
    for line in cluster:
        if re.fullmatch(r"([A-Z_]+)=(\S+)", line) or line.startswith("strata serve "):
            continue
        assert line in CLUSTER_CHECKS, f"README command without a check in this test: {line!r}"
        session.shell(line, CLUSTER_CHECKS[line])
        ran.add(line)
    assert ran == set(CLUSTER_CHECKS), f"checked commands no longer in the README: {set(CLUSTER_CHECKS) - ran}"

    # Beyond the README's lines: the replicated topic really takes and serves records.
    session.shell("printf 'a\\nb\\nc\\n' | strata produce --topic orders", expect("produced 3 record(s)"))
    session.shell("strata consume --topic orders --from earliest --count 3", lines_are("a", "b", "c"))
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        r = subprocess.run(["strata", "cluster", "status"], cwd=session.root, env=session.env,
                           capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        rows = re.findall(r"^orders\s+\d\s+(\d+)\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)$", r.stdout, re.M)
        settled = len(rows) == 3 and all(
            sorted(isr.split(",")) == ["1", "2", "3"] and status == "ok" for _, _, isr, status in rows)
        if settled:
            break
        assert time.monotonic() < deadline, f"partitions not all in sync and ok:\n{r.stdout}{r.stderr}"
        time.sleep(0.5)
    for d in ("d1", "d2", "d3"):
        assert (session.root / d / "orders-0").is_dir(), f"{d}/orders-0: data under the relative dir"
    # The whole cluster stops: a voter that outlives the others loses its quorum and says so
    # (raft-rs's check_quorum), which is expected here and nowhere else.
    session.stop_all(allowed_while_stopping=("stepped down to follower since quorum is not active",))
