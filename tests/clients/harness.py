"""Start, probe and stop a real broker process for the client tests.

The broker under test is `strata serve` by default (STRATA_BIN, else target/release/strata,
else target/debug/strata). STRATA_TEST_BROKER=tansu selects the Tansu broker (TANSU_BIN, else
`tansu` on PATH) for debugging the tests themselves while Strata is being written; Tansu keeps
data in memory here, so tests that need a data dir skip under it.

Readiness is a TCP connect plus a raw Kafka ApiVersions round trip, polled with a deadline.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import kproto
from ports import free_port  # noqa: F401  (tests import it from here)

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = float(os.environ.get("STRATA_TEST_READY_TIMEOUT_S", "30"))
STOP_TIMEOUT_S = 15.0


def broker_kind() -> str:
    return os.environ.get("STRATA_TEST_BROKER", "strata")


def strata_bin() -> Path:
    env = os.environ.get("STRATA_BIN")
    if env:
        return Path(env)
    for profile in ("release", "debug"):
        candidate = REPO_ROOT / "target" / profile / "strata"
        if candidate.exists():
            return candidate
    raise RuntimeError("no strata binary: build it (cargo build --release) or set STRATA_BIN")


def tansu_bin() -> str:
    found = os.environ.get("TANSU_BIN") or shutil.which("tansu")
    if not found:
        raise RuntimeError("STRATA_TEST_BROKER=tansu but no TANSU_BIN and no tansu on PATH")
    return found


class Broker:
    """One broker process bound to 127.0.0.1:port with its own data dir and stderr log file."""

    def __init__(self, data_dir: Path, log_dir: Path, port: int | None = None, shards: int = 2,
                 extra_args: list[str] | None = None):
        self.kind = broker_kind()
        # More `strata serve` flags. With --listeners, --listen/--advertised-listener are left
        # out (`listeners` replaces them); `port` must then be a PLAINTEXT listener's, the one
        # readiness is probed on.
        self.extra_args = list(extra_args or [])
        self.data_dir = Path(data_dir)
        self.log_dir = Path(log_dir)
        self.port = port or free_port()
        self.shards = shards
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # Tansu here has only its in-memory engine: nothing survives a restart.
    @property
    def persistent(self) -> bool:
        return self.kind == "strata"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        addr = f"127.0.0.1:{self.port}"
        if self.kind == "tansu":
            return [
                tansu_bin(), "broker",
                "--listener-url", f"tcp://{addr}",
                "--advertised-listener-url", f"tcp://{addr}",
                "--storage-engine", "memory://tansu/",
            ]
        listen = [] if "--listeners" in self.extra_args else [
            "--listen", addr,
            "--advertised-listener", addr,
        ]
        return [
            str(strata_bin()), "serve",
            *listen,
            "--data-dir", str(self.data_dir),
            "--shards", str(self.shards),
            *self.extra_args,
        ]

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"broker-{self.port}-{self.starts}.stderr"

    def start(self) -> "Broker":
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.starts += 1
        log = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True,
        )
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker exited with {self.proc.returncode} before ready:\n{self.log_tail()}")
            try:
                kproto.api_versions(self.bootstrap, timeout_s=2.0)
                return
            except (OSError, kproto.ProtocolError) as e:
                last_error = e
                time.sleep(0.05)
        raise TimeoutError(
            f"broker not ready on {self.bootstrap} after {timeout_s}s ({last_error}):\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        """SIGKILL: no chance to flush anything the broker has not already made durable."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int | None:
        """SIGTERM (graceful), escalating to SIGKILL after a deadline. Returns the exit code."""
        if not self.alive():
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
            raise AssertionError(f"broker ignored SIGTERM for {STOP_TIMEOUT_S}s:\n{self.log_tail()}")

    def restart(self) -> "Broker":
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:])


@contextmanager
def loop_mounted_ext4(tmp_path: Path, size_bytes: int, tools: tuple[str, ...] = ()):
    """Yields (image, mount point) of a fresh ext4 image of `size_bytes` loop-mounted under
    tmp_path; skips the test without root, loop devices or the named tools. Used by the
    power-loss and full-disk tests, which need a filesystem of their own to break or fill."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("needs root (mount)")
    for tool in ("mkfs.ext4", "mount", "umount", *tools):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (apt-get install e2fsprogs xfsprogs)")
    if not Path("/dev/loop-control").exists():
        pytest.skip("no loop devices (/dev/loop-control missing)")
    img, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    mnt.mkdir()
    for cmd in (["truncate", "-s", str(size_bytes), str(img)], ["mkfs.ext4", "-q", "-F", str(img)]):
        r = subprocess.run(cmd, capture_output=True, timeout=120)
        assert r.returncode == 0, f"{cmd}: {r.stderr.decode(errors='replace')}"
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
