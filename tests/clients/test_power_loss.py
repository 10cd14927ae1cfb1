"""Power loss: the data dir is on a loop-mounted ext4 that is shut down without flushing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from common import create_topic
from durability import AckLog, assert_acked_survived, produce_after_restart, produce_until
from harness import Broker

PARTITIONS = 3


def run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, timeout=60)
    assert r.returncode == 0, f"{cmd}: {r.stderr.decode(errors='replace')}"


def mount_image(img: Path, mnt: Path) -> None:
    run("mount", "-o", "loop", str(img), str(mnt))


@pytest.fixture
def ext4_mount(tmp_path):
    """A fresh 1 GiB ext4 image loop-mounted at tmp_path/mnt; skipped without root/loop support."""
    if os.geteuid() != 0:
        pytest.skip("power-loss test needs root (mount, xfs_io shutdown)")
    for tool in ("mkfs.ext4", "mount", "umount", "xfs_io"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (apt-get install e2fsprogs xfsprogs)")
    if not Path("/dev/loop-control").exists():
        pytest.skip("no loop devices (/dev/loop-control missing)")
    img, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    run("truncate", "-s", "1G", str(img))
    run("mkfs.ext4", "-q", "-F", str(img))
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"cannot loop-mount here: {r.stderr.decode(errors='replace').strip()}")
    try:
        yield img, mnt
    finally:
        # A broker just killed may still hold files for a moment: fall back to a lazy
        # unmount so no loop mount outlives the test (tmp_path cleanup cannot remove it).
        r = subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)


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
