#!/usr/bin/env bash
# Log cleaner measurements (issue 12), all in one run on one disk:
#   1. the disk's limit: fio direct-I/O, 1 MiB blocks, 50/50 sequential read+write (the
#      cleaner's own pattern: read a segment, write the cleaned one), and each alone;
#   2. cleaner throughput, alone: a compacted log filled with the cleaner off, then a start
#      with it on and no load; the "log cleaned" line gives bytes read and the pass's time;
#   3. latency on the same shard (--shards 1) with the cleaner idle and busy, interleaved in
#      one broker run (idle, busy, idle, busy): end-to-end (produce acks=all + fetch) open
#      loop at --rate, and produce closed loop; the report says how much of each busy
#      bench the cleaner's pass covered.
# Usage: perf/cleaner.sh [--data-dir DIR] [--fill-gb N] [--rounds N] [--rate REC/S]
#                        [--bench-s S] [--settle-s S] [--no-fio] [--out DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
DATA_DIR=/var/tmp/strata-cleaner-perf
FILL_GB=3
FIO_S=20        # seconds per fio job
BENCH_S=8       # seconds per measured bench
ROUNDS=2        # idle/busy rounds
SETTLE_S=5      # seconds between a pass's end and the next idle phase
RATE=10000      # records/s of the open-loop end-to-end bench
OUT="$ROOT/perf/out-cleaner"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data-dir) DATA_DIR="$2"; shift 2 ;;
    --fill-gb) FILL_GB="$2"; shift 2 ;;
    --quick) FILL_GB=0.2; FIO_S=3; BENCH_S=2; shift ;;  # checks the script, measures nothing
    --out) OUT="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --settle-s) SETTLE_S="$2"; shift 2 ;;
    --rate) RATE="$2"; shift 2 ;;
    --bench-s) BENCH_S="$2"; shift 2 ;;
    --no-fio) FIO_S=0; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT" "$DATA_DIR"; rm -rf "$DATA_DIR/broker"
: > "$OUT/broker.log"; : > "$OUT/commands.txt"; : > "$OUT/bench.jsonl"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
PORT=$((30000 + RANDOM % 9000)); BOOTSTRAP=127.0.0.1:$PORT; BROKER_PID=""
stop_broker() {
  if [[ -n "$BROKER_PID" ]]; then kill "$BROKER_PID" 2>/dev/null || true; wait "$BROKER_PID" 2>/dev/null || true; BROKER_PID=""; fi
}
trap stop_broker EXIT
start_broker() { # $@ = STRATA_* settings
  echo "env $* strata serve --shards 1 --listen $BOOTSTRAP --data-dir $DATA_DIR/broker" >> "$OUT/commands.txt"
  env "$@" "$BIN" serve --shards 1 --listen "$BOOTSTRAP" --data-dir "$DATA_DIR/broker" >> "$OUT/broker.log" 2>&1 &
  BROKER_PID=$!
  for _ in $(seq 1 600); do
    "$BIN" topic list --bootstrap "$BOOTSTRAP" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "broker did not start" >&2; return 1
}
bench() { # label, then `strata bench` arguments
  local label="$1"; shift
  echo "strata bench $* --bootstrap $BOOTSTRAP --json --label $label" >> "$OUT/commands.txt"
  log "bench $label"
  "$BIN" bench "$@" --bootstrap "$BOOTSTRAP" --json --label "$label" >> "$OUT/bench.jsonl"
}

echo "uptime before: $(uptime)" > "$OUT/load.txt"
# 1. fio on the data dir's filesystem
f="$DATA_DIR/fio.tmp"
for job in "rw --rwmixread=50" "read" "write"; do
  [[ "$FIO_S" == 0 ]] && break
  name=${job%% *}
  cmd="fio --name=$name --filename=$f --rw=$job --bs=1M --direct=1 --size=2G --ioengine=io_uring --iodepth=8 --runtime=$FIO_S --time_based --output-format=json"
  echo "$cmd" >> "$OUT/commands.txt"
  log "fio $name"
  # shellcheck disable=SC2086
  $cmd > "$OUT/fio-$name.json"
done
rm -f "$f"

# 2. Cleaner alone: a compacted log filled with the cleaner off, then a start with it on and
#    no other load; the pass's "log cleaned" line gives its bytes and duration.
RECORDS=$(python3 -c "print(int($FILL_GB * 1024 * 1024))")   # 1 KiB values
CLEANER_ON=(STRATA_LOG_CLEANER_ENABLE=true STRATA_LOG_CLEANER_BACKOFF_MS=100 STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO=0.01)
fill() { # topic, then extra bench arguments
  local topic="$1"; shift
  bench "fill-$topic" produce --topic "$topic" --key-distribution fixed:20000 --record-size 1024 \
    --topic-config cleanup.policy=compact --topic-config segment.bytes=67108864 \
    --records "$RECORDS" --acks 1 --producers 2 "$@"
}
wait_cleaned() { # topic: waits (up to 4 min) for its pass's line
  for _ in $(seq 1 480); do grep -q "log cleaned topic=$1 " "$OUT/broker.log" && return 0; sleep 0.5; done
  echo "no cleaner pass over $1" >&2; return 1
}
start_broker STRATA_LOG_CLEANER_ENABLE=false
fill alone
stop_broker
start_broker "${CLEANER_ON[@]}"
wait_cleaned alone
stop_broker

# 3. Latency on the same shard (--shards 1), the cleaner idle vs busy, interleaved in one
#    broker run (idle, busy, idle, busy, ...) so the machine's drift hits both alike. Each
#    round has its own compacted log, filled up front with min.cleanable.dirty.ratio=1.0 (a
#    never-cleaned log's ratio is 1.0, not above it: the cleaner leaves it alone); a busy
#    phase lowers that log's ratio to 0.01, which starts a pass, and runs the benches while
#    it cleans. Benches: end-to-end (produce acks=all, then fetch) open loop at --rate, which
#    is the latency the issue's target is about, then produce closed loop (throughput).
start_broker "${CLEANER_ON[@]}"
for r in $(seq 1 "$ROUNDS"); do
  fill "dirty$r" --topic-config min.cleanable.dirty.ratio=1.0
done
"$BIN" topic create load --partitions 1 --bootstrap "$BOOTSTRAP" >/dev/null 2>&1 || true
echo "uptime mid: $(uptime)" >> "$OUT/load.txt"
: > "$OUT/windows.txt"
phase() { # idle|busy, round
  local from; from=$(date -u +%s.%N)
  bench "$1-e2e-$2" e2e --topic load --record-size 1024 --acks all --producers 2 --rate "$RATE" \
    --duration "$BENCH_S" --warmup 1 --histogram-log "$OUT/hist-$1-e2e-$2.log"
  bench "$1-closed-$2" produce --topic load --record-size 1024 --acks all --producers 4 \
    --duration "$BENCH_S" --warmup 1 --histogram-log "$OUT/hist-$1-closed-$2.log"
  echo "$1 $2 $from $(date -u +%s.%N)" >> "$OUT/windows.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  phase idle "$r"
  echo "strata topic alter dirty$r --config min.cleanable.dirty.ratio=0.01" >> "$OUT/commands.txt"
  "$BIN" topic alter "dirty$r" --config min.cleanable.dirty.ratio=0.01 --bootstrap "$BOOTSTRAP" >/dev/null
  sleep 0.5   # the cleaner's backoff is 100 ms: its pass has started
  phase busy "$r"
  wait_cleaned "dirty$r"
  # The pass ends by swapping in the cleaned segment and deleting the old files (1.6 GB at
  # --fill-gb 1.5, freed by ext4 in the journal commits that produce's fdatasync waits on).
  # That end belongs to the busy phase: with --bench-s long enough the busy window covers
  # it (the report's "covered" column drops below 100 %); then let its after-effects settle
  # so the next idle phase is not charged for them (the run of 07:26 on 2026-12-02 started
  # idle 3 the instant pass 2 ended and measured a 478 ms produce p99 "idle").
  sleep "$SETTLE_S"
done
stop_broker
echo "uptime after: $(uptime)" >> "$OUT/load.txt"
python3 "$ROOT/perf/cleaner_report.py" "$OUT"
