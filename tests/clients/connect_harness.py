"""Process control for the Kafka Connect tests (test_connect.py): a Kafka Connect 4.1 distributed
worker and a private PostgreSQL cluster, each started, probed, killed and restarted by the test.

The worker is `org.apache.kafka.connect.cli.ConnectDistributed` from the jars of
`tests/fetch-jars.sh connect` (connect-runtime, connect-file, connect-json, the log4j binding),
run through tests/kafka/run-class.sh; Debezium's PostgreSQL connector is a plugin directory
filled by `tests/fetch-jars.sh debezium`. Readiness is the worker's REST API answering
`GET /connectors` (it does once it has read its config topic) and its log saying it joined its
group (it does after the coordinator's initial rebalance delay; only then are connectors
created and assigned).

PostgreSQL is Debian's (`apt-get install postgresql`): `initdb` into a fresh temp dir (as the
`postgres` user when the tests run as root, since initdb refuses root), started with
`wal_level=logical` on a free loopback port with trust authentication, and driven with `psql`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from harness import REPO_ROOT, free_port

KAFKA_DIR = REPO_ROOT / "tests" / "kafka"
RUN_CLASS = KAFKA_DIR / "run-class.sh"
CONNECT_LIB = KAFKA_DIR / "connect" / "lib"
# The plugin.path entry: its subdirectory lib/ is one plugin (Debezium and its own jars).
DEBEZIUM_PLUGINS = KAFKA_DIR / "debezium"
# A worker scans its plugins, reads its three topics and joins its group before it answers;
# on a loaded 2-core CI machine that has taken 40 s.
WORKER_READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 30.0


def jars_missing() -> str | None:
    """Why the Connect tests cannot run here, or None when the jars are in place."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not list(CONNECT_LIB.glob("connect-runtime-*.jar")):
        return f"no Connect jars in {CONNECT_LIB}: run tests/fetch-jars.sh connect"
    if not list((DEBEZIUM_PLUGINS / "lib").glob("debezium-connector-postgres-*.jar")):
        return f"no Debezium jars in {DEBEZIUM_PLUGINS}/lib: run tests/fetch-jars.sh debezium"
    return None


class ConnectError(Exception):
    """The worker's REST API answered with an error status."""


class ConnectWorker:
    """One distributed worker in group `connect` against `bootstrap`, REST on a free port."""

    def __init__(self, workdir: Path, bootstrap: str, group: str = "connect"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bootstrap = bootstrap
        self.group = group
        self.rest_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"worker-{self.starts}.log"

    def properties(self) -> dict[str, str]:
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "config.storage.topic": f"{self.group}-configs",
            "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "plugin.path": str(DEBEZIUM_PLUGINS),
            # Every plugin here ships ServiceLoader manifests: skips the slow reflective scan.
            "plugin.discovery": "service_load",
            # Source offsets and sink commits every second, so a kill loses little work.
            "offset.flush.interval.ms": "1000",
            # A worker killed and restarted gets its tasks back after 5 s, not Kafka's 5 min.
            "scheduled.rebalance.max.delay.ms": "5000",
        }

    def start(self) -> "ConnectWorker":
        assert not self.alive(), "worker already running"
        self.starts += 1
        props = self.workdir / "worker.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        env = dict(os.environ)
        env["KAFKA_LIB_DIR"] = str(CONNECT_LIB)
        env["KAFKA_LOG_LEVEL"] = os.environ.get("STRATA_CONNECT_LOG_LEVEL", "INFO")
        # A short-lived worker on a shared 2-core machine: C1 only and the serial collector
        # start faster and leave the cores to the brokers.
        env["KAFKA_OPTS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(RUN_CLASS), "org.apache.kafka.connect.cli.ConnectDistributed", str(props)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True,
        )
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = WORKER_READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.request("GET", "/connectors")
                if "Joined group at generation" in self.log_path.read_text(errors="replace"):
                    return
                last = TimeoutError("REST answers, group not joined yet")
                time.sleep(0.5)
            except (OSError, ConnectError) as e:
                last = e
                time.sleep(0.5)
        raise TimeoutError(f"worker REST not ready after {timeout_s}s ({last}):\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL: no offset flush, no group leave, no task stop."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> None:
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill9()

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no worker log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_problems(self) -> list[str]:
        """The WARN and ERROR lines of every run of this worker, for a failing test's message."""
        out = []
        for log in sorted(self.workdir.glob("worker-*.log")):
            out += [line for line in log.read_text(errors="replace").splitlines()
                    if "] WARN " in line or "] ERROR " in line]
        return out

    def request(self, method: str, path: str, body: dict | None = None, timeout_s: float = 30.0):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise ConnectError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from e
        return json.loads(raw) if raw else None

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        self.request("PUT", f"/connectors/{name}/config", config)

    def wait_running(self, name: str, timeout_s: float = 120.0) -> dict:
        """Waits until the connector and all its tasks are RUNNING; fails at once on FAILED."""
        deadline = time.monotonic() + timeout_s
        status: dict | None = None
        while time.monotonic() < deadline:
            try:
                status = self.request("GET", f"/connectors/{name}/status")
            except (OSError, ConnectError):
                time.sleep(0.5)
                continue
            states = [status["connector"]["state"]] + [t["state"] for t in status["tasks"]]
            if "FAILED" in states:
                raise AssertionError(f"connector {name} failed: {json.dumps(status)[:4000]}")
            if status["tasks"] and all(s == "RUNNING" for s in states):
                return status
            time.sleep(0.5)
        raise TimeoutError(f"connector {name} not RUNNING after {timeout_s}s: {status}\n{self.log_tail()}")


def postgres_bin_dir() -> Path | None:
    """Debian's newest installed PostgreSQL server binaries (/usr/lib/postgresql/<v>/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    """A private PostgreSQL cluster for one test: initdb in a temp dir, logical decoding on."""

    def __init__(self):
        bindir = postgres_bin_dir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server (apt-get install postgresql)")
        self.bindir = bindir
        self.port = free_port()
        # Not under pytest's tmp_path: that is private to root, and the server runs as postgres.
        self.dir = Path(tempfile.mkdtemp(prefix="strata-pg-"))
        self.as_postgres: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            self.as_postgres = ["runuser", "-u", "postgres", "--"]
        self.data = self.dir / "data"
        self.started = False

    def _run(self, args: list[str], timeout_s: float = 120.0) -> str:
        r = subprocess.run(self.as_postgres + args, capture_output=True, timeout=timeout_s)
        out = (r.stdout + r.stderr).decode(errors="replace")
        assert r.returncode == 0, f"{args[0]} failed ({r.returncode}):\n{out}"
        return out

    def start(self) -> "Postgres":
        self._run([str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                   "--auth=trust", "-E", "UTF8", "--no-sync"])
        options = " ".join([
            f"-p {self.port}", f"-k {self.dir}", "-c listen_addresses=127.0.0.1",
            "-c wal_level=logical", "-c max_wal_senders=4", "-c max_replication_slots=4",
            # The database is not what is under test: its durability is not needed.
            "-c fsync=off", "-c synchronous_commit=off",
        ])
        self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "postgres.log"),
                   "-o", options, "-w", "-t", "60", "start"])
        self.started = True
        return self

    def sql(self, statements: str) -> list[list[str]]:
        """Runs SQL through psql (stops at the first error); returns the last result's rows."""
        r = subprocess.run(
            [str(self.bindir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", "postgres", "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1",
             "-c", statements],
            capture_output=True, timeout=60)
        assert r.returncode == 0, f"psql failed: {r.stderr.decode(errors='replace')}\n{statements[:2000]}"
        return [line.split("\t") for line in r.stdout.decode().splitlines() if line]

    def stop(self) -> None:
        try:
            if self.started:
                self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                           "-w", "stop"], timeout_s=60)
                self.started = False
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
