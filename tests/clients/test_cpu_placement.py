"""Where the shards' threads run: pinned round-robin within the process's affinity mask (taskset,
a container's cpuset), narrowed by `--cpuset`, or left unpinned with `--no-pin-shards`; read
back from /proc/<pid>/task/*/status (Cpus_allowed_list) of the real broker process."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common import read_all
from harness import Broker, broker_kind, free_port, strata_bin

pytestmark = pytest.mark.skipif(broker_kind() != "strata", reason="strata's own shard placement")

START_TIMEOUT_S = 30


def cpu_list(cpus) -> str:
    """The kernel's notation for a set of CPUs (Cpus_allowed_list): ranges folded, `0-3,6`."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][1] + 1 == c:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def shard_threads(pid: int) -> dict[str, str]:
    """{thread id: Cpus_allowed_list} of the broker's shard threads (named strata-shard-<n>-<id>,
    cut to 15 characters by the kernel; glommio's blocking helper threads inherit the name)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except OSError:
            continue  # the thread ended meanwhile
        if comm.startswith("strata-shard"):
            allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                           if line.startswith("Cpus_allowed_list:"))
            out[f"{task.name} ({comm})"] = allowed
    return out


def executor_cpus(pid: int) -> dict[int, str]:
    """{shard: Cpus_allowed_list} of each shard's executor thread, told from glommio's blocking
    threads (same name) by being the first thread of that shard's name."""
    by_shard: dict[int, tuple[int, str]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except OSError:
            continue
        if not comm.startswith("strata-shard-"):
            continue
        shard = int(comm.split("-")[2])
        allowed = next(line.split(":", 1)[1].strip() for line in status.splitlines()
                       if line.startswith("Cpus_allowed_list:"))
        tid = int(task.name)
        if shard not in by_shard or tid < by_shard[shard][0]:
            by_shard[shard] = (tid, allowed)
    return {s: a for s, (_, a) in by_shard.items()}


class TasksetBroker(Broker):
    """A broker started as `taskset -c CPUS strata serve ...` (taskset execs strata: same pid)."""

    def __init__(self, cpus: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cpus = cpus

    def command(self) -> list[str]:
        return ["taskset", "-c", self.cpus, *super().command()]


def needs_two_cpus():
    if shutil.which("taskset") is None:
        pytest.skip("taskset not installed (util-linux)")
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1 in this process's affinity mask")


def produce_and_consume(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """The broker serves: a topic with a partition per shard takes acks=all records and gives
    exactly them back."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    sent = {part: [f"{topic} {part} {i}".encode() for i in range(20)] for part in range(partitions)}
    for part, values in sent.items():
        for v in values:
            p.produce(topic, value=v, partition=part)
    assert p.flush(30) == 0, "records left unacknowledged"
    got = read_all(bootstrap, topic, partitions)
    for part, values in sent.items():
        assert [m.value() for m in got[part]] == values, f"partition {part}"


def test_taskset_pins_shards_inside_the_affinity_mask(tmp_path):
    """Proves the shards are pinned within the CPUs the process may use, not from CPU 0: under
    `taskset -c 1` both shards' threads are allowed on CPU 1 only (before the fix shard 0 was
    pinned to CPU 0, outside the mask), and the broker serves a produce and a consume."""
    needs_two_cpus()
    b = TasksetBroker("1", tmp_path / "data", tmp_path / "logs", shards=2)
    try:
        b.start()
        threads = shard_threads(b.proc.pid)
        assert len(executor_cpus(b.proc.pid)) == 2, f"two shard executors: {threads}"
        assert set(threads.values()) == {"1"}, f"shard threads outside CPU 1: {threads}"
        produce_and_consume(b.bootstrap, "pinned-taskset")
    finally:
        b.stop()
        b.kill9()


def test_default_pins_one_shard_per_cpu(broker_factory):
    """Proves the default placement: with the whole machine allowed, shard i's executor thread
    is allowed on exactly the i-th CPU of the mask (round-robin), so two shards on a 2-CPU
    mask are on two different CPUs, and the log says where each shard went."""
    needs_two_cpus()
    b = broker_factory(shards=2)
    allowed = sorted(os.sched_getaffinity(b.proc.pid))
    cpus = executor_cpus(b.proc.pid)
    assert cpus == {0: str(allowed[0]), 1: str(allowed[1])}, cpus
    assert "shard 0 on CPU" in b.log_path.read_text(errors="replace")
    produce_and_consume(b.bootstrap, "pinned-default")


def test_no_pin_shards_leaves_threads_on_every_cpu(broker_factory):
    """Proves `--no-pin-shards` binds nothing: every shard thread keeps the process's whole
    affinity mask (all CPUs this test may use), and the broker serves."""
    needs_two_cpus()
    b = broker_factory(shards=2, extra_args=["--no-pin-shards"])
    want = cpu_list(os.sched_getaffinity(0))
    threads = shard_threads(b.proc.pid)
    assert len(executor_cpus(b.proc.pid)) == 2, threads
    assert set(threads.values()) == {want}, f"expected every shard thread on {want}: {threads}"
    produce_and_consume(b.bootstrap, "unpinned")


def test_cpuset_picks_the_cpus(broker_factory):
    """Proves `--cpuset 1` (env STRATA_CPUSET works the same way, a config test proves it)
    puts every shard on CPU 1 even though the mask allows CPU 0 too."""
    needs_two_cpus()
    b = broker_factory(shards=2, extra_args=["--cpuset", "1"])
    threads = shard_threads(b.proc.pid)
    assert set(threads.values()) == {"1"}, threads
    produce_and_consume(b.bootstrap, "cpuset-one")


@pytest.mark.parametrize("cpuset,taskset,message", [
    ("0", "1", "outside the CPUs this process may run on"),
    ("0-x", None, "invalid setting cpuset"),
    ("3-1", None, "ends before it starts"),
])
def test_bad_cpuset_fails_the_start(tmp_path, cpuset, taskset, message):
    """Proves a cpuset naming a CPU outside the affinity mask (`taskset -c 1` with `--cpuset
    0`) or a malformed one fails the start at once with a message naming the problem, exit
    code 1 and no panic."""
    if taskset:
        needs_two_cpus()
    cmd = [str(strata_bin()), "serve", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(tmp_path / "d"),
           "--shards", "1", "--cpuset", cpuset]
    if taskset:
        cmd = ["taskset", "-c", taskset, *cmd]
    r = subprocess.run(cmd, capture_output=True, timeout=START_TIMEOUT_S, stdin=subprocess.DEVNULL)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, f"exit {r.returncode}:\n{err}"
    assert message in err, err
    assert "panicked" not in err, err
