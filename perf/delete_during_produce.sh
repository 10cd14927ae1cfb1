#!/usr/bin/env bash
# What a topic deletion costs the producers of other topics: fills a 16-partition topic for
# 8 s (1 KiB acks=all), then deletes it with `strata topic delete` 4 s into a 12 s run of a
# 2-partition producer at 20k records/s, and prints that producer's latency line, the size
# deleted and how many `-delete` directories are left 3 s after the run (0: all removed).
# With CHURN=1 nothing is filled: during the same producer run an empty 16-partition topic is
# created and deleted over and over (topic churn: each create makes 16 directories, each
# delete renames them aside), and the number of cycles done is printed too.
# Usage: [CHURN=1] perf/delete_during_produce.sh BIN [DATA_DIR]   (DATA_DIR default /var/tmp/delexp)
set -euo pipefail
B=$1; D=${2:-/var/tmp/delexp}; PORT=$((20000 + RANDOM % 20000)); CHURN=${CHURN:-0}
rm -rf "$D"; mkdir -p "$D"
"$B" serve --data-dir "$D/data" --listen 127.0.0.1:$PORT >"$D/log" 2>&1 & PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$D"' EXIT
for _ in $(seq 100); do "$B" topic list --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1 && break; sleep 0.2; done
if [[ $CHURN == 0 ]]; then
  "$B" bench produce --bootstrap 127.0.0.1:$PORT --topic big --partitions 16 --producers 8 \
    --record-size 1024 --acks all --duration 8 2>&1 | grep "produce:"
  echo "deleting $(du -sh "$D/data" | cut -f1)"
fi
"$B" bench produce --bootstrap 127.0.0.1:$PORT --topic small --partitions 2 --producers 1 \
  --record-size 1024 --acks all --duration 12 --rate 20000 2>&1 | grep latency & BP=$!
sleep 4
if [[ $CHURN == 0 ]]; then
  "$B" topic delete big --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1
else
  cycles=0; end=$((SECONDS + 8))
  while ((SECONDS < end)); do
    "$B" topic create churn --partitions 16 --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1
    "$B" topic delete churn --bootstrap 127.0.0.1:$PORT >/dev/null 2>&1
    cycles=$((cycles + 1))
  done
  echo "create+delete cycles of a 16-partition topic: $cycles"
fi
wait $BP
sleep 3
echo "-delete dirs left: $(find "$D/data" -maxdepth 1 -name '*-delete' | wc -l)"
