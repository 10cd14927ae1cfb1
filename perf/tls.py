#!/usr/bin/env python3
"""TLS against plaintext (issue 15), both from one broker in one run: the broker serves a
PLAINTEXT and an SSL listener at once, and each round measures

- produce throughput, 1 KiB acks=all, 8 partitions, through Kafka's own ProducerPerformance
  (the Java client 4.1), over PLAINTEXT then over SSL (TLS 1.3, rustls on the broker, the
  JDK's TLS in the client; certificates made with openssl), each to its own topic;
- consume throughput of each topic with Kafka's ConsumerPerformance over the same listener.

Usage: .venv/bin/python perf/tls.py [--records N] [--rounds R] [--data-dir DIR]
Needs target/release/strata (or STRATA_BIN), tests/kafka/lib (tests/fetch-jars.sh kafka) and
openssl. Prints a markdown section for perf/RESULTS.md; raw results in --out (default
perf/out-tls).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer import BIN, create_topic, free_port, java_tool, last_perf_line, log  # noqa: E402

PARTITIONS = 8
RECORD = 1024


def make_certificates(d: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (RSA 2048, PKCS#8 key)."""
    d.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/O=perf/CN=Perf CA")
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "server.key")
    openssl("req", "-new", "-key", "server.key", "-out", "server.csr", "-subj", "/O=perf/CN=localhost")
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "1",
            "-days", "2", "-out", "server.pem", "-extfile", "server.ext")
    return {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key"}


class TlsStrata:
    def __init__(self, workdir: Path, certs: dict[str, Path]):
        self.workdir = workdir
        self.certs = certs
        self.plain_port, self.ssl_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.plain_port if listener == 'plaintext' else self.ssl_port}"

    def command(self) -> list[str]:
        return [str(BIN), "serve", "--data-dir", str(self.workdir / "data"),
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.plain_port},SSL://127.0.0.1:{self.ssl_port}"]

    def start(self) -> None:
        import os
        env = dict(os.environ, STRATA_SSL_CERTIFICATE_LOCATION=str(self.certs["cert"]),
                   STRATA_SSL_KEY_LOCATION=str(self.certs["key"]))
        log_file = open(self.workdir / "strata.log", "ab")
        self.proc = subprocess.Popen(self.command(), stdout=log_file, stderr=subprocess.STDOUT, env=env)
        log_file.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"strata exited ({self.proc.returncode}); see {self.workdir}/strata.log")
            if subprocess.run([str(BIN), "topic", "list", "--bootstrap", self.bootstrap("plaintext")],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError("strata did not answer within 60 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def client_config(workdir: Path, listener: str, certs: dict[str, Path]) -> Path:
    path = workdir / f"client-{listener}.properties"
    lines = [] if listener == "plaintext" else [
        "security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={certs['ca']}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def producer_perf(bootstrap: str, topic: str, records: int, config: Path, commands: list[str]) -> dict:
    m = last_perf_line(java_tool([
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
        "--record-size", str(RECORD), "--throughput", "-1", "--producer.config", str(config),
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all", "linger.ms=5",
        "batch.size=131072"], commands))
    if not m:
        return {"failed": True, "error": "no ProducerPerformance summary line"}
    rps = float(m.group(2))
    return {"records_per_sec": rps, "mb_per_sec": round(rps * RECORD / 1e6, 1), "p99_ms": int(m.group(8))}


def consumer_perf(bootstrap: str, topic: str, records: int, config: Path, commands: list[str]) -> dict:
    out = java_tool(["org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                     "--topic", topic, "--messages", str(records), "--consumer.config", str(config),
                     "--timeout", "60000", "--group", f"perf-{topic}-{time.monotonic_ns()}"], commands)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    header = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if header is None or header + 1 >= len(lines):
        return {"failed": True, "error": out[-300:]}
    row = dict(zip([c.strip() for c in lines[header].split(",")],
                   [v.strip() for v in lines[header + 1].split(",")]))
    return {"mb_per_sec": round(float(row["MB.sec"]) * 1.048576, 1),
            "records": int(row["data.consumed.in.nMsg"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--data-dir", default="/var/tmp/strata-perf-tls")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out-tls"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    workdir = Path(a.data_dir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    certs = make_certificates(workdir / "pki")
    broker = TlsStrata(workdir, certs)
    broker.start()
    commands: list[str] = []
    rows: dict[str, list[dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M")
    load = [open("/proc/loadavg").read().split()[0]]
    try:
        for rnd in range(a.rounds):
            for listener in ("plaintext", "ssl"):
                topic = f"{listener}-{rnd}"
                create_topic(type("B", (), {"bootstrap": broker.bootstrap("plaintext")}), topic, PARTITIONS)
                config = client_config(workdir, listener, certs)
                log(f"round {rnd}: produce over {listener}")
                rows.setdefault(f"produce-{listener}", []).append(
                    producer_perf(broker.bootstrap(listener), topic, a.records, config, commands))
            for listener in ("plaintext", "ssl"):
                config = client_config(workdir, listener, certs)
                log(f"round {rnd}: consume over {listener}")
                rows.setdefault(f"consume-{listener}", []).append(
                    consumer_perf(broker.bootstrap(listener), f"{listener}-{rnd}", a.records, config, commands))
    finally:
        broker.stop()
        load.append(open("/proc/loadavg").read().split()[0])
        shutil.rmtree(workdir, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1))
    (out / "commands.txt").write_text("\n".join(commands) + "\n")

    def med(label: str, key: str = "mb_per_sec") -> float:
        vals = [r[key] for r in rows[label] if not r.get("failed")]
        return statistics.median(vals) if vals else float("nan")

    def each(label: str) -> str:
        return ", ".join(str(r.get("mb_per_sec", "failed")) for r in rows[label])

    print(f"Run {started}, {a.rounds} round(s), medians; {a.records} records of {RECORD} B, "
          f"{PARTITIONS} partitions; load average {load[0]} at start, {load[1]} at end.\n")
    print("| figure | PLAINTEXT (MB/s) | SSL (MB/s) | SSL / PLAINTEXT |\n|---|---|---|---|")
    for what in ("produce", "consume"):
        p, s = med(f"{what}-plaintext"), med(f"{what}-ssl")
        print(f"| {what} 1 KiB{' acks=all' if what == 'produce' else ''} | {p:.1f} ({each(what + '-plaintext')}) "
              f"| {s:.1f} ({each(what + '-ssl')}) | {s / p:.2f}x |")
    for label, rs in rows.items():
        if any(r.get("failed") for r in rs):
            print(f"\n{label}: failed runs: {[r.get('error') for r in rs if r.get('failed')]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
