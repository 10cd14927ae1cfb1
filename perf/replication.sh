#!/usr/bin/env bash
# Strata replication benchmark: measure this machine's limits (the same fio/iperf3 commands as
# perf/run.sh), then produce 1 KiB records to a single node and to a 3-node loopback cluster
# of real `strata serve` processes (RF1, RF3 acks=1, RF3 acks=all), plus an end-to-end latency
# run at a fixed rate for RF1 vs RF3. Writes raw results to perf/out-replication/ and the
# report to perf/RESULTS-replication.md. All figures of one report come from one run.
#
# Usage (from anywhere; paths are relative to the repo): perf/replication.sh
#     [--seconds N] [--warmup N] [--rate N] [--data-dir DIR] [--placement MODE] [--no-limits]
#     [--report-only]
#        perf/replication.sh --peer kafka [perf/replication_peer.py options: --rounds N --seconds N
#     --warmup N --rate N --cases "..." --no-flush1 --no-limits --data-dir DIR --out DIR]
#   --seconds N    measured seconds per run (default 15)
#   --warmup N     warm-up seconds per run (default 3)
#   --rate N       records/s of the fixed-rate e2e runs (default 25000, i.e. ~26 MB/s)
#   --data-dir DIR brokers' data and the fio test file (a real disk, not tmpfs)
#                  [default: $PERF_DATA_DIR or /var/tmp/strata-replication]
#   --placement MODE where the brokers' shards run (all brokers share this machine):
#                  unpinned (default) `--no-pin-shards`, the kernel spreads brokers and load
#                  generator over every core; spread: broker n pinned to the ((n-1) mod
#                  <CPUs>)-th allowed CPU (`--cpuset`); default: no flag, every `--shards 1`
#                  broker pinned to the first allowed CPU (the whole cluster on one core)
#   --no-limits    skip the fio/iperf3 limit measurements
#   --report-only  only rewrite the report from perf/out-replication/ (keeps the hand-written
#                  "## Analysis" section at the end of the report, as every run does)
#   --peer kafka   (first argument) Strata's 3-node cluster beside a 3-node Apache Kafka 4.1
#                  KRaft cluster (as shipped, and with flush.messages=1) in one run, rounds
#                  interleaved, same client (strata bench): rf1-acksall, rf3-acksall,
#                  rf3-acks1, e2e-rf3. perf/replication_peer.py (see its header); writes
#                  perf/out-replication-peer/{results.jsonl,report.md,commands.txt}
# Needs only target/release/strata (or $STRATA_BIN), fio, iperf3 (optional) and python3.
# Broker logs stay in $REPL_LOG_DIR (default /var/tmp/strata-replication-logs); their
# warnings and ISR changes are copied into perf/out-replication/broker-log-excerpt.txt.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [[ "${1:-}" == "--peer" ]]; then
  [[ "${2:-}" == "kafka" ]] || { echo "--peer takes: kafka" >&2; exit 2; }
  shift 2
  exec python3 "$ROOT/perf/replication_peer.py" "$@"
fi
BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
DATA_DIR="${PERF_DATA_DIR:-/var/tmp/strata-replication}"
LOG_DIR="${REPL_LOG_DIR:-/var/tmp/strata-replication-logs}"
OUT="$ROOT/perf/out-replication"
REPORT="$ROOT/perf/RESULTS-replication.md"
SECONDS_PER_RUN=15; WARMUP=3; E2E_RATE=25000; LIMITS=1; REPORT_ONLY=0; PLACEMENT=unpinned
PARTS=8; PRODUCERS=8; SIZE=1024
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) SECONDS_PER_RUN="$2"; shift ;;
    --warmup) WARMUP="$2"; shift ;;
    --rate) E2E_RATE="$2"; shift ;;
    --data-dir) DATA_DIR="$2"; shift ;;
    --placement) PLACEMENT="$2"; shift ;;
    --no-limits) LIMITS=0 ;;
    --report-only) REPORT_ONLY=1 ;;
    -h|--help) sed -n 2,33p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

case $PLACEMENT in unpinned|spread|default) ;;
  *) echo "unknown --placement $PLACEMENT (unpinned, spread, default)" >&2; exit 2 ;; esac
T_START=$(date +%s)
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }
[[ -x "$BIN" ]] || { echo "error: $BIN not found; build it with cargo build --release" >&2; exit 1; }
command -v python3 >/dev/null || { echo "error: python3 is needed for the report" >&2; exit 1; }
mkdir -p "$OUT" "$DATA_DIR" "$LOG_DIR"
fstype=$(stat -f -c %T "$DATA_DIR")
if [[ "$fstype" == "tmpfs" || "$fstype" == "ramfs" ]]; then
  echo "error: $DATA_DIR is on $fstype; direct I/O needs a real disk (use --data-dir)" >&2; exit 1
fi
if [[ $REPORT_ONLY == 0 ]]; then
rm -f "$OUT"/*.json "$OUT"/*.jsonl "$OUT"/*.txt "$OUT"/*.hlog
RESULTS="$OUT/results.jsonl"; COMMANDS="$OUT/commands.txt"; NOTES="$OUT/notes.txt"
: > "$RESULTS"; : > "$COMMANDS"; : > "$NOTES"
rm -f "$LOG_DIR"/*.log
# Record what else the machine was doing when the run started (it is shared and noisy).
{ echo "start $(date -u '+%Y-%m-%d %H:%M:%S UTC')"; echo "loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "binary $("$BIN" --version 2>/dev/null | head -1), built $(date -u -r "$BIN" '+%Y-%m-%d %H:%M UTC')"
  echo "commit $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "params $E2E_RATE $SECONDS_PER_RUN $WARMUP $PARTS $PRODUCERS"
  echo "placement $PLACEMENT"; } >> "$NOTES"
fi
note() { echo "$*" >> "$NOTES"; log "$*"; }
rec() { echo "$*" | sed "s#$ROOT/##g" >> "$COMMANDS"; }  # exact command, repo-relative

# ---------------------------------------------------------------- machine limits
# The fio/iperf3 command lines are copied verbatim from perf/run.sh (measure_limits), so the
# figures are comparable with perf/RESULTS.md; the read and 64 KiB runs are left out (this
# benchmark writes, and followers read from the leader's tail cache).
measure_limits() {
  if ! command -v fio >/dev/null; then
    note "fio not installed: no disk limits measured"
  else
    local f="$DATA_DIR/fio.tmp" engine=io_uring
    fio --name=probe --filename="$f" --size=4m --bs=4k --rw=write --direct=1 --ioengine=io_uring \
        --output-format=json >/dev/null 2>&1 || engine=libaio
    log "fio: sequential write 1 MiB direct ($engine)"
    rec fio --name=w --filename="$f" --rw=write --bs=1M --direct=1 --size=2G --ioengine=$engine --iodepth=8 \
        --runtime=20 --end_fsync=1 --output-format=json
    fio --name=w --filename="$f" --rw=write --bs=1M --direct=1 --size=2G --ioengine=$engine --iodepth=8 \
        --runtime=20 --end_fsync=1 --output-format=json > "$OUT/fio-write-1m.json"
    log "fio: fdatasync latency at 16 KiB"
    rec fio --name=sync --filename="$f" --rw=write --bs=16k --size=256M --fdatasync=1 --ioengine=sync \
        --runtime=10 --time_based --output-format=json
    fio --name=sync --filename="$f" --rw=write --bs=16k --size=256M --fdatasync=1 --ioengine=sync \
        --runtime=10 --time_based --output-format=json > "$OUT/fio-fdatasync-16k.json"
    rm -f "$f"
  fi
  if ! command -v iperf3 >/dev/null; then
    note "iperf3 not installed: no loopback bandwidth measured"
  else
    log "iperf3: loopback TCP"
    local port=$((30000 + RANDOM % 5000))
    iperf3 -s -p $port -1 >/dev/null 2>&1 & local ip=$!
    sleep 0.5
    rec iperf3 -c 127.0.0.1 -p $port -t 5 -J
    iperf3 -c 127.0.0.1 -p $port -t 5 -J > "$OUT/iperf3.json" || note "iperf3 failed"
    wait $ip 2>/dev/null || true
  fi
  python3 "$ROOT/perf/report.py" limits "$OUT" > "$OUT/limits.json"
  cat "$OUT/limits.json" >&2
}

# ---------------------------------------------------------------- processes
PIDS=()        # every broker this script started
cleanup() {
  local rc=$?
  stop_sampler
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
  rm -rf "$DATA_DIR/single" "$DATA_DIR/cluster" "$DATA_DIR/fio.tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }
# Ports: single node BASE, brokers BASE+1..3, controllers BASE+11..13 (clear of 9092, 19092,
# 29092 and the 39xxx range the tests use).
BASE=47100
for _ in $(seq 1 20); do
  ok=1; for p in $BASE $((BASE+1)) $((BASE+2)) $((BASE+3)) $((BASE+11)) $((BASE+12)) $((BASE+13)); do
    port_free $p || ok=0; done
  [[ $ok == 1 ]] && break
  BASE=$((BASE + 100))
done
[[ $ok == 1 ]] || { echo "error: no free port block found from 47100 up" >&2; exit 1; }
SINGLE=127.0.0.1:$BASE
K1=127.0.0.1:$((BASE+1)); K2=127.0.0.1:$((BASE+2)); K3=127.0.0.1:$((BASE+3))
C1=127.0.0.1:$((BASE+11)); C2=127.0.0.1:$((BASE+12)); C3=127.0.0.1:$((BASE+13))
CLUSTER=$K1,$K2,$K3
VOTERS=1@$C1,2@$C2,3@$C3

placement_args() { # node number (1-3; 1 for the single node) -> flags placing that broker
  case $PLACEMENT in
    unpinned) echo --no-pin-shards ;;
    spread) echo --cpuset "$(python3 -c 'import os, sys; c = sorted(os.sched_getaffinity(0)); print(c[(int(sys.argv[1]) - 1) % len(c)])' "$1")" ;;
    default) ;;
    *) echo "unknown --placement $PLACEMENT (unpinned, spread, default)" >&2; exit 2 ;;
  esac
}
start() { # log name, then `strata serve` arguments; appends the pid to PIDS
  local name=$1; shift
  rec "$BIN" serve "$@"
  "$BIN" serve "$@" >> "$LOG_DIR/$name.log" 2>&1 &
  PIDS+=($!)
}
alive() { for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || return 1; done; }
stop_all() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PIDS=()
}
brokers_listed() { # bootstrap -> number of brokers `cluster status` lists (0 on error)
  "$BIN" cluster status --json --bootstrap "$1" 2>/dev/null \
    | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["brokers"]))' 2>/dev/null || echo 0
}
wait_brokers() { # bootstrap, count
  for _ in $(seq 1 600); do
    [[ $(brokers_listed "$1") -ge $2 ]] && return 0
    alive || { echo "a broker exited; see $LOG_DIR" >&2; return 1; }
    sleep 0.1
  done
  echo "fewer than $2 brokers listed after 60 s; see $LOG_DIR" >&2; return 1
}
wait_isr() { # bootstrap topic rf: every partition has a leader and a full ISR, and every leader
  # answers ListOffsets for it (30 s at most). The second check matters: `cluster status` shows
  # the controller's view, and a broker still deleting the previous case's logs applies the
  # new topic up to a second later (its leaders answer NOT_LEADER_OR_FOLLOWER until then).
  for _ in $(seq 1 300); do
    if [[ $("$BIN" topic describe "$2" --bootstrap "$1" 2>/dev/null | grep -c 'LogEndOffset: [0-9]' || true) == "$PARTS" ]] &&
       "$BIN" cluster status --json --bootstrap "$1" 2>/dev/null | python3 -c '
import json, sys
topic, rf, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ps = [p for p in json.load(sys.stdin)["partitions"] if p.get("topic") == topic]
ok = len(ps) == want and all((p.get("leader") if p.get("leader") is not None else -1) >= 0 and len(p.get("isr", [])) == rf for p in ps)
sys.exit(0 if ok else 1)' "$2" "$3" "$PARTS"; then return 0; fi
    sleep 0.1
  done
  note "$2: ISR not full 30 s after creation"; return 0
}

# ---------------------------------------------------------------- CPU accounting
# Cores used during a run: each broker (from /proc/PID/stat), the load generator (from
# /usr/bin/time) and the whole machine (from /proc/stat, which includes everything else
# running on it).
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# /proc/stat cpu line: user nice system idle iowait irq softirq steal -> "busy iowait steal total"
machine_ticks() { awk '/^cpu / {print $2+$3+$4+$7+$8, $6, $9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }

# Every second of a cluster run: the topic's HW summed over partitions (ListOffsets latest,
# via `topic describe`), so the report can say how fast records were committed by the whole
# ISR while the load ran -- with acks=1 the producers are not told.
SAMPLER_PID=""
hw_sampler() { # bootstrap topic file
  local t0; t0=$(date +%s.%N)
  while :; do
    local hw; hw=$("$BIN" topic describe "$2" --bootstrap "$1" 2>/dev/null | grep -o 'LogEndOffset: [0-9]*' | awk '{s += $2} END {print s + 0}') || hw=""
    echo "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') $hw" >> "$3"
    sleep 1
  done
}
stop_sampler() { if [[ -n "$SAMPLER_PID" ]]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; SAMPLER_PID=""; fi; }

RUN_N=0
bench() { # label deployment bootstrap, then `strata bench` arguments
  local label=$1 deployment=$2 bootstrap=$3; shift 3
  RUN_N=$((RUN_N + 1))
  local cmd=("$BIN" bench "$@" --bootstrap "$bootstrap" --json --label "$label")
  rec "${cmd[*]}"
  log "run $RUN_N: $label"
  local before=() pid m0 m1 t0 t1
  for pid in "${PIDS[@]}"; do before+=("$(proc_ticks "$pid")"); done
  if [[ $deployment == cluster ]]; then
    : > "$OUT/hw-$label.txt"
    hw_sampler "$bootstrap" "$CUR_TOPIC" "$OUT/hw-$label.txt" & SAMPLER_PID=$!
  fi
  m0=$(machine_ticks); t0=$(date +%s.%N)
  local ok=1
  /usr/bin/time -f '%U %S' -o "$OUT/.time" timeout 600 "${cmd[@]}" > "$OUT/.stdout" 2> "$OUT/.stderr" || ok=0
  t1=$(date +%s.%N); m1=$(machine_ticks)
  stop_sampler
  local brokers=() i=0
  for pid in "${PIDS[@]}"; do brokers+=("$(( $(proc_ticks "$pid") - ${before[$i]} ))"); i=$((i + 1)); done
  local gen; gen=$(tail -n 1 "$OUT/.time" | awk '{printf "%.0f", ($1 + $2) * 100}' 2>/dev/null || echo 0)
  python3 - "$label" "$deployment" "$t0" "$t1" "$m0" "$m1" "$gen" "$ok" "${brokers[@]}" >> "$RESULTS" <<'PY'
import json, os, sys
label, dep, t0, t1, m0, m1, gen, ok, *brokers = sys.argv[1:]
wall = float(t1) - float(t0)
(b0, w0, s0, a0), (b1, w1, s1, a1) = [tuple(map(int, m.split())) for m in (m0, m1)]
share = lambda x0, x1: round((x1 - x0) / max(a1 - a0, 1) * os.cpu_count(), 2)
row = None
try:
    lines = [l for l in open(os.environ["OUT"] + "/.stdout") if l.strip().startswith("{")]
    row = json.loads(lines[-1]) if lines else None
except (OSError, ValueError):
    row = None
if row is None or ok != "1":
    err = open(os.environ["OUT"] + "/.stderr", errors="replace").read()[-600:].strip()
    base = row or {"label": label}
    base.update({"failed": True, "error": err or "(no stderr)"})
    row = base
row["deployment"] = dep
# Cores used over the whole bench process lifetime (topic lookup + warm-up + measurement).
row["cpu_cores"] = {"wall_s": round(wall, 2),
                    "brokers": [round(int(b) / 100 / wall, 2) for b in brokers],
                    "load_generator": round(int(gen) / 100 / wall, 2),
                    "machine_busy": share(b0, b1), "machine_iowait": share(w0, w1),
                    "machine_steal": share(s0, s1)}
print(json.dumps(row))
PY
  local last; last=$(tail -n 1 "$RESULTS")
  if [[ $ok == 0 ]]; then
    cp "$OUT/.stderr" "$OUT/stderr-$label.txt"
    log "  FAILED: $(tail -c 300 "$OUT/.stderr" | tr '\n' ' ')"
  else
    echo "$last" | python3 -c 'import json,sys; r=json.load(sys.stdin); l=r.get("latency_us") or {}; c=r["cpu_cores"]; print("  %.0f rec/s %.1f MB/s p99 %s us errors %s; cores: brokers %s, generator %s, machine busy %s iowait %s steal %s" % (r["records_per_sec"], r["mb_per_sec"], l.get("p99"), r["errors"], c["brokers"], c["load_generator"], c["machine_busy"], c["machine_iowait"], c["machine_steal"]))' >&2 || true
  fi
  rm -f "$OUT/.stdout" "$OUT/.stderr" "$OUT/.time"
}
export OUT

create() { # bootstrap topic rf [config...]; pre-created so every partition is in sync before load
  local bs=$1 topic=$2 rf=$3; shift 3
  CUR_TOPIC=$topic
  local cmd=("$BIN" topic create "$topic" --partitions $PARTS --replication-factor "$rf" "$@" --bootstrap "$bs")
  rec "${cmd[*]}"
  "${cmd[@]}" > "$OUT/.create" 2>&1 || note "topic create $topic failed: $(tr '\n' ' ' < "$OUT/.create")"
  rm -f "$OUT/.create"
  wait_isr "$bs" "$topic" "$rf"
}
status_snapshot() { # bootstrap topic label: the topic's leaders/replicas/ISR at the end of a run,
  # and its partitions' end offsets (ListOffsets latest = the HW) right away and 3 s later: what
  # the HW gains after the producers stopped is what the followers still had to copy.
  "$BIN" topic describe "$2" --bootstrap "$1" > "$OUT/describe-$3-end.txt" 2>&1 || true
  sleep 3
  "$BIN" topic describe "$2" --bootstrap "$1" > "$OUT/describe-$3-end+3s.txt" 2>&1 || true
  "$BIN" cluster status --json --bootstrap "$1" 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
s["partitions"] = [p for p in s["partitions"] if p.get("topic") == sys.argv[1]]
json.dump(s, sys.stdout)' "$2" > "$OUT/status-$3.json" || note "no cluster status after $3"
}
drop() { "$BIN" topic delete "$2" --bootstrap "$1" >/dev/null 2>&1 || true; }

produce() { # label deployment bootstrap topic rf acks [extra...]
  local label=$1 dep=$2 bs=$3 topic=$4 rf=$5 acks=$6; shift 6
  bench "$label" "$dep" "$bs" produce --topic "$topic" --partitions $PARTS --replication-factor "$rf" "$@" \
    --record-size $SIZE --producers $PRODUCERS --acks "$acks" --warmup $WARMUP --duration $SECONDS_PER_RUN
}
e2e() { # label deployment bootstrap topic rf [extra...]
  local label=$1 dep=$2 bs=$3 topic=$4 rf=$5; shift 5
  bench "$label" "$dep" "$bs" e2e --topic "$topic" --partitions $PARTS --replication-factor "$rf" "$@" \
    --record-size $SIZE --producers $PRODUCERS --acks all --rate $E2E_RATE \
    --warmup $WARMUP --duration $SECONDS_PER_RUN --histogram-log "$OUT/$label.hlog"
}

# ---------------------------------------------------------------- report
write_report() { # perf/RESULTS-replication.md from perf/out-replication/ (parameters from notes.txt)
python3 - "$OUT" "$REPORT" <<'PY' > "$REPORT.new"
import json, os, platform, re, subprocess, sys
out, report = sys.argv[1:]

def load(p, d=None):
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return d

def fmt(x, nd=0):
    if x is None:
        return "—"
    return f"{x:,.{nd}f}" if isinstance(x, (int, float)) else str(x)

lim = load(os.path.join(out, "limits.json"), {}) or {}
rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip().startswith("{")]
by = {r["label"]: r for r in rows}
notes = dict(l.rstrip("\n").split(" ", 1) for l in open(os.path.join(out, "notes.txt")) if " " in l)
KEYS = ("start", "loadavg", "runtime_s", "binary", "commit", "params", "placement")
extra_notes = [l.rstrip("\n") for l in open(os.path.join(out, "notes.txt")) if l.split(" ", 1)[0] not in KEYS]
commit = notes.get("commit", "?")
rate, secs, warm, parts, prods = notes.get("params", "? ? ? ? ?").split()
cpu = subprocess.run("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2", shell=True, capture_output=True, text=True).stdout.strip()
mem = subprocess.run("free -g | awk '/Mem:/ {print $2}'", shell=True, capture_output=True, text=True).stdout.strip()
fio_w = lim.get("write_1m_mbps")
tcp = lim.get("tcp_loopback_mbps")

L = []
p = L.append
p("# Strata replication benchmark")
p("")
p(f"Generated by `perf/replication.sh` on {notes.get('start', '?')} (runtime {notes.get('runtime_s', '?')} s); "
  f"git commit **{commit}** (`git rev-parse --short HEAD` at run time); binary `target/release/strata` "
  f"({notes.get('binary', '?')}).")
p(f"Machine: {os.cpu_count()} CPUs ({cpu}), {mem} GiB RAM, kernel {platform.release()}; load average at start "
  f"{notes.get('loadavg', '?')}. **Every broker process and the load generator share these {os.cpu_count()} cores** "
  "(the cluster is 3 real processes on one machine, talking over loopback, writing to one disk).")
p(f"Each run: 1 KiB records (values), {parts} partitions, {prods} producer connections, closed loop (as fast as "
  f"acks allow) unless a rate is given, {warm} s warm-up + {secs} s measured. Every broker runs with `--shards 1`, "
  f"placement `{notes.get('placement', 'default')}` (`--placement`: unpinned = `--no-pin-shards`, spread = "
  "`--cpuset` one CPU per broker in turn, default = all pinned to the first CPU). "
  "Topics are pre-created and every partition's ISR is full before the load starts; each case uses its own topic, "
  "deleted after the run. Ratios compare figures of this one run.")
p("")
p("## Machine limits (same run)")
p("")
p("| limit | value |")
p("|---|---|")
for k, name in [("write_1m_mbps", "fio sequential write, 1 MiB, O_DIRECT, qd 8 (MB/s)"),
                ("fdatasync_p50_us", "fio write 16 KiB + fdatasync: sync latency p50 (µs)"),
                ("fdatasync_p99_us", "fio write 16 KiB + fdatasync: sync latency p99 (µs)"),
                ("fdatasync_16k_write_mbps", "fio write 16 KiB + fdatasync: MB/s"),
                ("fdatasync_per_sec", "fio write 16 KiB + fdatasync: syncs/s"),
                ("tcp_loopback_mbps", "iperf3 loopback TCP, 1 stream (MB/s)")]:
    p(f"| {name} | {fmt(lim.get(k), 1) if k in lim else 'not measured'} |")
for n in extra_notes:
    p(f"\nNote: {n}")
p("")
p("## Produce (closed loop)")
p("")
p("MB/s: 10^6 bytes of record values per second, as acknowledged to the producer. Latency: produce request sent → "
  "response. \"disk MB/s written\": what the brokers together wrote to the one shared disk during the window: the "
  "leaders' MB/s plus, per follower, the MB/s the HW advanced by (= MB/s × RF when the followers keep up). "
  "Backlog: how much the topic's HW (ListOffsets latest, summed over partitions) still grew in the 3 s after the "
  "producers stopped, i.e. records the followers had not yet copied when the run ended. "
  "HW advance: how fast the HW (records every ISR member has) moved during the measured window, from "
  "`topic describe` once a second (`hw-*.txt`); with acks=all it should equal records/s. "
  "Cores: CPU cores used over the bench process's life by brokers n1/n2/n3 (or the single node), the load generator, "
  "and the whole machine: busy (user+system+irq) / iowait / steal, which includes anything else running.")
p("")
p("| case | deployment | RF | acks | records/s | MB/s | disk MB/s written (vs fio write) | p50 µs | p99 µs | p99.9 µs | max µs | errors | ISR at end | HW advance during load (records/s) | backlog (records) | cores: brokers / generator / machine |")
p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

def isr_end(label):
    s = load(os.path.join(out, f"status-{label}.json"))
    if not s:
        return "—"
    ps = s.get("partitions", [])
    full = sum(1 for x in ps if len(x.get("isr", [])) == len(x.get("replicas", [])))
    leaders = sorted({x.get("leader") for x in ps})
    return f"{full}/{len(ps)} full; leaders on {','.join(map(str, leaders))}"

def cores(r):
    c = r.get("cpu_cores") or {}
    return (f"{'+'.join(fmt(b, 2) for b in c.get('brokers', []))} / {fmt(c.get('load_generator'), 2)} / "
            f"{fmt(c.get('machine_busy'), 2)} ({fmt(c.get('machine_iowait'), 2)} iowait, {fmt(c.get('machine_steal'), 2)} steal)")

def end_sum(label, suffix):
    try:
        txt = open(os.path.join(out, f"describe-{label}-{suffix}.txt")).read()
    except OSError:
        return None
    vals = [int(v) for v in re.findall(r"LogEndOffset: (\d+)", txt)]
    return sum(vals) if vals else None

def hw_rate(label, r):
    """Records/s by which the HW advanced during the measured window (1 s samples)."""
    try:
        pts = [tuple(map(float, l.split())) for l in open(os.path.join(out, f"hw-{label}.txt")) if len(l.split()) == 2]
    except OSError:
        return None
    cfg = r.get("config") or {}
    lo, hi = cfg.get("warmup_s", 0) + 0.5, cfg.get("warmup_s", 0) + cfg.get("duration_s", 0)
    win = [pt for pt in pts if lo <= pt[0] <= hi]
    if len(win) < 2 or win[-1][0] <= win[0][0]:
        return None
    return (win[-1][1] - win[0][1]) / (win[-1][0] - win[0][0])

def backlog(label):
    a, b = end_sum(label, "end"), end_sum(label, "end+3s")
    return "—" if a is None or b is None else fmt(b - a)

def replicated_mb(lab, r):
    """MB/s of record values every replica holds: the HW advance for a cluster run (what the
    followers really copied), else what the producers were acknowledged."""
    mb = r.get("mb_per_sec")
    hw = hw_rate(lab, r) if r.get("deployment") == "cluster" else None
    if mb is None or hw is None or not r.get("records_per_sec"):
        return mb
    return min(mb, mb * hw / r["records_per_sec"])

def disk_mb(lab, r):  # leaders write what they acknowledged; each follower what it copied
    mb = r.get("mb_per_sec")
    rf = 3 if "rf3" in lab else 1
    return None if mb is None else mb + (rf - 1) * replicated_mb(lab, r)

lagging = set()
failures = []
for r in rows:
    cfg = r.get("config") or {}
    if r.get("failed") or r.get("errors") or (r.get("extra") or {}).get("produce_errors"):
        failures.append(r)
    if r.get("mode") == "e2e":
        continue
    lab = r["label"]
    rf = 3 if "rf3" in lab else 1
    acks = "all" if "acksall" in lab else "1"
    if "minisr2" in lab:
        acks += " (min.insync=2)"
    lat = r.get("latency_us") or {}
    mb = r.get("mb_per_sec")
    d = disk_mb(lab, r)
    disk = f"{fmt(d, 1)} ({d / fio_w:.0%})" if d and fio_w else "—"
    hwr = hw_rate(lab, r)
    if hwr is not None and r.get("records_per_sec") and hwr < 0.9 * r["records_per_sec"]:
        lagging.add(lab)
    status = " **FAILED**" if r.get("failed") else ""
    p(f"| {lab}{status} | {r.get('deployment')} | {rf} | {acks} | {fmt(r.get('records_per_sec'))} | {fmt(mb, 1)} | {disk} | "
      f"{fmt(lat.get('p50'))} | {fmt(lat.get('p99'))} | {fmt(lat.get('p999'))} | {fmt(lat.get('max'))} | {fmt(r.get('errors'))} | "
      f"{isr_end(lab) if r.get('deployment') == 'cluster' else '—'} | {fmt(hw_rate(lab, r))} | "
      f"{backlog(lab) if r.get('deployment') == 'cluster' else '—'} | {cores(r)} |")
if lagging:
    p("")
    p(f"**Followers did not keep up** in {', '.join(f'`{l}`' for l in sorted(lagging))}: the HW advanced by less "
      "than 90 % of the acknowledged rate. With acks=1 the producers are not slowed by this, so records/s and MB/s "
      "there measure the leaders alone, and the ISR has not shrunk only because `replica_lag_time_max_ms` (30 s) "
      "is longer than the run.")
p("")
p(f"## End-to-end latency at a fixed rate ({int(rate):,} records/s ≈ {int(rate) * 1024 / 1e6:.0f} MB/s, acks=all, 1 consumer)")
p("")
p("Latency: producer send → consumer receipt, corrected for coordinated omission (open loop). The consumer reads "
  "from the leaders; a record is visible only once the high watermark passes it, i.e. once the ISR has it.")
p("")
p("| case | RF | achieved records/s | e2e p50 µs | e2e p99 µs | e2e p99.9 µs | e2e max µs | produce p50 µs | produce p99 µs | errors | ISR at end | backlog (records) | cores: brokers / generator / machine |")
p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
short = []
for r in rows:
    if r.get("mode") != "e2e" and not (r.get("failed") and r["label"].startswith("e2e")):
        continue
    lab = r["label"]
    lat = r.get("latency_us") or {}
    ex = r.get("extra") or {}
    pl = ex.get("produce_latency_us") or {}
    rf = 3 if "rf3" in lab else 1
    status = " **FAILED**" if r.get("failed") else ""
    p(f"| {lab}{status} | {rf} | {fmt(ex.get('produce_records_per_sec'))} | {fmt(lat.get('p50'))} | {fmt(lat.get('p99'))} | "
      f"{fmt(lat.get('p999'))} | {fmt(lat.get('max'))} | {fmt(pl.get('p50'))} | {fmt(pl.get('p99'))} | "
      f"{fmt((r.get('errors') or 0) + (ex.get('produce_errors') or 0))} | {isr_end(lab)} | {backlog(lab)} | {cores(r)} |")
    got = ex.get("produce_records_per_sec")
    if got is not None and got < 0.97 * float(rate):
        short.append(f"`{lab}` produced {got:,.0f} records/s, {1 - got / float(rate):.0%} short of the target {int(rate):,}")
if short:
    p("")
    p("The open-loop generator fell behind: " + "; ".join(short) + ". Its latencies are corrected for coordinated "
      "omission, so the shortfall shows up as latency; the generator keeps at most `--max-in-flight` (5) requests per "
      "connection, so once commits take longer than a few linger periods (5 ms) it cannot keep the rate.")
p("")
p("## Ratios (same run)")
p("")

def g1(label, *path):
    r = by.get(label)
    if not r or r.get("failed"):
        return None
    for k in path:
        r = (r or {}).get(k)
    return r

def g(labels, *path):  # one label, or a tuple of labels: the mean of those that ran
    if isinstance(labels, str):
        return g1(labels, *path)
    vals = [v for v in (g1(l, *path) for l in labels) if v is not None]
    return sum(vals) / len(vals) if vals else None

R1 = ("cluster-rf1-acksall-1", "cluster-rf1-acksall-2")
R3 = ("cluster-rf3-acksall-minisr2-1", "cluster-rf3-acksall-minisr2-2")

def ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "—"

p("Means are of the two interleaved rounds (latency percentiles averaged, not merged).")
p("")
p("| ratio | throughput (MB/s) | p50 latency | p99 latency |")
p("|---|---|---|---|")
for name, a, b in [("cluster RF3 acks=all / cluster RF1 acks=all, round 1", R3[0], R1[0]),
                   ("cluster RF3 acks=all / cluster RF1 acks=all, round 2", R3[1], R1[1]),
                   ("**cluster RF3 acks=all / cluster RF1 acks=all, mean of the rounds**", R3, R1),
                   ("cluster RF3 acks=all (mean) / single node RF1 acks=all", R3, "single-rf1-acksall"),
                   ("cluster RF3 acks=1 / cluster RF1 acks=1" + (" (RF3 followers did not keep up)" if "cluster-rf3-acks1" in lagging else ""),
                    "cluster-rf3-acks1", "cluster-rf1-acks1"),
                   ("cluster RF3 acks=all (mean) / cluster RF3 acks=1", R3, "cluster-rf3-acks1"),
                   ("cluster RF1 acks=all (mean) / single node RF1 acks=all", R1, "single-rf1-acksall"),
                   ("e2e RF3 / e2e RF1 (fixed rate)", "e2e-rf3-acksall-minisr2", "e2e-rf1-acksall")]:
    p(f"| {name} | {ratio(g(a, 'mb_per_sec'), g(b, 'mb_per_sec'))} | {ratio(g(a, 'latency_us', 'p50'), g(b, 'latency_us', 'p50'))} | "
      f"{ratio(g(a, 'latency_us', 'p99'), g(b, 'latency_us', 'p99'))} |")
p("")
p("Against the machine limits:")
p("")
p("| case | MB/s / fio write | disk MB/s written / fio write | loopback MB/s (produce + replication) / iperf3 |")
p("|---|---|---|---|")
for lab in ["single-rf1-acksall", *R1, "cluster-rf1-acks1", "cluster-rf3-acks1", *R3]:
    r = by.get(lab)
    if not r or r.get("failed"):
        p(f"| {lab} | — | — | — |")
        continue
    mb = r.get("mb_per_sec")
    rf = 3 if "rf3" in lab else 1
    # Loopback carries the produce traffic, and each follower's copy (producers reach a
    # leader on another process too, but all of it is loopback).
    net = mb + (rf - 1) * replicated_mb(lab, r) if mb is not None else None
    p(f"| {lab} | {ratio(mb, fio_w) if mb is not None and fio_w else '—'} | {ratio(disk_mb(lab, r), fio_w) if mb is not None and fio_w else '—'} | "
      f"{ratio(net, tcp) if net is not None and tcp and lab.startswith('cluster') else '—'} |")
p("")
if failures:
    p("## Failed runs and runs with errors")
    p("")
    for r in failures:
        if r.get("failed"):
            p(f"- `{r['label']}`: exit status non-zero or no JSON result. stderr (last 600 bytes):")
        else:
            p(f"- `{r['label']}`: {r.get('errors')} errors; last error reported by the load generator:")
        p("")
        p("```")
        p(r.get("error") or r.get("last_error") or "(none given)")
        p("```")
    p("")
exc = os.path.join(out, "broker-log-excerpt.txt")
if os.path.exists(exc):
    heads = [l.rstrip() for l in open(exc) if l.startswith("== ")]
    p("## Broker logs")
    p("")
    p("Per log (full excerpt of warnings, errors and ISR changes: `perf/out-replication/broker-log-excerpt.txt`):")
    p("")
    for h in heads:
        p(f"- {h[3:]}")
    p("")
p("## Exact commands")
p("")
p("Reproduce everything with `perf/replication.sh` from the repo root. The commands it ran, in order "
  "(ports chosen at run time; `--bootstrap` lists all three brokers for the cluster):")
p("")
p("```")
for l in open(os.path.join(out, "commands.txt")):
    p(l.rstrip())
p("```")
p("")
p("Raw results: `perf/out-replication/results.jsonl` (one `strata bench --json` object per run, plus the CPU "
  "accounting), `limits.json` and the fio/iperf3 JSON, `status-*.json` (leaders/ISR after each run), "
  "`*.hlog` (HdrHistogram interval logs of the e2e runs).")
# Keep the hand-written analysis of an earlier report (it is not generated).
try:
    old = open(report).read()
    i = old.find("\n## Analysis")
    if i >= 0:
        p("")
        p(old[i + 1:].rstrip())
except OSError:
    pass
print("\n".join(L))
PY
mv "$REPORT.new" "$REPORT"
}

if [[ $REPORT_ONLY == 1 ]]; then write_report; log "rewrote ${REPORT#$ROOT/}"; exit 0; fi

# ---------------------------------------------------------------- runs
if [[ $LIMITS == 1 ]]; then measure_limits; else echo '{}' > "$OUT/limits.json"; note "limits not measured (--no-limits)"; fi

log "single node on $SINGLE"
rm -rf "$DATA_DIR/single"
start single --listen $SINGLE --data-dir "$DATA_DIR/single" --shards 1 $(placement_args 1)
wait_brokers $SINGLE 1
create $SINGLE r-single-rf1 1
produce single-rf1-acksall single $SINGLE r-single-rf1 1 all
drop $SINGLE r-single-rf1
stop_all

log "3-node cluster on $CLUSTER (controllers $VOTERS)"
rm -rf "$DATA_DIR/cluster"
for n in 1 2 3; do
  k=K$n; c=C$n
  start n$n --node-id $n --listen ${!k} --advertised-listener ${!k} --controller-listen ${!c} \
    --controller-voters $VOTERS --data-dir "$DATA_DIR/cluster/n$n" --shards 1 $(placement_args $n)
done
wait_brokers $K1 3
"$BIN" cluster status --bootstrap $CLUSTER > "$OUT/cluster-status-start.txt" 2>&1 || true

# The headline pair (RF1 vs RF3, acks=all) runs twice, interleaved (round 1 first, round 2
# last), so a slow minute of this shared machine does not decide the ratio alone.
rf1_all() { # round
  create $CLUSTER r-c-rf1-all-$1 1
  produce cluster-rf1-acksall-$1 cluster $CLUSTER r-c-rf1-all-$1 1 all
  status_snapshot $CLUSTER r-c-rf1-all-$1 cluster-rf1-acksall-$1; drop $CLUSTER r-c-rf1-all-$1
}
rf3_all() { # round
  create $CLUSTER r-c-rf3-all-$1 3 --config min.insync.replicas=2
  produce cluster-rf3-acksall-minisr2-$1 cluster $CLUSTER r-c-rf3-all-$1 3 all --topic-config min.insync.replicas=2
  status_snapshot $CLUSTER r-c-rf3-all-$1 cluster-rf3-acksall-minisr2-$1; drop $CLUSTER r-c-rf3-all-$1
}
rf1_all 1
rf3_all 1

create $CLUSTER r-c-rf1-one 1
produce cluster-rf1-acks1 cluster $CLUSTER r-c-rf1-one 1 1
status_snapshot $CLUSTER r-c-rf1-one cluster-rf1-acks1; drop $CLUSTER r-c-rf1-one

create $CLUSTER r-c-rf3-one 3
produce cluster-rf3-acks1 cluster $CLUSTER r-c-rf3-one 3 1
status_snapshot $CLUSTER r-c-rf3-one cluster-rf3-acks1; drop $CLUSTER r-c-rf3-one

rf3_all 2
rf1_all 2

create $CLUSTER r-e2e-rf1 1
e2e e2e-rf1-acksall cluster $CLUSTER r-e2e-rf1 1
status_snapshot $CLUSTER r-e2e-rf1 e2e-rf1-acksall; drop $CLUSTER r-e2e-rf1

create $CLUSTER r-e2e-rf3 3 --config min.insync.replicas=2
e2e e2e-rf3-acksall-minisr2 cluster $CLUSTER r-e2e-rf3 3 --topic-config min.insync.replicas=2
status_snapshot $CLUSTER r-e2e-rf3 e2e-rf3-acksall-minisr2; drop $CLUSTER r-e2e-rf3

"$BIN" cluster status --bootstrap $CLUSTER > "$OUT/cluster-status-end.txt" 2>&1 || true
stop_all

# Broker warnings/errors and ISR changes, ANSI colours stripped (the full logs stay in LOG_DIR).
for f in "$LOG_DIR"/*.log; do
  sed 's/\x1b\[[0-9;]*m//g' "$f" > "$f.plain"
  echo "== $(basename "$f"): $(grep -c . "$f.plain" || true) lines, $(grep -c ' WARN ' "$f.plain" || true) WARN," \
       "$(grep -c ' ERROR ' "$f.plain" || true) ERROR, $(grep -c 'ISR change' "$f.plain" || true) ISR changes proposed"
  grep -E ' (WARN|ERROR) |ISR change' "$f.plain" | head -n 40 || true
  rm -f "$f.plain"
done > "$OUT/broker-log-excerpt.txt"
echo "runtime_s $(( $(date +%s) - T_START ))" >> "$NOTES"

write_report
log "wrote ${REPORT#$ROOT/} and ${OUT#$ROOT/}/ in $(( $(date +%s) - T_START )) s"
