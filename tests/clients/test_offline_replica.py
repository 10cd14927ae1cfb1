"""A replica whose log cannot be opened is offline, as Kafka reports one in a failed log dir."""

from __future__ import annotations

import json
import subprocess
import time

import kproto
from harness import strata_bin

KAFKA_STORAGE_ERROR = 56
TIMEOUT_S = 60


def strata(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([str(strata_bin()), *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, f"strata {' '.join(args)} exited {r.returncode}:\n{r.stderr}"
    return r


def status(bootstrap: str) -> dict:
    return json.loads(strata("cluster", "status", "--json", "--bootstrap", bootstrap).stdout)


def produce_error(bootstrap: str, topic: str, partition: int) -> int:
    [(_, _, error, _)] = kproto.produce_raw(bootstrap, topic, partition, kproto.record_batch([(b"k", b"v")]))
    return error


def wait_for(what: str, check, timeout_s: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s}s"
        time.sleep(0.2)


def test_unopenable_replica_is_offline_not_in_sync(broker_factory, tmp_path):
    """Proves a replica whose log cannot be opened (here a regular file where its partition
    directory belongs) is not reported healthy: the broker logs an ERROR with the reason,
    the partition has no leader and lists the replica offline, `strata cluster status` shows
    it OFFLINE with the reason, a produce to it answers KAFKA_STORAGE_ERROR (56) while the
    topic's other partition works; after the cause is removed, a restart brings it back."""
    data = tmp_path / "data"
    b = broker_factory(data_dir=data)
    (data / "broken-0").write_text("a file where the partition directory belongs\n")
    strata("topic", "create", "broken", "--partitions", "2", "--bootstrap", b.bootstrap)

    def offline_partition():
        parts = {p["partition"]: p for p in status(b.bootstrap)["partitions"] if p["topic"] == "broken"}
        p0 = parts.get(0)
        return parts if p0 and p0["leader"] == -1 and p0["offline_replicas"] == [0] else None

    parts = wait_for("broken-0 offline", offline_partition)
    [reason] = parts[0]["offline_reasons"].values()
    assert "cannot open the log" in reason and "broken-0" in reason, reason
    assert parts[1]["leader"] == 0 and parts[1]["offline_replicas"] == [], parts[1]
    text = strata("cluster", "status", "--bootstrap", b.bootstrap).stdout
    assert any(line.split()[:2] == ["broken", "0"] and line.endswith("OFFLINE") for line in text.splitlines()), text
    assert "broken-0 on broker 0: cannot open the log" in text, text

    assert produce_error(b.bootstrap, "broken", 0) == KAFKA_STORAGE_ERROR
    assert produce_error(b.bootstrap, "broken", 1) == 0
    log = b.log_path.read_text(errors="replace")
    assert "ERROR" in log and "replica offline until restart" in log, b.log_tail()

    # The operator removes the cause and restarts: the replica opens and leads again.
    b.stop()
    (data / "broken-0").unlink()
    b.start()
    wait_for("broken-0 back", lambda: produce_error(b.bootstrap, "broken", 0) == 0)
    p0 = next(p for p in status(b.bootstrap)["partitions"] if p["topic"] == "broken" and p["partition"] == 0)
    assert (p0["leader"], p0["isr"], p0["offline_replicas"], p0["offline_reasons"]) == (0, [0], [], {}), p0
