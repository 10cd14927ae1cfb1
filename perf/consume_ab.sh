#!/usr/bin/env bash
# A/B cold consume (from disk) of two broker binaries in the same run, on the same data.
# One fill with A, then alternating A B A B ...: each run restarts the broker on the same data
# directory, so its tail cache is empty and every fetch reads the disk (direct I/O: no page
# cache in between). Also measures fio's 1 MiB direct read at queue depth 1 and 8 on the
# same file system, the limit the figures are bounded by.
# Usage: perf/consume_ab.sh BIN_A BIN_B [ROUNDS] [GIB_PER_PARTITION] [bench consume flags...]
# Env: PERF_DATA_DIR (default /var/tmp/strata-consume-ab; deleted at the end), PARTITIONS (2).
# Prints one line per run: label records/s MB/s, then the median MB/s of each side and B/A.
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-3}; GIB=${4:-1}; shift 4 || shift $#
FLAGS=("$@")
PARTITIONS=${PARTITIONS:-2}
DIR=${PERF_DATA_DIR:-/var/tmp/strata-consume-ab}
rm -rf "$DIR"; mkdir -p "$DIR"
trap 'rm -rf "$DIR"' EXIT
PORT=$((20000 + RANDOM % 20000)); BS=127.0.0.1:$PORT
start() {
  "$1" serve --data-dir "$DIR/data" --listen "$BS" >>"$DIR/log" 2>&1 & PID=$!
  for _ in $(seq 150); do "$1" topic list --bootstrap "$BS" >/dev/null 2>&1 && return; sleep 0.2; done
  echo "broker did not start" >&2; tail "$DIR/log" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; }
if command -v fio >/dev/null; then
  for qd in 1 8; do
    fio --name=r --filename="$DIR/fio.tmp" --rw=read --bs=1M --direct=1 --size=1G --ioengine=io_uring \
        --iodepth=$qd --runtime=10 --output-format=json 2>/dev/null \
      | python3 -c "import json,sys; j=json.load(sys.stdin); print('fio read 1M qd$qd MB/s', round(j['jobs'][0]['read']['bw_bytes']/1e6,1))" >&2
  done
  rm -f "$DIR/fio.tmp"
fi
start "$A"
records=$((GIB * PARTITIONS * 1024 * 1024))
"$A" bench produce --bootstrap "$BS" --topic cold --partitions "$PARTITIONS" --record-size 1024 \
  --producers 4 --acks 1 --records "$records" --json >/dev/null
stop
one() {
  start "$1"
  "$B" bench consume --bootstrap "$BS" --topic cold --consumers "$PARTITIONS" --from earliest \
      "${FLAGS[@]}" --json --label "$2" 2>/dev/null \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["label"], round(r["records_per_sec"]), round(r["mb_per_sec"],1))'
  stop
}
# Each run's line is printed as it comes (not with `tee /dev/stderr`, which reopens a
# redirected stderr file and truncates what was written before).
for _ in $(seq "$ROUNDS"); do one "$A" A; one "$B" B; done >"$DIR/rows"
cat "$DIR/rows"
python3 -c '
import sys, statistics
rows=[l.split() for l in sys.stdin if l.strip()]
med={}
for side in "AB":
    v=[float(r[2]) for r in rows if r[0]==side]
    med[side]=statistics.median(v)
    print(side, "median MB/s", med[side], "runs", v)
print("B/A", round(med["B"]/med["A"], 3))' < "$DIR/rows"
