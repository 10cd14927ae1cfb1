"""pytest fixtures: a fresh broker per test, on a free loopback port, with a temp data dir."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Broker  # noqa: E402
from tmp_cleanup import free_tmp_path_of_passed_test, remember_report  # noqa: E402,F401


@pytest.fixture
def broker_factory(tmp_path):
    """Builds brokers that are always stopped (kill -9 if SIGTERM fails) when the test ends."""
    made: list[Broker] = []

    def make(data_dir: Path | None = None, port: int | None = None, start: bool = True,
             shards: int = 2, extra_args: list[str] | None = None) -> Broker:
        b = Broker(data_dir or tmp_path / f"data{len(made)}", tmp_path / "logs", port=port, shards=shards,
                   extra_args=extra_args)
        made.append(b)
        return b.start() if start else b

    yield make
    for b in made:
        try:
            b.stop()
        finally:
            b.kill9()


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()


@pytest.fixture
def persistent_broker(broker_factory) -> Broker:
    b = broker_factory(start=False)
    if not b.persistent:
        pytest.skip(f"{b.kind} runs in memory here: restart/durability tests need strata")
    return b.start()


def pytest_report_header(config):
    return f"broker under test: {os.environ.get('STRATA_TEST_BROKER', 'strata')}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On failure, attach the tail of each broker's stderr so a red test explains itself."""
    outcome = yield
    report = outcome.get_result()
    remember_report(item, report)
    if report.when == "call" and report.failed:
        tmp = item.funcargs.get("tmp_path")
        if tmp is not None:
            for log in sorted((Path(tmp) / "logs").glob("*.stderr")):
                text = log.read_text(errors="replace").splitlines()[-40:]
                report.sections.append((f"broker log {log.name}", "\n".join(text)))


@pytest.fixture
def cleaner_env(monkeypatch):
    """A cleaner that looks every 200 ms and cleans any dirty log (compaction tests; set
    before the broker starts, which reads it from its environment)."""
    monkeypatch.setenv("STRATA_LOG_CLEANER_BACKOFF_MS", "200")
    monkeypatch.setenv("STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO", "0.01")
