"""Power loss: the data dir is on a loop-mounted ext4 that is shut down without flushing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from common import create_topic
from durability import AckLog, assert_acked_survived, produce_after_restart, produce_until
from harness import Broker, loop_mounted_ext4

PARTITIONS = 3


def run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    assert r.returncode == 0, f"{cmd}: {r.stderr.decode(errors='replace')}"


def mount_image(img: Path, mnt: Path) -> None:
    run("mount", "-o", "loop", str(img), str(mnt))


@pytest.fixture
def ext4_mount(tmp_path):
    """A fresh 1 GiB ext4 loop-mounted at tmp_path/mnt."""
    with loop_mounted_ext4(tmp_path, 1 << 30, tools=("xfs_io",)) as (img, mnt):
        yield img, mnt


def test_power_cut_keeps_every_acked_record(ext4_mount, tmp_path):
    """Proves acked records survive a power cut: while confluent-kafka produces with acks=all,
    `xfs_io -x -c shutdown` drops everything not yet on disk; after kill -9, remount and
    restart, every delivery-confirmed record is at its offset and offsets are contiguous."""
    img, mnt = ext4_mount
    b = Broker(mnt / "data", tmp_path / "logs")
    if not b.persistent:
        pytest.skip(f"{b.kind} runs in memory here")
    try:
        b.start()
        topic = "power-loss"
        create_topic(b.bootstrap, topic, PARTITIONS)
        log = AckLog()

        def power_cut():
            # No -f: the journal is not flushed, as if the power went out right now.
            run("xfs_io", "-x", "-c", "shutdown", str(mnt))

        produce_until(b.bootstrap, topic, PARTITIONS, log, acked_target=2000, on_target=power_cut)
        b.kill9()
        run("umount", str(mnt))
        mount_image(img, mnt)
        b.start()
        consumed = assert_acked_survived(b.bootstrap, topic, PARTITIONS, log)
        produce_after_restart(b.bootstrap, topic, PARTITIONS, consumed)
    finally:
        b.kill9()
