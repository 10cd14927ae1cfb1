#!/usr/bin/env bash
# A/B of two broker binaries over a small produce matrix: three closed-loop workloads (16
# partitions x 8 producers 1 KiB acks=all, 1 partition 1 KiB acks=all, 16 x 8 100 B acks=1)
# and two open-loop ones (RATE_16 and RATE_1 records/s, acks=all). Each workload runs in the
# order A B B A, a fresh broker on defaults per run, and the disk idle for 3 s between runs
# (as perf/partitions_ab.sh: deleting GBs on a `discard` mount keeps the disk busy). One line
# per run: MB/s, records/s, p50/p99 latency (µs), errors, and the broker's CPU ticks
# (utime + stime of the process, io_uring workers included) over the bench. fio's 1 MiB qd 8
# direct write is measured first, as the run's limit. The bench client is BIN_A's.
# Usage: [DURATION=8] [RATE_16=400000] [RATE_1=200000] perf/produce_ab_matrix.sh BIN_A BIN_B [OUT]
set -uo pipefail
A=$1; B=$2; OUT=${3:-/tmp/produce-ab-matrix.txt}
D=${DATA_DIR:-$PWD/produce-ab-data}; PORT=${PORT:-19092}; SECS=${DURATION:-8}
# shellcheck source=perf/idle_disk.sh
. "$(dirname "$0")/idle_disk.sh"
idle() { wait_idle_disk > /dev/null; }
one() { # bin label bench-flags...
  local bin=$1 label=$2 pid t0 t1 json; shift 2
  rm -rf "$D"; mkdir -p "$D"; json=$(mktemp)
  "$bin" serve --data-dir "$D" --listen 127.0.0.1:$PORT > "/tmp/produce-ab-$label.log" 2>&1 & pid=$!
  for _ in $(seq 100); do "$bin" topic list --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
  t0=$(awk '{print $14+$15}' /proc/$pid/stat)
  "$A" bench produce --bootstrap 127.0.0.1:$PORT --topic ab "$@" --json --label "$label" > "$json" 2>/dev/null
  t1=$(awk '{print $14+$15}' /proc/$pid/stat)
  python3 - "$json" "$label" "$((t1 - t0))" "$*" <<'PY' | tee -a "$OUT"
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print(sys.argv[2], "FAILED (no bench result)", "|", sys.argv[4]); sys.exit()
l = r["latency_us"]
print(sys.argv[2], f'{r["mb_per_sec"]:.1f} MB/s', f'{r["records_per_sec"]:.0f} rec/s', "p50", l["p50"],
      "p99", l["p99"], "errors", r.get("errors"), "cpu_ticks", sys.argv[3], "|", sys.argv[4])
PY
  kill $pid; wait $pid 2>/dev/null; rm -rf "$D" "$json"; sync; idle
}
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) A=$A B=$B" | tee -a "$OUT"
fio --name=w --filename="$D.fio" --rw=write --bs=1M --direct=1 --iodepth=8 --ioengine=libaio --size=2G \
    --output-format=json 2>/dev/null \
  | python3 -c "import json,sys; print('fio 1 MiB qd 8 direct write MB/s', round(json.load(sys.stdin)['jobs'][0]['write']['bw']*1024/1e6,1))" \
  | tee -a "$OUT"
rm -f "$D.fio"; sync; idle
COMMON="--warmup 2 --duration $SECS"
for W in "--partitions 16 --producers 8 --record-size 1024 --acks all $COMMON" \
         "--partitions 1 --producers 1 --record-size 1024 --acks all $COMMON" \
         "--partitions 16 --producers 8 --record-size 100 --acks 1 $COMMON" \
         "--partitions 16 --producers 8 --record-size 1024 --acks all $COMMON --rate ${RATE_16:-400000}" \
         "--partitions 1 --producers 1 --record-size 1024 --acks all $COMMON --rate ${RATE_1:-200000}"; do
  # shellcheck disable=SC2086  # W is a list of flags
  for x in A B B A; do if [ $x = A ]; then one "$A" A $W; else one "$B" B $W; fi; done
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
