#!/usr/bin/env bash
# The cluster fault tests under load (kill -9 / SIGSTOP / network partition of the leader,
# kill -9 of the active controller; idempotence off and on), each ending with the
# Jepsen-style checker (tests/cluster/checker.py). Needs root (network namespaces) and a
# release build. tests/run-all.sh (CI) runs them with the rest of tests/cluster; this runs
# only them, e.g. repeatedly while chasing a flaky failure.
set -u
cd "$(dirname "$0")/../.."
python="${PYTHON:-.venv/bin/python}"
export STRATA_BIN="${STRATA_BIN:-$PWD/target/release/strata}"
exec "$python" -m pytest -v tests/cluster -m faults "$@"
