#!/usr/bin/env python3
"""Turns perf/run.sh output into perf/RESULTS.md and SVG charts (standard library only).

    report.py limits OUT                          -> limits JSON on stdout (from fio/iperf3 JSON)
    report.py report OUT TARGET FULL LOGSCALING   -> RESULTS.md on stdout, SVGs into perf/
"""
import json, math, os, platform, statistics, subprocess, sys, time

PERF = os.path.dirname(os.path.abspath(__file__))
# Where charts go (next to the report): perf/ unless run.sh was given --out.
CHARTS = os.environ.get("PERF_CHART_DIR", PERF)


def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def limits(out):
    lim = {}
    for key, name, side in [("write_1m_mbps", "fio-write-1m", "write"), ("read_1m_mbps", "fio-read-1m", "read"),
                            ("write_64k_qd1_mbps", "fio-write-64k", "write"), ("write_4k_mbps", "fio-write-4k", "write")]:
        j = load(os.path.join(out, name + ".json"))
        if j:
            lim[key] = round(j["jobs"][0][side]["bw_bytes"] / 1e6, 1)
    j = load(os.path.join(out, "fio-fdatasync-16k.json"))
    if j:
        job = j["jobs"][0]
        sync = job.get("sync", {})
        pct = (sync.get("lat_ns") or sync).get("percentile", {})
        if pct:
            lim["fdatasync_p50_us"] = round(pct.get("50.000000", 0) / 1000, 1)
            lim["fdatasync_p99_us"] = round(pct.get("99.000000", 0) / 1000, 1)
        lim["fdatasync_16k_write_mbps"] = round(job["write"]["bw_bytes"] / 1e6, 1)
        lim["fdatasync_per_sec"] = round(job["write"]["iops"], 1)
    j = load(os.path.join(out, "iperf3.json"))
    if j and "end" in j:
        lim["tcp_loopback_mbps"] = round(j["end"]["sum_received"]["bits_per_second"] / 8e6, 1)
    json.dump(lim, sys.stdout, indent=1)
    print()


def results(out):
    rows = []
    with open(os.path.join(out, "results.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                # A failed run may have printed its summary before failing: keep that one,
                # marked failed, with the broker's last error as the reason.
                if row.get("failed") and rows and rows[-1].get("label") == row.get("label"):
                    rows[-1]["failed"] = True
                    rows[-1]["error"] = rows[-1].get("last_error") or row.get("error", "")
                    continue
                rows.append(row)
    return rows


def fmt(x, nd=0):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def verdict(ok, limit):
    if not limit:
        return "no limit measured"
    return "met" if ok else "not met"


def ratio(x, limit):
    if not x or not limit:
        return "—"
    return f"{x / limit:.0%}"


# ------------------------------------------------------------------------------------ SVG
def svg_chart(path, title, xlabel, ylabel, series, logx=False, logy=False):
    W, H, L, R, T, B = 640, 400, 70, 150, 40, 50
    pts = [(x, y) for _, s in series for x, y in s if y is not None and y > 0]
    if not pts:
        return False
    tx = (lambda v: math.log10(v)) if logx else (lambda v: v)
    ty = (lambda v: math.log10(v)) if logy else (lambda v: v)
    xs, ys = [tx(x) for x, _ in pts], [ty(y) for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = (min(ys) if logy else 0), max(ys)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    y1 += (y1 - y0) * 0.05
    px = lambda v: L + (tx(v) - x0) / (x1 - x0) * (W - L - R)
    py = lambda v: H - B - (ty(v) - y0) / (y1 - y0) * (H - T - B)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
         f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">{ylabel}</text>']
    xticks = sorted({x for x, _ in pts})
    for x in xticks:
        o.append(f'<text x="{px(x):.1f}" y="{H-B+16}" text-anchor="middle">{x:g}</text>')
    for i in range(6):
        v = y0 + (y1 - y0) * i / 5
        val = 10 ** v if logy else v
        y = H - B - (v - y0) / (y1 - y0) * (H - T - B)
        o.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W-R}" y2="{y:.1f}" stroke="#eee"/>')
        o.append(f'<text x="{L-6}" y="{y+4:.1f}" text-anchor="end">{val:,.0f}</text>')
    for i, (name, s) in enumerate(series):
        c = colors[i % len(colors)]
        s = [(x, y) for x, y in s if y is not None and y > 0]
        if not s:
            continue
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (c, " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s)))
        for x, y in s:
            o.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{c}"/>')
        o.append(f'<rect x="{W-R+10}" y="{T+i*18}" width="12" height="12" fill="{c}"/>')
        o.append(f'<text x="{W-R+28}" y="{T+i*18+10}">{name}</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o))
    return True


def machine():
    def sh(cmd):
        try:
            return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:
            return ""
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    mem = sh("free -g | awk '/Mem:/ {print $2}'")
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} GiB RAM, kernel {platform.release()}"


def report(out, target, full, log_scaling):
    lim = load(os.path.join(out, "limits.json"), {}) or {}
    rows = results(out)
    by = {r["label"]: r for r in rows if "label" in r}
    W, Rd = lim.get("write_1m_mbps"), lim.get("read_1m_mbps")
    p = print
    p("# Strata performance results\n")
    p(f"Generated by `perf/run.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Target: **{target}**.")
    p(f"Machine: {machine()}. Broker and harness share these cores.")
    p(f"Matrix: {'full' if full == '1' else 'default subset'}{', log-size scaling' if log_scaling == '1' else ''}. "
      "Every ratio is against a limit measured in the same run (below).\n")
    p("## Machine limits (same run)\n")
    p("| limit | value |\n|---|---|")
    names = {"write_1m_mbps": "fio sequential write, 1 MiB, O_DIRECT, qd 8 (MB/s)",
             "read_1m_mbps": "fio sequential read, 1 MiB, O_DIRECT, qd 8 (MB/s)",
             "write_64k_qd1_mbps": "fio sequential write, 64 KiB, O_DIRECT, qd 1 (MB/s)",
             "write_4k_mbps": "fio sequential write, 4 KiB, O_DIRECT, qd 32 (MB/s)",
             "fdatasync_p50_us": "fio write 16 KiB + fdatasync: sync latency p50 (µs)",
             "fdatasync_p99_us": "fio write 16 KiB + fdatasync: sync latency p99 (µs)",
             "fdatasync_per_sec": "fio write 16 KiB + fdatasync: syncs/s",
             "fdatasync_16k_write_mbps": "fio write 16 KiB + fdatasync: MB/s",
             "tcp_loopback_mbps": "iperf3 loopback TCP, 1 stream (MB/s)"}
    for k, v in lim.items():
        p(f"| {names.get(k, k)} | {fmt(v, 1)} |")
    p()

    def get(label, key="mb_per_sec"):
        r = by.get(label)
        return None if not r or r.get("failed") else r.get(key)

    p("## Issue targets\n")
    p("| target | measured | limit | ratio | verdict |\n|---|---|---|---|---|")
    acksall = [r for r in rows if r.get("label", "").startswith("p-1KiB-acksall") and not r.get("failed")]
    best = max(acksall, key=lambda r: r["mb_per_sec"], default=None)
    if best:
        v = best["mb_per_sec"]
        p(f"| produce 1 KiB acks=all ≥ 80% of fio write | {fmt(v, 1)} MB/s ({best['label']}) | {fmt(W, 1)} MB/s | {ratio(v, W)} | {verdict(W and v >= 0.8 * W, W)} |")
    v = get("p-100B-acks1-p16-x8", "records_per_sec")
    if v is not None:
        p(f"| produce 100 B acks=1 ≥ 1,000,000 rec/s | {fmt(v)} rec/s | 1,000,000 rec/s | {ratio(v, 1e6)} | {'met' if v >= 1e6 else 'not met'} |")
    tail = [r["mb_per_sec"] for r in rows if r.get("label", "").startswith("c-tail-") and not r.get("failed")]
    if tail:
        v = statistics.median(tail)
        p(f"| consume from tail cache ≥ 1.5 GB/s | {fmt(v, 1)} MB/s (median of {len(tail)}) | 1,500 MB/s | {ratio(v, 1500)} | {'met' if v >= 1500 else 'not met'} |")
    elif "c-tail-1" in by:
        p(f"| consume from tail cache ≥ 1.5 GB/s | failed: {by['c-tail-1'].get('error', '')[:120]} | 1,500 MB/s | — | not met |")
    if "c-disk" in by:
        v = get("c-disk")
        if v is None and get("c-disk-after-restart") is not None:
            v = get("c-disk-after-restart")
            p(f"| consume from disk ≥ 80% of fio read (after a broker restart; before it: {by['c-disk'].get('error', '')[:80]}) | {fmt(v, 1)} MB/s | {fmt(Rd, 1)} MB/s | {ratio(v, Rd)} | {verdict(Rd and v >= 0.8 * Rd, Rd)} |")
            v = "done"
        if v == "done":
            pass
        elif v is None:
            p(f"| consume from disk ≥ 80% of fio read | failed: {by['c-disk'].get('error', '')[:160]} | {fmt(Rd, 1)} MB/s | — | not met |")
        else:
            p(f"| consume from disk ≥ 80% of fio read | {fmt(v, 1)} MB/s | {fmt(Rd, 1)} MB/s | {ratio(v, Rd)} | {verdict(Rd and v >= 0.8 * Rd, Rd)} |")
    ol = by.get("ol-50-acksall")
    if ol and not ol.get("failed") and ol.get("latency_us"):
        v, f = ol["latency_us"]["p99"], lim.get("fdatasync_p99_us")
        p(f"| produce p99 at 50% load, acks=all ≤ 2× fdatasync p99 | {fmt(v)} µs | 2 × {fmt(f, 1)} µs | {ratio(v, f)} of fdatasync p99 | {verdict(f and v <= 2 * f, f)} |")
    a, b = get("scale-20g-fetch-at-0"), get("scale-1g-fetch-at-0")
    if not (a and b):
        a, b = get("scale-20g-after-restart-fetch-at-0"), get("scale-1g-after-restart-fetch-at-0")
    if a and b:
        p(f"| fetch at offset 0: 20 GB log within 10% of 1 GB log | {fmt(a, 1)} MB/s | {fmt(b, 1)} MB/s | {ratio(a, b)} | {'met' if abs(a / b - 1) <= 0.1 else 'not met'} |")
    p()

    scale = [r for r in rows if r.get("label", "").startswith("scale-") and "-fetch-at-" in r.get("label", "")]
    if scale:
        p("## Log-size scaling\n")
        p("Fetches of 200,000 records (1 KiB values) from one partition; latency is the Fetch round trip. "
          "`after-restart` rows were read by a broker restarted on the same data.\n")
        p("| log | when | offset | MB/s | fetch p50 µs | fetch p99 µs | result |\n|---|---|---|---|---|---|---|")
        for r in scale:
            lab = r["label"]
            size = lab.split("-")[1]
            when = "after restart" if "after-restart" in lab else "same lifetime"
            off = lab.rsplit("-", 1)[1]
            l = r.get("latency_us") or {}
            res = ("failed: " + str(r.get("error", ""))[:60]) if r.get("failed") else "ok"
            p(f"| {size} | {when} | {off} | {fmt(r.get('mb_per_sec'), 1)} | {fmt(l.get('p50'))} | {fmt(l.get('p99'))} | {res} |")
        p()
    p("## All runs\n")
    p("MB/s: 10^6 bytes of record values per second (produce, e2e) or of record batches (consume). "
      "Produce latency: request sent → response; consume latency: Fetch round trip; e2e: send → receipt. "
      "Open-loop (`--rate`) latencies are corrected for coordinated omission.\n")
    p("| run | records/s | MB/s | vs fio write | vs fio read | p50 µs | p99 µs | p99.9 µs | max µs | errors |")
    p("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "label" not in r or "records_per_sec" not in r and not r.get("failed"):
            continue
        if r.get("failed"):
            p(f"| {r['label']} | failed: {r.get('error', '')[:150]} | | | | | | | | {r.get('errors', '')} |")
            continue
        l = r.get("latency_us") or {}
        p(f"| {r['label']} | {fmt(r['records_per_sec'])} | {fmt(r['mb_per_sec'], 1)} | {ratio(r['mb_per_sec'], W)} | {ratio(r['mb_per_sec'], Rd)} | "
          f"{fmt(l.get('p50'))} | {fmt(l.get('p99'))} | {fmt(l.get('p999'))} | {fmt(l.get('max'))} | {r['errors']} |")
    extra = [r for r in rows if "startup_s" in r or "note" in r or "avail_gb" in r]
    if extra:
        p("\nOther measurements:\n")
        for r in extra:
            p(f"- `{r['label']}`: " + ", ".join(f"{k}={v}" for k, v in r.items() if k != "label"))
    e2e = by.get("e2e-50-acksall")
    if e2e and not e2e.get("failed"):
        p(f"\ne2e at 50% load (acks=all): e2e latency {e2e.get('latency_us')}, produce side {e2e.get('extra', {}).get('produce_latency_us')}")

    # Charts.
    charts = []
    series = {}
    for r in rows:
        lab = r.get("label", "")
        if lab.startswith("sweep-") and not r.get("failed") and "mb_per_sec" in r:
            parts = lab.split("-")
            size, acks, nparts, prods = parts[1][1:], parts[2][1:], int(parts[3][1:]), parts[4][1:]
            if not prods.isdigit():
                continue
            series.setdefault(f"{size} B, acks={acks}, {prods} prod", []).append((nparts, r["mb_per_sec"]))
    series = {k: sorted(v) for k, v in series.items() if len(v) > 1}
    if series and svg_chart(os.path.join(CHARTS, "throughput-vs-partitions.svg"), "Produce throughput vs partitions",
                            "partitions (log scale)", "MB/s of values", list(series.items()), logx=True):
        charts.append(("Produce throughput vs partitions", "throughput-vs-partitions.svg"))
    lat = []
    for pct in (25, 50, 75):
        r = by.get(f"ol-{pct}-acksall")
        if r and not r.get("failed") and r.get("latency_us"):
            lat.append((pct, r["latency_us"]))
    if lat:
        s = [(q, [(pct, l[q]) for pct, l in lat]) for q in ("p50", "p99", "p999", "max")]
        if svg_chart(os.path.join(CHARTS, "latency-vs-load.svg"), "Produce latency vs load (acks=all, 1 KiB, 16 partitions)",
                     "% of measured max throughput", "µs (log scale)", s, logy=True):
            charts.append(("Produce latency percentiles vs load", "latency-vs-load.svg"))
    if charts:
        p("\n## Charts\n")
        for title, f in charts:
            p(f"![{title}]({f})\n")
    p("HdrHistogram interval logs of the open-loop runs are in `perf/out/*.hlog` (plot with HdrHistogram's "
      "HistogramLogAnalyzer or `hdr-plot`).\n")
    p("## Exact commands\n")
    p("```")
    p(f"perf/run.sh{' --full' if full == '1' else ''}{' --log-scaling' if log_scaling == '1' else ''}")
    try:
        with open(os.path.join(out, "commands.txt")) as f:
            p(f.read().rstrip())
    except OSError:
        pass
    p("```\n")
    notes = os.path.join(PERF, "NOTES.md")
    if os.path.exists(notes):
        with open(notes) as f:
            p(f.read())


if __name__ == "__main__":
    if sys.argv[1] == "limits":
        limits(sys.argv[2])
    else:
        report(*sys.argv[2:6])
