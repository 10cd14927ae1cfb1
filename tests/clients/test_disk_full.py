"""A full disk stays operable: the data dir is on a small loop-mounted ext4 that produce fills."""

from __future__ import annotations

import subprocess
import time

import pytest
from confluent_kafka import KafkaError, Producer

from common import create_topic, read_all
from harness import Broker, loop_mounted_ext4, strata_bin

FS_BYTES = 300 * 1024 * 1024
VALUE = b"x" * (64 * 1024)


def run(*cmd: str) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, timeout=120)
    assert r.returncode == 0, f"{cmd}: {r.stderr.decode(errors='replace')}"
    return r


@pytest.fixture
def small_ext4(tmp_path):
    """A fresh 300 MB ext4 loop-mounted at tmp_path/mnt."""
    with loop_mounted_ext4(tmp_path, FS_BYTES) as (img, mnt):
        yield mnt


def produce_until_refused(bootstrap: str, topic: str, limit_s: float = 240) -> tuple[int, list]:
    """Produces 64 KiB records (acks=all, no retries) until the broker refuses them.

    Returns (records acknowledged, errors seen)."""
    acked = 0
    errors: list = []

    def on_delivery(err, msg):
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(err)

    p = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "retries": 0,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "queue.buffering.max.kbytes": 8192,
    })
    deadline = time.monotonic() + limit_s
    while not errors and time.monotonic() < deadline:
        for _ in range(64):
            try:
                p.produce(topic, VALUE, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    p.flush(60)
    return acked, errors


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    result: list = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0,
                  "message.timeout.ms": 30000})
    p.produce(topic, b"after", on_delivery=lambda err, msg: result.append(err))
    p.flush(60)
    assert result, "no delivery report"
    return result[0]


def strata_cli(bootstrap: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(strata_bin()), *args, "--bootstrap", bootstrap],
                          capture_output=True, timeout=timeout)


def test_full_disk_refuses_produce_and_stays_operable(small_ext4, tmp_path):
    """Proves a full disk is recoverable without a restart: on a 300 MB ext4, produce fills it
    until the broker answers KAFKA_STORAGE_ERROR (free space under the reserve); every
    acknowledged record is still readable; `strata topic delete` and `strata topic create`
    still work (the metadata log has room); and once the deletion frees space, produce works
    again on the same broker process."""
    b = Broker(small_ext4 / "data", tmp_path / "logs")
    if not b.persistent:
        pytest.skip(f"{b.kind} runs in memory here")
    try:
        b.start()
        create_topic(b.bootstrap, "fill", 1)
        create_topic(b.bootstrap, "keep", 1)
        assert produce_one(b.bootstrap, "keep") is None

        # Fill until a produce is refused even after a few free-space polls: near the reserve
        # the estimate (lowered by every append between polls) may refuse a little early
        # and the next measurement accept again, so refusals settle only once the
        # measured free space is under the reserve.
        acked = 0
        for _ in range(20):
            more, errors = produce_until_refused(b.bootstrap, "fill")
            acked += more
            assert errors, "the disk never filled"
            assert all(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in errors), errors
            time.sleep(1)
            err = produce_one(b.bootstrap, "keep")
            if err is not None:
                assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
                break
        else:
            pytest.fail("produce was never refused for good")
        assert acked > 1000, f"only {acked} records before the disk was full"
        assert b.alive()
        log = b.log_path.read_text(errors="replace")
        assert "refusing produce" in log
        assert "poisoned" not in log, "a log failed for lack of space"

        # Every acknowledged record is still there.
        consumed = read_all(b.bootstrap, "fill", 1, deadline_s=120, at_least={0: acked})
        assert len(consumed[0]) >= acked
        assert all(m.value() == VALUE for m in consumed[0][:acked])

        # The way out works: metadata changes still commit while produce is refused.
        r = strata_cli(b.bootstrap, "topic", "create", "meta-works", "--partitions", "1")
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        r = strata_cli(b.bootstrap, "topic", "delete", "fill")
        assert r.returncode == 0, r.stderr.decode(errors="replace")

        # Space comes back: produce resumes on the same process.
        deadline = time.monotonic() + 60
        while True:
            err = produce_one(b.bootstrap, "keep")
            if err is None:
                break
            assert time.monotonic() < deadline, f"produce still refused after delete: {err}"
            time.sleep(1)
        assert produce_one(b.bootstrap, "meta-works") is None
        keep = read_all(b.bootstrap, "keep", 1, at_least={0: 2})
        assert [m.value() for m in keep[0]][-1] == b"after"
        assert b.alive()
        assert "metadata log is shut down" not in b.log_path.read_text(errors="replace")
    finally:
        b.kill9()
