#!/usr/bin/env bash
# Broker RSS before and after producing into one topic of many partitions (issue 10).
# Usage: perf/rss_partitions.sh [BINARY] [PARTITIONS] [RECORDS] [EXTRA serve flags...]
# Prints: rss_start_kb rss_after_create_kb rss_peak_kb rss_end_kb and the bench summary.
set -euo pipefail
BIN=${1:-target/release/strata}
PARTS=${2:-5000}
RECORDS=${3:-2500000}
shift 3 || true
DIR=$(mktemp -d)
PORT=$((20000 + RANDOM % 20000))
"$BIN" serve --data-dir "$DIR/data" --listen 127.0.0.1:$PORT "$@" >"$DIR/broker.log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$DIR"' EXIT
rss() { awk '/VmRSS/{print $2}' /proc/$PID/status; }
hwm() { awk '/VmHWM/{print $2}' /proc/$PID/status; }
for _ in $(seq 100); do "$BIN" topic list --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
START=$(rss)
"$BIN" topic create rss-test --partitions "$PARTS" --bootstrap 127.0.0.1:$PORT >/dev/null
sleep 2
CREATED=$(rss)
"$BIN" bench produce --bootstrap 127.0.0.1:$PORT --topic rss-test --partitions "$PARTS" \
  --records "$RECORDS" --record-size 1024 --acks 1 --json >"$DIR/bench.json"
sleep 2
echo "rss_start_kb=$START rss_after_create_kb=$CREATED rss_peak_kb=$(hwm) rss_end_kb=$(rss)"
cat "$DIR/bench.json"; echo
grep -ci "warn\|error" "$DIR/broker.log" || true
