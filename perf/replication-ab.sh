#!/usr/bin/env bash
# A reduced perf/replication.sh for before/after comparisons of two binaries in one run:
# for each binary (A, B, then B, A again, so drift of this shared machine hits both), start a
# fresh 3-node loopback cluster (one shard each, same flags as perf/replication.sh) and run
#   rf3-acks1     closed loop, RF3, acks=1: records/s, the HW advance while it runs (once a
#                 second, `topic describe`), and the backlog (HW growth in the 3 s after)
#   rf1-acksall   closed loop, RF1, acks=all
#   rf3-acksall   closed loop, RF3, acks=all, min.insync.replicas=2
#   e2e-rf3       end-to-end latency at a fixed rate, RF3, acks=all, min.insync.replicas=2
# 1 KiB records, 8 partitions, 8 producers. Prints one JSON line per run to
# perf/out-replication-ab/results.jsonl (strata bench --json plus hw/backlog fields) and a
# table to stdout.
#
# Usage: perf/replication-ab.sh BIN_A BIN_B [--seconds N] [--warmup N] [--rate N]
#          [--rounds N] [--cases "rf3-acks1 e2e-rf3 ..."]
#          [--placement-a MODE] [--placement-b MODE]
# Where each side's brokers run (MODE; see perf/replication.sh, which uses the same modes):
#   unpinned  `--no-pin-shards`: the kernel spreads the 3 brokers and the load generator over
#             every core. The default: on the 2-core test machine it had the lowest e2e
#             latency of the three (perf/RESULTS-replication.md, 2026-12-03 shard placement)
#   spread    broker n pinned (`--cpuset`) to the ((n-1) mod <CPUs>)-th allowed CPU: on 2 cores
#             brokers 1 and 3 on CPU 0, broker 2 on CPU 1
#   default   no placement flag: with `--shards 1` every broker's shard is pinned to the first
#             allowed CPU, the whole cluster on one core. The only mode of binaries older
#             than the `cpuset`/`pin_shards` settings (before 2026-12-03): use it for them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
[[ ${1:-} == -h || ${1:-} == --help || $# -lt 2 ]] && { sed -n 2,25p "$0"; exit 0; }
A=$1; B=$2; shift 2
SECS=15; WARMUP=3; RATE=25000; ROUNDS=1; CASES="rf3-acks1 rf1-acksall rf3-acksall e2e-rf3"
PLACEMENT_A=unpinned; PLACEMENT_B=unpinned
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECS=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --cases) CASES=$2; shift ;;
    --placement-a) PLACEMENT_A=$2; shift ;;
    --placement-b) PLACEMENT_B=$2; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for m in "$PLACEMENT_A" "$PLACEMENT_B"; do
  case $m in unpinned|spread|default) ;;
    *) echo "unknown placement $m (unpinned, spread, default)" >&2; exit 2 ;; esac
done
DATA=${PERF_DATA_DIR:-/var/tmp/strata-repl-ab}
OUT="$ROOT/perf/out-replication-ab"
LOGS=${REPL_LOG_DIR:-/var/tmp/strata-repl-ab-logs}
mkdir -p "$OUT" "$LOGS"
: > "$OUT/results.jsonl"; : > "$OUT/commands.txt"
BASE=47300
K=127.0.0.1:$((BASE+1)),127.0.0.1:$((BASE+2)),127.0.0.1:$((BASE+3))
VOTERS=1@127.0.0.1:$((BASE+11)),2@127.0.0.1:$((BASE+12)),3@127.0.0.1:$((BASE+13))
PIDS=()
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all; rm -rf "$DATA"' EXIT

placement_args() { # mode node -> the `strata serve` flags placing that broker
  case $1 in
    unpinned) echo --no-pin-shards ;;
    spread) echo --cpuset "$(python3 -c 'import os, sys; c = sorted(os.sched_getaffinity(0)); print(c[(int(sys.argv[1]) - 1) % len(c)])' "$2")" ;;
    default) ;;
    *) echo "unknown placement $1 (unpinned, spread, default)" >&2; exit 2 ;;
  esac
}
start_cluster() { # bin tag placement
  rm -rf "$DATA"; mkdir -p "$DATA"
  for n in 1 2 3; do
    local flags; flags=$(placement_args "$3" $n)
    local cmd=("$1" serve --node-id $n --listen 127.0.0.1:$((BASE+n)) --advertised-listener 127.0.0.1:$((BASE+n))
      --controller-listen 127.0.0.1:$((BASE+10+n)) --controller-voters $VOTERS
      --data-dir "$DATA/n$n" --shards 1 $flags)
    echo "${cmd[*]}" >> "$OUT/commands.txt"
    "${cmd[@]}" >> "$LOGS/$2-n$n.log" 2>&1 &
    PIDS+=($!)
  done
  for _ in $(seq 1 600); do
    [[ $("$1" cluster status --json --bootstrap $K 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["brokers"]))' 2>/dev/null || echo 0) -ge 3 ]] && return 0
    sleep 0.1
  done
  echo "cluster did not start" >&2; exit 1
}
hw_sum() { "$1" topic describe "$2" --bootstrap $K 2>/dev/null | grep -o 'LogEndOffset: [0-9]*' | awk '{s += $2} END {print s + 0}'; }
wait_isr() { # bin topic rf
  for _ in $(seq 1 300); do
    if [[ $("$1" topic describe "$2" --bootstrap $K 2>/dev/null | grep -c 'LogEndOffset: [0-9]' || true) == 8 ]] &&
       "$1" cluster status --json --bootstrap $K 2>/dev/null | python3 -c '
import json, sys
t, rf = sys.argv[1], int(sys.argv[2])
ps = [p for p in json.load(sys.stdin)["partitions"] if p.get("topic") == t]
sys.exit(0 if len(ps) == 8 and all((p.get("leader") or -1) >= 0 and len(p.get("isr", [])) == rf for p in ps) else 1)' "$2" "$3"; then return 0; fi
    sleep 0.1
  done
}

run_case() { # bin tag case round
  local bin=$1 tag=$2 c=$3 r=$4 topic="ab-$3-$4" rf=3 acks=all cfg=() mode=produce extra=()
  case $c in
    rf3-acks1) acks=1 ;;
    rf1-acksall) rf=1 ;;
    rf3-acksall) cfg=(--config min.insync.replicas=2) ;;
    e2e-rf3) cfg=(--config min.insync.replicas=2); mode=e2e; extra=(--rate $RATE) ;;
    e2e-rf1) rf=1; mode=e2e; extra=(--rate $RATE) ;;
  esac
  "$bin" topic create $topic --partitions 8 --replication-factor $rf "${cfg[@]}" --bootstrap $K >/dev/null
  wait_isr "$bin" $topic $rf
  local tcfg=(); [[ ${#cfg[@]} -gt 0 ]] && tcfg=(--topic-config min.insync.replicas=2)
  local cmd=("$bin" bench $mode --topic $topic --partitions 8 --replication-factor $rf "${tcfg[@]}" --record-size 1024
             --producers 8 --acks $acks "${extra[@]}" --warmup $WARMUP --duration $SECS --bootstrap $K --json --label "$tag-$c-$r")
  echo "${cmd[*]}" >> "$OUT/commands.txt"
  local hwf="$OUT/hw-$tag-$c-$r.txt"; : > "$hwf"
  ( t0=$(date +%s.%N); while :; do echo "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') $(hw_sum "$bin" $topic)" >> "$hwf"; sleep 1; done ) &
  local sp=$!
  local res; res=$("${cmd[@]}" 2>"$OUT/stderr-$tag-$c-$r.txt" | grep '^{' | tail -1) || true
  kill $sp 2>/dev/null || true; wait $sp 2>/dev/null || true
  local h0 h1; h0=$(hw_sum "$bin" $topic); sleep 3; h1=$(hw_sum "$bin" $topic)
  python3 - "$res" "$hwf" "$WARMUP" "$SECS" "$h0" "$h1" "$tag" "$c" "$r" "$place" >> "$OUT/results.jsonl" <<'PY'
import json, sys
res, hwf, warm, secs, h0, h1, tag, case, rnd, place = sys.argv[1:]
r = json.loads(res) if res.strip() else {"failed": True}
pts = [tuple(map(float, l.split())) for l in open(hwf) if len(l.split()) == 2]
lo, hi = float(warm) + 0.5, float(warm) + float(secs)
win = [p for p in pts if lo <= p[0] <= hi]
r["hw_rate"] = (win[-1][1] - win[0][1]) / (win[-1][0] - win[0][0]) if len(win) >= 2 and win[-1][0] > win[0][0] else None
r["backlog"] = int(h1) - int(h0)
r.update(tag=tag, case=case, round=int(rnd), placement=place,
         loadavg=open("/proc/loadavg").read().split()[0])
print(json.dumps(r))
PY
  "$bin" topic delete $topic --bootstrap $K >/dev/null 2>&1 || true
  tail -1 "$OUT/results.jsonl" | python3 -c '
import json,sys; r=json.load(sys.stdin); l=r.get("latency_us") or {}
print("  %s %s r%d: %s rec/s, p50 %s p99 %s us, hw %s rec/s, backlog %s, errors %s" % (r["tag"], r["case"], r["round"],
  round(r.get("records_per_sec") or 0), l.get("p50"), l.get("p99"), round(r["hw_rate"]) if r.get("hw_rate") else "-", r["backlog"], r.get("errors")))' >&2
}

for r in $(seq 1 "$ROUNDS"); do
  order="A B"; [[ $((r % 2)) == 0 ]] && order="B A"
  for tag in $order; do
    bin=$A; place=$PLACEMENT_A; [[ $tag == B ]] && { bin=$B; place=$PLACEMENT_B; }
    log "round $r: $tag ($bin, placement $place, load average $(cut -d' ' -f1-3 /proc/loadavg))"
    start_cluster "$bin" "$tag-r$r" "$place"
    for c in $CASES; do run_case "$bin" $tag $c $r; done
    stop_all
  done
done
python3 - "$OUT/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| binary (placement) | case | round | records/s | HW advance records/s (x of records/s) | backlog | p50 us | p99 us | p99.9 us | errors | load 1 min after |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    l = r.get("latency_us") or {}
    rps = r.get("records_per_sec") or (r.get("extra") or {}).get("produce_records_per_sec") or 0
    hw = r.get("hw_rate")
    x = f" ({hw / rps:.2f}x)" if hw and rps else ""
    print(f"| {r['tag']} ({r.get('placement')}) | {r['case']} | {r['round']} | {rps:,.0f} | {hw or 0:,.0f}{x} | {r['backlog']:,} | {l.get('p50')} | {l.get('p99')} | {l.get('p999')} | {r.get('errors')} | {r.get('loadavg')} |")
PY
