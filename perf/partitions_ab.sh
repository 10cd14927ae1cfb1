#!/usr/bin/env bash
# Many-partition produce, before/after of two binaries in one run (issue 14's "5,000
# partitions, 1 KiB acks=all, 4 producers" figure). For each binary, in the order A B B A A B
# so drift of this shared machine hits both: a fresh one-node broker on built-in defaults,
# one topic of PARTITIONS partitions, a 4 s warm-up run (the first write to each partition
# creates its segment file), then the measured 10 s run; the broker's CPU ticks over the
# measured run are printed beside it. Between runs the data is removed and the script waits
# until the disk has been idle for 3 s (at most 30 s): with ext4's `discard` the removal of
# ~10 GB of segments keeps the disk busy and would slow the next run.
#
# `strata bench produce` sends each request to the next partition in turn, every producer
# starting at partition 0 in every run, so a short warm-up writes only the first partitions:
# at 5,000 partitions and 2,000-3,000 requests/s the 1 + 4 s run reaches half to three
# quarters of them, and the measured run then pays each remaining partition's first write (segment file created, directory fsync'd,
# first leader-epoch and high-watermark checkpoints written with create-and-rename) inside the
# 10 s. WARM_EVERY_PARTITION=1 adds a warm-up of 4 x PARTITIONS batches before it (each of the
# 4 producers walks every partition once), so the measured run is the steady state.
#
# Usage: [WARM_EVERY_PARTITION=1] perf/partitions_ab.sh BIN_A BIN_B [PARTITIONS (5000)]
# Output: one line per run on stdout and in $OUT (default /tmp/partitions-ab.txt).
set -uo pipefail
A=$1; B=$2; P=${3:-5000}
OUT=${OUT:-/tmp/partitions-ab.txt}; : > "$OUT"
D=${PERF_DATA_DIR:-/var/tmp/strata-partitions-ab}
PORT=${PORT:-19092}
# shellcheck source=perf/idle_disk.sh
. "$(dirname "$0")/idle_disk.sh"
idle() { echo "disk idle after $(wait_idle_disk)s" >> "$OUT"; }
one() { # binary label
  rm -rf "$D"; mkdir -p "$D"
  "$1" serve --data-dir "$D" --listen 127.0.0.1:$PORT > "/tmp/partitions-ab-$2.log" 2>&1 & local pid=$!
  sleep 1.5
  "$1" topic create t$P --partitions $P --bootstrap 127.0.0.1:$PORT > /dev/null 2>&1; sleep 3
  if [ "${WARM_EVERY_PARTITION:-0}" = 1 ]; then
    # 128 records of 1 KiB make one batch (the bench's default batch of 128 KiB of values).
    "$1" bench produce --topic t$P --partitions $P --record-size 1024 --producers 4 --acks all \
      --records $((P * 4 * 128)) --bootstrap 127.0.0.1:$PORT > /dev/null 2>&1
  fi
  "$1" bench produce --topic t$P --partitions $P --record-size 1024 --producers 4 --acks all \
    --warmup 1 --duration 4 --bootstrap 127.0.0.1:$PORT > /dev/null 2>&1
  local c0 c1 r
  c0=$(awk '{print $14+$15}' /proc/$pid/stat)
  r=$("$1" bench produce --topic t$P --partitions $P --record-size 1024 --producers 4 --acks all \
    --warmup 2 --duration 10 --bootstrap 127.0.0.1:$PORT 2>&1 | head -2 | tr '\n' ' ')
  c1=$(awk '{print $14+$15}' /proc/$pid/stat)
  echo "$2 $(date +%T) load $(cut -d' ' -f1 /proc/loadavg) broker cpu $((c1-c0)) ticks: $r" >> "$OUT"
  kill $pid; wait $pid; rm -rf "$D"; sync; idle
}
idle
for x in A B B A A B; do if [ $x = A ]; then one "$A" A; else one "$B" B; fi; done
cat "$OUT"
