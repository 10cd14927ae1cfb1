#!/usr/bin/env python3
"""A reference Apache Kafka broker (4.1.x, KRaft, one node that is both broker and controller)
on loopback, for tests and perf runs that compare Strata with Kafka itself; and
`ReferenceKafkaCluster`, three (or more) such combined nodes forming one KRaft cluster on
loopback, for the replication comparison (perf/replication_peer.py).

The jars come from Maven Central (`tests/fetch-jars.sh kafka` fills tests/kafka/lib); the JVM
is started through tests/kafka/run-class.sh so the classpath and logging are set in one place.

Layout of the working directory given to `ReferenceKafka(workdir)` (or `--dir`):
    server.properties  written at each start from the settings below plus the caller's overrides
    data/              log.dirs, formatted once with `kafka.tools.StorageTool format`
    kafka.log          the broker's stdout and stderr (log4j2 at INFO)
    kafka.pid          the JVM's pid while it runs (for `stop` from another process)

Every internal topic has replication factor 1 and min ISR 1 (one node), the group coordinator
does not delay the first rebalance, and the rest is Kafka's default, so the broker behaves as
shipped; callers add settings (`flush.messages=1`, `num.partitions=8`, ...) as overrides.

A cluster (`ReferenceKafkaCluster(workdir, nodes=3)`) puts node N in workdir/nN with the same
layout. Every node is broker and controller, `controller.quorum.voters` lists all of them,
and every node's data/ is formatted with the same cluster id. Internal topics keep Kafka's
defaults (replication factor 3, min ISR 2); `default.replication.factor` and
`min.insync.replicas` stay Kafka's (1), so topics say what they want when they are created.

Readiness: Kafka's KRaft broker opens its client listener only after it has registered and
caught up with the metadata log, so one ApiVersions round trip on the client port, polled with
a deadline, means ready.

Command line (for perf scripts and by hand):
    tests/kafka/reference_kafka.py start --dir DIR [--port P] [--set key=value ...]
        formats DIR/data if new, starts Kafka in the background, waits until ready, prints
        its bootstrap address (127.0.0.1:P)
    tests/kafka/reference_kafka.py stop --dir DIR
        SIGTERM (Kafka's controlled shutdown), then SIGKILL after a deadline
    tests/kafka/reference_kafka.py run --dir DIR [--port P] [--set key=value ...]
        the same as start, in the foreground until Ctrl-C
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

# One port picker for every harness: a port is never handed out twice in a process (see
# ports.py). Appended, not inserted: perf scripts import this module and keep their own
# modules first on the path.
sys.path.append(str(Path(__file__).resolve().parents[1] / "clients"))
from ports import free_port, free_ports  # noqa: E402,F401  (perf scripts import them from here)

HERE = Path(__file__).resolve().parent
RUN_CLASS = HERE / "run-class.sh"
LIB = HERE / "lib"
READY_TIMEOUT_S = float(os.environ.get("STRATA_KAFKA_READY_TIMEOUT_S", "120"))
STOP_TIMEOUT_S = 60.0
# The JVM heap of the reference broker; Kafka's own scripts default to 1 GiB.
DEFAULT_HEAP = os.environ.get("STRATA_KAFKA_HEAP", "1g")

# One node is the whole cluster: every internal topic must fit on it.
SINGLE_NODE_SETTINGS = {
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

# A cluster of combined nodes: Kafka's defaults (internal topics RF 3, min ISR 2) apart from
# the first rebalance, which tests and benchmarks should not wait 3 s for.
CLUSTER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
}

# The JVM flags Kafka's bin/kafka-server-start.sh adds by default (KAFKA_JVM_PERFORMANCE_OPTS
# in kafka-run-class.sh, 4.1): a broker started "as shipped" runs with these. The cluster uses
# them so a benchmark measures Kafka as its own scripts start it.
SHIPPED_JVM_OPTS = ("-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 "
                    "-XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true")


def jars_present() -> bool:
    return any(LIB.glob("kafka_2.13-*.jar"))


def random_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes in URL-safe base64 without padding, the format
    `kafka-storage random-uuid` prints (done here to save a JVM start)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def api_versions_ok(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """One ApiVersions v0 round trip; True when the broker answers error code 0."""
    client_id = b"strata-ref-probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        head = _recv_exact(s, 4)
        (size,) = struct.unpack(">i", head)
        resp = _recv_exact(s, size)
    correlation_id, error_code = struct.unpack(">ih", resp[:6])
    return correlation_id == 1 and error_code == 0


def registered_brokers(host: str, port: int, timeout_s: float = 2.0) -> int:
    """How many brokers a Metadata v0 answer lists: Kafka lists only registered, unfenced
    brokers, so this says whether the cluster can place a replica on each of them."""
    client_id = b"strata-ref-probe"
    body = struct.pack(">hhih", 3, 0, 2, len(client_id)) + client_id + struct.pack(">i", 0)
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        resp = _recv_exact(s, size)
    correlation_id, count = struct.unpack(">ii", resp[:8])
    if correlation_id != 2:
        raise ConnectionError(f"Metadata answer for correlation id {correlation_id}, not 2")
    return count


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        out += chunk
    return out


class ReferenceKafka:
    """One Apache Kafka node on 127.0.0.1:port, its files under `workdir`.

    Alone (the defaults) it is a whole single-node cluster. As one node of a
    `ReferenceKafkaCluster` it is given its `node_id`, its `controller_port`, the quorum's
    `voters` string, the shared `cluster_id` and the cluster's `base_settings`."""

    def __init__(self, workdir: Path, port: int | None = None, overrides: dict[str, str] | None = None,
                 heap: str = DEFAULT_HEAP, *, node_id: int = 1, controller_port: int | None = None,
                 voters: str | None = None, cluster_id: str | None = None,
                 base_settings: dict[str, str] | None = None, jvm_opts: str = ""):
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.overrides = dict(overrides or {})
        self.heap = heap
        self.node_id = node_id
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id
        self.base_settings = dict(SINGLE_NODE_SETTINGS if base_settings is None else base_settings)
        self.jvm_opts = jvm_opts
        self.proc: subprocess.Popen | None = None
        self.workdir.mkdir(parents=True, exist_ok=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def config_path(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    @property
    def pid_path(self) -> Path:
        return self.workdir / "kafka.pid"

    def settings(self) -> dict[str, str]:
        listeners = f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        base = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            **self.base_settings,
        }
        base.update(self.overrides)
        return base

    def write_config(self) -> None:
        lines = [f"{k}={v}" for k, v in self.settings().items()]
        self.config_path.write_text("# written by tests/kafka/reference_kafka.py\n" + "\n".join(lines) + "\n")

    def _env(self, heap: str) -> dict[str, str]:
        env = dict(os.environ)
        env["KAFKA_HEAP_OPTS"] = f"-Xms{heap} -Xmx{heap}"
        env.setdefault("KAFKA_LOG_LEVEL", "INFO")
        if self.jvm_opts:
            env["KAFKA_OPTS"] = (env.get("KAFKA_OPTS", "") + " " + self.jvm_opts).strip()
        return env

    def format(self) -> None:
        """Formats data/ with a fresh cluster id unless it already holds a formatted log."""
        if (self.data_dir / "meta.properties").exists():
            return
        # A one-shot tool: the client compiler and the serial collector start fastest.
        env = dict(os.environ, KAFKA_HEAP_OPTS="-Xms256m -Xmx256m")
        env["KAFKA_OPTS"] = (env.get("KAFKA_OPTS", "") + " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC").strip()
        env["KAFKA_LOG_LEVEL"] = "WARN"
        r = subprocess.run([str(RUN_CLASS), "kafka.tools.StorageTool", "format",
                            # `=` form: an id may start with '-' (1 in 32), which argparse
                            # would otherwise take for an option and fail the format.
                            f"--cluster-id={self.cluster_id or random_cluster_id()}",
                            "--config", str(self.config_path)],
                           env=env, capture_output=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({r.returncode}):\n"
                               f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}")

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "ReferenceKafka":
        self.launch()
        self.wait_ready(timeout_s)
        return self

    def launch(self) -> None:
        """Formats (if new) and starts the JVM without waiting for it: a cluster's nodes must
        all be running before any of them can elect a controller and become ready."""
        if not jars_present():
            raise RuntimeError(f"no Kafka jars in {LIB}: run tests/fetch-jars.sh kafka")
        assert not self.alive(), "reference Kafka already running"
        self.write_config()
        self.format()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(RUN_CLASS), "kafka.Kafka", str(self.config_path)],
                                     stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=self._env(self.heap), start_new_session=True)
        log.close()
        self.pid_path.write_text(f"{self.proc.pid}\n")

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self.proc.returncode} before ready:\n{self.log_tail()}")
            try:
                if api_versions_ok("127.0.0.1", self.port):
                    return
            except OSError as e:
                last_error = e
            time.sleep(0.1)
        raise TimeoutError(f"Kafka not ready on {self.bootstrap} after {timeout_s}s ({last_error}):\n"
                           f"{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (controlled shutdown), then SIGKILL after `timeout_s`. Returns the exit code."""
        if self.proc is None:
            return None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        self.pid_path.unlink(missing_ok=True)
        return self.proc.returncode

    def kill9(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.pid_path.unlink(missing_ok=True)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no Kafka log)"
        return "\n".join(text.splitlines()[-lines:])


class ReferenceKafkaCluster:
    """`nodes` combined broker+controller Kafka nodes on loopback forming one KRaft cluster,
    node N (1-based) in `workdir`/nN. `overrides` apply to every node (on top of
    CLUSTER_SETTINGS). Starts all JVMs, then waits until every node answers ApiVersions."""

    def __init__(self, workdir: Path, nodes: int = 3, overrides: dict[str, str] | None = None,
                 heap: str = DEFAULT_HEAP, jvm_opts: str = SHIPPED_JVM_OPTS):
        self.workdir = Path(workdir)
        flat = free_ports(2 * nodes)
        ports = list(zip(flat[0::2], flat[1::2]))
        voters = ",".join(f"{n + 1}@127.0.0.1:{c}" for n, (_, c) in enumerate(ports))
        cluster_id = random_cluster_id()
        self.nodes = [ReferenceKafka(self.workdir / f"n{n + 1}", port=p, overrides=overrides, heap=heap,
                                     node_id=n + 1, controller_port=c, voters=voters, cluster_id=cluster_id,
                                     base_settings=CLUSTER_SETTINGS, jvm_opts=jvm_opts)
                      for n, (p, c) in enumerate(ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.proc is not None]

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> "ReferenceKafkaCluster":
        try:
            for n in self.nodes:
                n.launch()
            deadline = time.monotonic() + timeout_s
            for n in self.nodes:
                n.wait_ready(max(deadline - time.monotonic(), 1.0))
            # A node answers ApiVersions once it has registered, but the controller may not
            # have unfenced every broker yet: until it has, creating an RF-N topic fails with
            # INVALID_REPLICATION_FACTOR ("only 2 broker(s) are registered").
            self.wait_registered(deadline)
        except (RuntimeError, TimeoutError, OSError, subprocess.SubprocessError):
            self.stop()
            raise
        return self

    def wait_registered(self, deadline: float) -> None:
        """Until every node's Metadata answer lists every broker."""
        seen: list[int] = []
        while time.monotonic() < deadline:
            try:
                seen = [registered_brokers("127.0.0.1", n.port) for n in self.nodes]
            except OSError:
                seen = [-1]  # a node not answering yet counts as not seeing the others
            if seen and min(seen) >= len(self.nodes):
                return
            for n in self.nodes:
                if n.proc is not None and n.proc.poll() is not None:
                    raise RuntimeError(f"Kafka node {n.node_id} exited with {n.proc.returncode}:\n{n.log_tail()}")
            time.sleep(0.1)
        raise TimeoutError(f"Kafka nodes list {seen} brokers, not {len(self.nodes)}, at the deadline")

    def alive(self) -> bool:
        return all(n.alive() for n in self.nodes)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> list[int | None]:
        """SIGTERM to every node at once (a node shutting down alone would wait for the
        quorum it is leaving), then each is waited for and killed after `timeout_s`."""
        for n in self.nodes:
            if n.alive():
                n.proc.send_signal(signal.SIGTERM)
        return [n.stop(timeout_s) for n in self.nodes]


def stop_by_pid_file(workdir: Path, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stops the Kafka that `start` left running in `workdir`; False if none was running."""
    pid_path = Path(workdir) / "kafka.pid"
    try:
        pid = int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pid_path.unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(pid, signal.SIGKILL)
    pid_path.unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["start", "stop", "run"])
    p.add_argument("--dir", required=True, type=Path, help="working directory (config, data/, log)")
    p.add_argument("--port", type=int, default=None, help="client port (default: a free one)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting on top of the single-node defaults (repeatable)")
    p.add_argument("--heap", default=DEFAULT_HEAP, help=f"JVM heap (default {DEFAULT_HEAP})")
    args = p.parse_args(argv)
    if args.action == "stop":
        return 0 if stop_by_pid_file(args.dir) else 1
    overrides = dict(kv.split("=", 1) for kv in args.set)
    kafka = ReferenceKafka(args.dir, port=args.port, overrides=overrides, heap=args.heap)
    kafka.start()
    print(kafka.bootstrap, flush=True)
    if args.action == "start":
        return 0
    try:
        kafka.proc.wait()
    except KeyboardInterrupt:
        kafka.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
