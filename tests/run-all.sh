#!/usr/bin/env bash
# Runs the whole test suite: cargo's tests (unit, property, and tests/*.rs integration, which
# include the rskafka client against the real binary), then the Python-driven client and
# broker-fault suite in tests/clients (confluent-kafka, kafka-python, kcat, kafkajs, Java,
# crash, power loss, torn tail, bad input). Both halves always run; the exit code is non-zero
# if either failed. Expects .ci/run's setup (.venv, node_modules, Java jars, kcat).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-.venv/bin/python}"
status=0

echo "=== cargo test --release --no-fail-fast ==="
cargo test --release --no-fail-fast || status=1

# The client tests drive the release binary cargo just built (STRATA_BIN overrides).
export STRATA_BIN="${STRATA_BIN:-$PWD/target/release/strata}"
echo "=== pytest tests/clients (broker: ${STRATA_TEST_BROKER:-strata}) ==="
"$python" -m pytest -v tests/clients "$@" || status=1

exit "$status"
