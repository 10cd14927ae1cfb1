"""The Java client (kafka-clients 4.1.x from tests/clients/java/pom.xml) via
tests/clients/java/ClientCheck.java and GroupCheck.java."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

JAVA_DIR = Path(__file__).resolve().parent / "java"
LIB = JAVA_DIR / "lib"


def classpath(build: Path) -> str:
    return f"{LIB}/*:{build}"


@pytest.fixture(scope="session")
def java_build(tmp_path_factory) -> Path:
    """Compiles ClientCheck.java once per session into a temp dir."""
    if shutil.which("javac") is None or not list(LIB.glob("kafka-clients-*.jar")):
        reason = f"javac or kafka-clients missing in {LIB}; run tests/fetch-jars.sh clients"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    build = tmp_path_factory.mktemp("java-build")
    r = subprocess.run(["javac", "-d", str(build), "-cp", classpath(build), str(JAVA_DIR / "ClientCheck.java"),
                        str(JAVA_DIR / "GroupCheck.java")],
                       capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode()
    return build


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
