"""The Java client (kafka-clients 4.1.x from tests/clients/java/pom.xml) via
tests/clients/java/ClientCheck.java, GroupCheck.java, AdminCheck.java and TxnCheck.java."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from common import compile_java_checks

JAVA_DIR = Path(__file__).resolve().parent / "java"
LIB = JAVA_DIR / "lib"
SOURCES = ["ClientCheck.java", "GroupCheck.java", "AdminCheck.java", "TxnCheck.java"]


def classpath(build: Path) -> str:
    return f"{LIB}/*:{build}"


@pytest.fixture(scope="session")
def java_build(tmp_path_factory) -> Path:
    """Compiles the checks once per session into a temp dir."""
    return compile_java_checks(tmp_path_factory, "java-build", SOURCES)


def run_java(java_build: Path, *args: str, timeout_s: float = 300, env: dict[str, str] | None = None) -> str:
    """Runs one check's main class; returns its stdout after asserting exit 0 and an "OK: " line."""
    r = subprocess.run(["java", "-cp", classpath(java_build), *args], capture_output=True, timeout=timeout_s,
                       env={**os.environ, **(env or {})})
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-6000:]
    assert "OK: " in r.stdout.decode(), out[-3000:]
    return r.stdout.decode()


def test_java_client_round_trip(broker, java_build):
    """Proves the Java client with default (idempotent, acks=all) producer settings and every
    codec, plus a group-less assign()+seek consumer, round-trips every record byte-exact with
    offsets 0..n-1 equal to the acks and end offsets equal to the counts (checked in Java)."""
    r = subprocess.run(["java", "-cp", classpath(java_build), "ClientCheck", broker.bootstrap, "java-roundtrip"],
                       capture_output=True, timeout=300)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-6000:]
    assert "OK: " in r.stdout.decode(), out[-3000:]


def test_java_group_consumer(broker, java_build):
    """Proves the Java client's group consumer (kafka-clients 4.1: FindCoordinator v4, JoinGroup
    v9, SyncGroup v5, OffsetCommit/OffsetFetch v9, ...): two members split a 6-partition topic,
    consume every record exactly once, and leave the group Empty with its offsets committed
    (checked in Java)."""
    from common import create_topic
    create_topic(broker.bootstrap, "java-group", 6)
    r = subprocess.run(["java", "-cp", classpath(java_build), "GroupCheck", broker.bootstrap, "java-group",
                        "java-group-g", "600"], capture_output=True, timeout=180)
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out[-6000:]
    assert "OK: " in r.stdout.decode(), out[-3000:]


def test_java_admin(broker, java_build):
    """Proves the Java Admin client's calls answer as on Kafka 4.1 (the same AdminCheck passes
    against tests/kafka/reference_kafka.py): createTopics with configs (and the configs reported
    back), describeTopics, describeCluster, listOffsets (earliest, latest, timestamp, max
    timestamp, read_committed), describeConfigs and incrementalAlterConfigs SET/DELETE/APPEND/
    SUBTRACT, createPartitions, deleteRecords, list/describe/delete consumer groups and their
    offsets, deleteTopics, an acks=1 non-idempotent producer, and the typed errors for an
    existing topic, a bad replication factor, an unknown config, a missing topic or group, a
    partition decrease, deleteRecords past the end and deleting a group with members."""
    run_java(java_build, "AdminCheck", broker.bootstrap, "java-admin")


def test_java_client_minimum_versions(broker, java_build):
    """Proves every API Strata advertises overlaps the versions kafka-clients 4.1 can send (its
    KIP-896 minimums: 4.x clients refuse anything older), so no advertised API is unusable
    from Java, and that the APIs this suite's Java checks use are all advertised."""
    import kproto
    broker_ranges = kproto.api_versions(broker.bootstrap)
    out = subprocess.run(["java", "-cp", classpath(java_build), "AdminCheck", "versions"], capture_output=True,
                         timeout=120, check=True).stdout.decode()
    client = {}
    for line in out.splitlines():
        key, name, lo, hi = line.split()
        client[int(key)] = (name, int(lo), int(hi))
    for key, (lo, hi) in broker_ranges.items():
        if key not in client:
            continue  # broker-to-broker APIs the client never sends
        name, clo, chi = client[key]
        assert lo <= chi and clo <= hi, f"{name}: Strata {lo}..{hi}, kafka-clients 4.1 {clo}..{chi}"
    used = ["Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch", "FindCoordinator",
            "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "ApiVersions",
            "CreateTopics", "DeleteTopics", "DeleteRecords", "InitProducerId", "AddPartitionsToTxn",
            "AddOffsetsToTxn", "EndTxn", "TxnOffsetCommit", "DescribeConfigs", "IncrementalAlterConfigs",
            "CreatePartitions", "DeleteGroups", "OffsetDelete", "DescribeCluster", "DescribeTopicPartitions"]
    advertised = {client[k][0] for k in broker_ranges if k in client}
    assert not set(used) - advertised, f"not advertised: {sorted(set(used) - advertised)}"


def test_java_transaction_version(broker, java_build):
    """Proves Strata finalizes no transaction.version feature (KIP-890's transaction version 2
    is not implemented), so the 4.1 client's describeFeatures sees none and its producer stays
    on transaction version 1 (EndTxn <= v4, AddPartitionsToTxn <= v3, TxnOffsetCommit <= v4, an
    explicit AddPartitionsToTxn per partition); TxnCheck checks the latter (EXPECT_TV=1). On
    Kafka 4.1, which finalizes transaction.version 2 by default, the same producer uses 2."""
    r = subprocess.run(["java", "-cp", classpath(java_build), "AdminCheck", broker.bootstrap, "features"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    finalized = [line for line in r.stdout.decode().splitlines() if line.startswith("finalized transaction.version")]
    assert all(int(line.split()[3]) < 2 for line in finalized), finalized


# (scenario, extra args, what the fenced/expired producer's commit fails with on Kafka 4.1 at
# transaction version 1, checked against tests/kafka/reference_kafka.py).
TXN_SCENARIOS = [
    ("commit-abort", ["none"], None),
    ("commit-abort", ["zstd"], None),
    ("ctp", [], None),
    ("fence", [], "InvalidProducerEpochException"),
    ("timeout", [], "ProducerFencedException"),
    ("standalone", [], None),
]


@pytest.mark.parametrize("scenario,extra,fenced_by", TXN_SCENARIOS,
                         ids=[f"{s}-{e[0]}" if e else s for s, e, _ in TXN_SCENARIOS])
def test_java_transactions(broker, java_build, scenario, extra, fenced_by):
    """Proves the Java client's transactions on Strata (scenarios in TxnCheck.java, each also
    passing against Kafka 4.1 with transaction.version 1): commit-abort = commits and aborts over
    5 partitions of 2 topics (uncompressed and zstd), read_committed readers never see aborted
    or open records and the LSO (consumer endOffsets, admin listOffsets) stops at the open
    transaction, read_uncommitted readers see all; ctp = consume-transform-produce with
    sendOffsetsToTransaction(offsets, groupMetadata()) whose offsets are invisible until commit
    (require_stable fetches from the consumer and the admin client do not answer them while
    pending), aborted rounds re-copied, a stale generation refused with CommitFailedException,
    every input record in the output once and in order; fence = a second producer with the same
    transactional.id fences the first (InvalidProducerEpochException, as Kafka) and aborts its
    open transaction; timeout = the coordinator aborts a transaction older than
    transaction.timeout.ms and the producer's commit fails with ProducerFencedException;
    standalone = offsets sent for a group no member joined (generation -1 or only a group id)
    commit, and the group stays Empty and simple."""
    out = run_java(java_build, "TxnCheck", broker.bootstrap, f"java-{scenario}", scenario, *extra,
                   env={"EXPECT_TV": "1"})
    assert "transaction version used by the producer: 1" in out, out
    if fenced_by:
        assert fenced_by in out, out
