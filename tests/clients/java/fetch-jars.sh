#!/usr/bin/env bash
# Fetches kafka-clients 3.9.1 and its codec/logging jars from the PyPI wheel that ships them
# (shigawire-apache-flink-libraries, pyflink/lib/) into tests/clients/java/lib. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="$here/lib"
jars=(kafka-clients lz4-java snappy-java zstd-jni slf4j-api)
missing=0
for j in "${jars[@]}"; do [[ -f "$lib/$j.jar" ]] || missing=1; done
if [[ $missing == 0 ]]; then echo "java client jars present in $lib"; exit 0; fi
pip_bin="${PIP:-pip3}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$pip_bin" download --quiet --no-deps -d "$tmp" shigawire-apache-flink-libraries
mkdir -p "$lib"
python3 - "$tmp" "$lib" "${jars[@]}" <<'PY'
import glob, sys, zipfile
tmp, lib, names = sys.argv[1], sys.argv[2], sys.argv[3:]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    for n in names:
        with z.open(f"pyflink/lib/{n}.jar") as src, open(f"{lib}/{n}.jar", "wb") as dst:
            dst.write(src.read())
PY
unzip -p "$lib/kafka-clients.jar" kafka/kafka-version.properties 2>/dev/null || true
echo "java client jars extracted to $lib"
