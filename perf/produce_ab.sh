#!/usr/bin/env bash
# A/B produce throughput of two broker binaries in the same run, alternating A B A B ...
# Usage: perf/produce_ab.sh BIN_A BIN_B [ROUNDS] [bench produce flags...]
# Prints one line per run: label records/s MB/s p99_us broker_cpu_ticks (utime + stime of the
# broker process over the bench, io_uring workers included) rss_mb (the broker's resident size
# 1 s after the bench: what it gives back once the load stops), then the median MB/s of each side.
# ORDER sets the order within a round (default "A B"; "A B B A" evens out drift). Between
# runs the disk is left to go idle (perf/idle_disk.sh): deleting the GBs a run wrote keeps a
# `discard` mount busy into the next run.
# SERVE_ARGS adds flags to both brokers' `serve`, e.g. SERVE_ARGS="--shards 1": with two
# shards the kernel puts the producer's connection on the partition's shard or the other one
# at random (SO_REUSEPORT), and a one-partition run then measures that coin as much as the
# binary (each request crosses the shard mesh, or not).
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-3}; shift 3 || true
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--partitions 1 --records 2000000 --record-size 1024 --acks all)
# shellcheck source=perf/idle_disk.sh
. "$(dirname "$0")/idle_disk.sh"
one() {
  local bin=$1 label=$2 dir port pid t0 t1
  dir=$(mktemp -d); port=$((20000 + RANDOM % 20000))
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
  "$bin" serve --data-dir "$dir/data" --listen 127.0.0.1:$port ${SERVE_ARGS:-} >"$dir/log" 2>&1 & pid=$!
  for _ in $(seq 100); do "$bin" topic list --bootstrap 127.0.0.1:$port >/dev/null 2>&1 && break; sleep 0.2; done
  t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  "$B" bench produce --bootstrap 127.0.0.1:$port --topic ab "${FLAGS[@]}" --json --label "$label" >"$dir/bench.json" 2>/dev/null || true
  t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  sleep 1; rss=$(awk '/^VmRSS/ {print int($2 / 1024)}' /proc/$pid/status)
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["label"], round(r["records_per_sec"]), round(r["mb_per_sec"],1), r["latency_us"]["p99"], sys.argv[2], sys.argv[3])' \
    "$dir/bench.json" "$((t1 - t0))" "$rss" || echo "$label FAILED (no bench result)"
  kill $pid; wait $pid 2>/dev/null || true; rm -rf "$dir"; sync; wait_idle_disk >/dev/null
}
# Each run's line is printed as it comes and kept in a file for the summary (not with
# `tee /dev/stderr`, which reopens a redirected stderr file and truncates what was written
# before, as perf/consume_ab.sh notes).
ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT
for i in $(seq "$ROUNDS"); do
  for x in ${ORDER:-A B}; do
    if [ "$x" = A ]; then one "$A" A | tee -a "$ROWS"; else one "$B" B | tee -a "$ROWS"; fi
  done
done
python3 -c '
import sys, statistics
rows=[l.split() for l in sys.stdin if l.strip()]
for side in "AB":
    v=[float(r[2]) for r in rows if r[0]==side and r[1]!="FAILED"]
    print(side, "median MB/s", statistics.median(v), "runs", v)
a=statistics.median(float(r[2]) for r in rows if r[0]=="A" and r[1]!="FAILED"); b=statistics.median(float(r[2]) for r in rows if r[0]=="B" and r[1]!="FAILED")
print("B/A", round(b/a, 3))' <"$ROWS"
