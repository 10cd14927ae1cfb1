#!/usr/bin/env bash
# A/B of two broker binaries over a small produce matrix, each workload through
# perf/produce_ab.sh in the order A B B A (fresh broker per run, idle disk between runs, the
# broker's CPU per run): three closed-loop workloads (16 partitions x 8 producers 1 KiB
# acks=all, 1 partition 1 KiB acks=all, 16 x 8 100 B acks=1) and two open-loop ones (RATE_16
# and RATE_1 records/s, acks=all). fio's 1 MiB qd 8 direct write is measured first, as the
# run's limit. Output: produce_ab.sh's lines and medians per workload, also in OUT.
# Usage: [DURATION=8] [RATE_16=400000] [RATE_1=200000] perf/produce_ab_matrix.sh BIN_A BIN_B [OUT]
set -uo pipefail
A=$1; B=$2; OUT=${3:-/tmp/produce-ab-matrix.txt}; SECS=${DURATION:-8}
HERE=$(dirname "$0")
# shellcheck source=perf/idle_disk.sh
. "$HERE/idle_disk.sh"
echo "== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) A=$A B=$B" | tee -a "$OUT"
FIO=$(mktemp -p "${TMPDIR:-/tmp}" fio.XXXXXX)
fio --name=w --filename="$FIO" --rw=write --bs=1M --direct=1 --iodepth=8 --ioengine=libaio --size=2G \
    --output-format=json 2>/dev/null \
  | python3 -c "import json,sys; print('fio 1 MiB qd 8 direct write MB/s', round(json.load(sys.stdin)['jobs'][0]['write']['bw']*1024/1e6,1))" \
  | tee -a "$OUT"
rm -f "$FIO"; sync; wait_idle_disk >/dev/null
COMMON="--warmup 2 --duration $SECS"
for W in "--partitions 16 --producers 8 --record-size 1024 --acks all $COMMON" \
         "--partitions 1 --producers 1 --record-size 1024 --acks all $COMMON" \
         "--partitions 16 --producers 8 --record-size 100 --acks 1 $COMMON" \
         "--partitions 16 --producers 8 --record-size 1024 --acks all $COMMON --rate ${RATE_16:-400000}" \
         "--partitions 1 --producers 1 --record-size 1024 --acks all $COMMON --rate ${RATE_1:-200000}"; do
  echo "-- $W" | tee -a "$OUT"
  # shellcheck disable=SC2086  # W is a list of flags
  ORDER="A B B A" "$HERE/produce_ab.sh" "$A" "$B" 1 $W | tee -a "$OUT"
done
echo "== end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
