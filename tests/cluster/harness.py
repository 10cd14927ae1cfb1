"""Start, fault and stop a cluster of real `strata serve` processes.

Every node is one `strata serve` with its own data dir, Kafka port and controller port, all
nodes being controller voters (combined mode):

    strata serve --node-id N --listen H:P --advertised-listener H:P
                 --controller-listen H:C --controller-voters 1@H1:C1,2@H2:C2,3@H3:C3
                 --data-dir DIR --shards 1

Timeouts are shortened through STRATA_<KEY> environment variables (CLUSTER_ENV below): an
unknown environment key is ignored by the config loader, whereas an unknown key in a --config
file is an error, so the environment is the form that works before and after the broker grows
these settings. `Cluster(size=1, controller=False)` starts a plain single broker (no controller
flags), which is what the binary supports today; the self-tests use it.

Networking: "loopback" puts every node on 127.0.0.1 with free ports; "netns" puts node N in
its own network namespace at 10.77.0.(10+N) (see netns.py) so a test can partition it.

Faults: kill9 (SIGKILL), pause/resume (SIGSTOP/SIGCONT), restart with the same dirs and ports,
and (netns only) isolate/heal. Every process is started in its own session and is killed by
Cluster.close(), which the pytest fixtures call even when a test fails.

Cluster facts come from the Kafka Metadata API via confluent_kafka's AdminClient.list_topics:
brokers, per-partition leader/replicas/ISR, and controller_id (assumed to be the active
controller's node id, see README).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "clients"))
import kproto  # noqa: E402  (ApiVersions readiness probe shared with the client tests)
from ports import free_port  # noqa: E402  (shared with the client tests; tests import it from here)

READY_TIMEOUT_S = float(os.environ.get("STRATA_TEST_READY_TIMEOUT_S", "30"))
STOP_TIMEOUT_S = 15.0
BROKER_SESSION_TIMEOUT_MS = 3000
REPLICA_LAG_TIME_MAX_MS = 3000
NETNS_KAFKA_PORT = 39192  # inside each namespace; every node has its own address
NETNS_CONTROLLER_PORT = 39193

# Settings every cluster node gets (the names are config keys; see README for the contract).
CLUSTER_ENV = {
    "STRATA_BROKER_SESSION_TIMEOUT_MS": str(BROKER_SESSION_TIMEOUT_MS),
    "STRATA_BROKER_HEARTBEAT_INTERVAL_MS": "500",
    "STRATA_REPLICA_LAG_TIME_MAX_MS": str(REPLICA_LAG_TIME_MAX_MS),
    "STRATA_DEFAULT_REPLICATION_FACTOR": "3",
    "STRATA_MIN_INSYNC_REPLICAS": "2",
    "STRATA_UNCLEAN_LEADER_ELECTION_ENABLE": "false",  # the checker assumes no unclean election
    "STRATA_OFFSETS_TOPIC_NUM_PARTITIONS": "3",
    "STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
    # Three brokers share this machine's cores: pinned (the default), every `--shards 1`
    # broker would sit on the first CPU while the others idle (perf/RESULTS-replication.md,
    # 2026-12-03 shard placement); unpinned, the kernel spreads them as it does the clients.
    "STRATA_PIN_SHARDS": "false",
}


def die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs the node when the thread that started it exits, so a
    test run killed outright (os._exit, SIGKILL) leaves no broker behind. Nodes are started
    from the test's main thread, whose exit is the process's. Survives `ip netns exec`'s exec."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def strata_bin() -> Path:
    env = os.environ.get("STRATA_BIN")
    if env:
        return Path(env)
    return REPO_ROOT / "target" / "release" / "strata"


def serve_help() -> str:
    return subprocess.run([str(strata_bin()), "serve", "--help"], capture_output=True, text=True).stdout


def require_cluster_support() -> None:
    """Fails (never skips) when the binary cannot run a cluster, with the reason in one line."""
    text = serve_help()
    missing = [f for f in ("--controller-listen", "--controller-voters") if f not in text]
    if missing:
        raise AssertionError(f"{strata_bin()} serve has no {' / '.join(missing)}: the cluster "
                             "broker is not built into this binary yet")


class Node:
    """One `strata serve` process; its dirs and ports stay fixed across restarts."""

    def __init__(self, node_id: int, root: Path, host: str, port: int, controller_port: int,
                 exec_prefix: list[str] | None = None, env: dict[str, str] | None = None,
                 roles: str = "broker,controller"):
        self.node_id = node_id
        self.roles = roles  # Kafka's process.roles: "broker", "controller" or both
        self.data_dir = root / f"node{node_id}" / "data"
        self.log_dir = root / "logs"
        self.host = host
        self.port = port
        self.controller_port = controller_port
        self.exec_prefix = exec_prefix or []
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        # Kafka's `listeners` for this node instead of its single PLAINTEXT `address` (set
        # before start; its PLAINTEXT listener should stay at `address`).
        self.listeners: str | None = None
        # How wait_listening asks the Kafka listener (address -> raises until it answers);
        # None: ApiVersions in cleartext (a TLS-only node needs a TLS probe).
        self.probe: Callable[[str], object] | None = None
        self.starts = 0
        self.paused = False
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def controller_address(self) -> str:
        return f"{self.host}:{self.controller_port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"node{self.node_id}-{self.starts}.stderr"

    def command(self, voters: str | None) -> list[str]:
        addresses = (["--listeners", self.listeners] if self.listeners
                     else ["--listen", self.address, "--advertised-listener", self.address])
        cmd = [*self.exec_prefix, str(strata_bin()), "serve",
               "--node-id", str(self.node_id),
               *addresses,
               "--data-dir", str(self.data_dir),
               "--shards", "1"]
        if voters is not None:
            cmd += ["--controller-voters", voters, "--process-roles", self.roles]
            if self.is_controller:
                cmd += ["--controller-listen", self.controller_address]
        return cmd

    def start(self, voters: str | None, wait: bool = True) -> "Node":
        assert not self.alive(), f"node {self.node_id} already running"
        self.starts += 1
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        env.update(self.env)
        with open(self.log_path, "wb") as log:
            log.write(f"$ {' '.join(self.command(voters))}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.command(voters), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True, preexec_fn=die_with_parent)
        self.paused = False
        if wait:
            self.wait_listening()
        return self

    def wait_listening(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """The Kafka listener answers ApiVersions (the node may not be registered yet); a
        dedicated controller has no Kafka listener, so its controller port must accept."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"node {self.node_id} exited with {self.proc and self.proc.returncode} "
                                   f"before listening:\n{self.log_tail()}")
            try:
                if self.is_broker:
                    (self.probe or (lambda a: kproto.api_versions(a, timeout_s=2.0)))(self.address)
                else:
                    socket.create_connection((self.host, self.controller_port), timeout=2.0).close()
                return
            except (OSError, kproto.ProtocolError) as e:
                last = e
                time.sleep(0.05)
        raise TimeoutError(f"node {self.node_id} not listening on {self.address} after {timeout_s}s "
                           f"({last}):\n{self.log_tail()}")

    def wait_log(self, text: str, timeout_s: float = READY_TIMEOUT_S) -> None:
        """This start's log contains `text` (e.g. a dedicated controller's "metadata log
        caught up", which has no Kafka listener to ask)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if text in self.log_path.read_text(errors="replace"):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"node {self.node_id}: {text!r} not logged in {timeout_s}s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL (resuming first would change nothing: SIGKILL also ends a stopped process)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        self.paused = False

    def pause(self) -> None:
        assert self.alive(), f"node {self.node_id} is not running"
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> int | None:
        """SIGTERM (graceful, so the log is flushed and closed), SIGKILL after a deadline.
        Returns the exit code; raises if SIGTERM was ignored."""
        if not self.alive():
            return None if self.proc is None else self.proc.returncode
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"node {self.node_id} ignored SIGTERM for {STOP_TIMEOUT_S}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


class Cluster:
    def __init__(self, root: Path, size: int = 3, network: str = "loopback", net=None,
                 controller: bool = True, env: dict[str, str] | None = None,
                 roles: dict[int, str] | None = None):
        """network="netns" needs `net`, a set-up netns.Network holding nodes 1..size. `roles`
        gives some nodes other process roles than broker+controller (a dedicated-controller
        layout: {1: "controller", ..., 4: "broker"})."""
        assert network in ("loopback", "netns")
        assert network == "loopback" or net is not None
        self.root = Path(root)
        self.controller = controller
        self.net = net
        self.faults: list[dict] = []  # every fault injected, for the run summary
        # Extra client settings for admin() (security.protocol, sasl.*, ssl.*): a cluster
        # whose listeners need them.
        self.client_conf: dict[str, str] = {}
        node_env = {**(CLUSTER_ENV if controller else {}), **(env or {})}
        self.node_env = node_env
        roles = roles or {}
        self.nodes: dict[int, Node] = {}
        for n in range(1, size + 1):
            role = roles.get(n, "broker,controller")
            if network == "netns":
                self.nodes[n] = Node(n, self.root, net.address(n), NETNS_KAFKA_PORT, NETNS_CONTROLLER_PORT,
                                     net.exec_prefix(n), node_env, role)
            else:
                self.nodes[n] = Node(n, self.root, "127.0.0.1", free_port(), free_port(), None, node_env,
                                     role)

    # ---- lifecycle -------------------------------------------------------------------------

    @property
    def voters(self) -> str | None:
        if not self.controller:
            return None
        return ",".join(f"{n}@{node.controller_address}" for n, node in self.nodes.items()
                        if node.is_controller)

    @property
    def brokers(self) -> set[int]:
        return {n for n, node in self.nodes.items() if node.is_broker}

    @property
    def bootstrap(self) -> str:
        return ",".join(node.address for node in self.nodes.values() if node.is_broker)

    def start(self, wait_registered: bool = True) -> "Cluster":
        # All start before any is awaited: a Raft quorum needs a majority up to elect anyone.
        for node in self.nodes.values():
            node.start(self.voters, wait=False)
        for node in self.nodes.values():
            node.wait_listening()
        if wait_registered:
            self.wait_brokers(self.brokers)
        return self

    def add_broker(self, wait_registered: bool = True) -> int:
        """Scale-out: starts a new broker-only node (the next id; loopback only) that joins
        the running cluster as a metadata observer. Returns its id."""
        assert self.net is None, "add_broker() is loopback only"
        n = max(self.nodes) + 1
        self.nodes[n] = Node(n, self.root, "127.0.0.1", free_port(), free_port(), None, self.node_env,
                             "broker")
        self.nodes[n].start(self.voters)
        if wait_registered:
            self.wait_brokers({n}, subset=True)
        return n

    def restart(self, n: int, wait_registered: bool = True) -> None:
        node = self.nodes[n]
        if node.alive():
            node.kill9()
        node.start(self.voters)
        if wait_registered and node.is_broker:
            self.wait_brokers({n}, subset=True)

    def stop_all(self) -> dict[int, int | str | None]:
        """Graceful stop of every node at once (SIGTERM to all, then wait): stopping them one
        by one would take the controller quorum away from the last ones mid-shutdown. Returns
        exit codes, or "ignored SIGTERM" for a node that had to be killed after the deadline
        (the caller reports it; the data on disk is still checkable)."""
        for node in self.nodes.values():
            if node.alive():
                node.resume()
                node.proc.send_signal(signal.SIGTERM)
        codes: dict[int, int | str | None] = {}
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for n, node in self.nodes.items():
            if node.proc is None:
                codes[n] = None
                continue
            try:
                codes[n] = node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.kill9()
                codes[n] = "ignored SIGTERM"
        return codes

    def close(self) -> None:
        """Never raises: kills whatever still runs (fixture finalizer)."""
        for node in self.nodes.values():
            try:
                node.kill9()
            except Exception as e:  # a process stuck in D state: report, keep cleaning up
                print(f"node {node.node_id}: kill failed: {e}", file=sys.stderr)

    def log_tails(self, lines: int = 40) -> str:
        out = []
        for n, node in self.nodes.items():
            out.append(f"----- node {n} ({node.address}) start #{node.starts} log tail -----\n"
                       f"{node.log_tail(lines)}")
        return "\n".join(out)

    # ---- faults (each recorded for the summary) ---------------------------------------------

    def record_fault(self, kind: str, node: int, **extra) -> None:
        self.faults.append({"kind": kind, "node": node, "t": round(time.time(), 3), **extra})

    def kill9(self, n: int) -> None:
        self.record_fault("kill9", n)
        self.nodes[n].kill9()

    def pause(self, n: int) -> None:
        self.record_fault("sigstop", n)
        self.nodes[n].pause()

    def resume(self, n: int) -> None:
        self.nodes[n].resume()

    def isolate(self, n: int, allow_client: bool = True) -> None:
        assert self.net is not None, "isolate() needs network='netns'"
        self.record_fault("isolate", n, allow_client=allow_client)
        self.net.isolate(n, allow_client=allow_client)

    def heal(self, n: int) -> None:
        self.net.heal(n)

    # ---- metadata -----------------------------------------------------------------------------

    def admin(self, bootstrap: str | None = None, socket_timeout_ms: int = 3000) -> AdminClient:
        return AdminClient({"bootstrap.servers": bootstrap or self.live_bootstrap(),
                            "socket.timeout.ms": socket_timeout_ms, "reconnect.backoff.max.ms": 500,
                            **self.client_conf})

    def reachable_brokers(self) -> list[Node]:
        """Brokers a client can talk to now: running, not paused, not isolated."""
        cut = self.net.isolated if self.net is not None else set()
        return [node for n, node in self.nodes.items()
                if node.is_broker and node.alive() and not node.paused and n not in cut]

    def live_bootstrap(self) -> str:
        return ",".join(node.address for node in self.reachable_brokers()) or self.bootstrap

    def metadata(self, topic: str | None = None, timeout_s: float = 5.0):
        return self.admin().list_topics(topic, timeout=timeout_s)

    def poll_until(self, what: str, check: Callable[[], object], timeout_s: float, interval_s: float = 0.2):
        """Calls check() until it returns something truthy; metadata errors count as 'not yet'."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while True:
            try:
                last = check()
                if last:
                    return last
            except KafkaException as e:
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not reached in {timeout_s}s (last: {last})\n{self.log_tails(25)}")
            time.sleep(interval_s)

    def wait_brokers(self, ids: set[int], subset: bool = False, timeout_s: float = 30) -> None:
        """Metadata lists exactly `ids` as brokers (or at least `ids` when subset=True)."""
        def check():
            brokers = set(self.metadata().brokers)
            return ids <= brokers if subset else brokers == ids
        self.poll_until(f"brokers {sorted(ids)} registered", check, timeout_s)

    def partitions(self, topic: str) -> dict:
        """{partition: PartitionMetadata (leader, replicas, isrs, error)} from one Metadata call."""
        t = self.metadata(topic).topics.get(topic)
        if t is None or t.error is not None:
            raise KafkaException(t.error) if t is not None else KafkaException(f"no topic {topic}")
        return dict(t.partitions)

    def wait_topic(self, topic: str, partitions: int, full_isr: bool = False, timeout_s: float = 30) -> dict:
        """Every partition has a live leader (and, with full_isr, ISR == replicas). Returns
        the partition metadata it saw."""
        def check():
            parts = self.partitions(topic)
            if len(parts) != partitions:
                return None
            for p in parts.values():
                if p.error is not None or p.leader < 0 or p.leader not in self.nodes:
                    return None
                if not self.nodes[p.leader].alive():
                    return None
                if full_isr and sorted(p.isrs) != sorted(p.replicas):
                    return None
            if full_isr and not self.nodes_agree(topic, parts):
                return None
            return parts
        return self.poll_until(f"topic {topic} leaders{' and full ISR' if full_isr else ''}", check, timeout_s)

    def nodes_agree(self, topic: str, parts: dict) -> bool:
        """Every live, reachable node answers Metadata itself with the same leaders and ISRs
        as `parts`. A node cut off from the quorum still serves its stale image, so one
        client's view is not enough to call a healed cluster settled."""
        for node in self.reachable_brokers():
            try:
                view = kproto.metadata_v1(node.address, topic, timeout_s=3)
            except (OSError, kproto.ProtocolError, struct.error):
                return False
            if view["error"] != 0 or len(view["partitions"]) != len(parts):
                return False
            for i, p in parts.items():
                _err, leader, _replicas, isr = view["partitions"].get(i, (0, -1, [], []))
                if leader != p.leader or sorted(isr) != sorted(p.isrs):
                    return False
        return True

    def leader(self, topic: str, partition: int, timeout_s: float = 30, not_on: int | None = None) -> int:
        """The current leader's node id, waiting for one that is alive (and not `not_on`)."""
        def check():
            p = self.partitions(topic)[partition]
            ok = p.error is None and p.leader in self.nodes and self.nodes[p.leader].alive() \
                and p.leader != not_on
            return p.leader if ok else None
        return self.poll_until(f"leader of {topic}-{partition}", check, timeout_s)

    def controller_id(self, timeout_s: float = 30, not_on: int | None = None) -> int:
        def check():
            cid = self.metadata().controller_id
            ok = cid in self.nodes and self.nodes[cid].alive() and cid != not_on
            return cid if ok else None
        return self.poll_until("active controller", check, timeout_s)

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 3,
                     config: dict[str, str] | None = None, full_isr: bool = True) -> dict:
        # librdkafka bounds every request in flight by socket.timeout.ms, operation_timeout
        # included: a broker forwarding the create to a controller being elected (one just
        # killed) answers after the election, which took over 3 s under load.
        admin = self.admin(socket_timeout_ms=35_000)  # must outlive the future (else _DESTROY)
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor, config=config or {})],
            operation_timeout=30, request_timeout=30)
        futures[topic].result(timeout=40)
        return self.wait_topic(topic, partitions, full_isr=full_isr)
