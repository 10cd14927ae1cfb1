#!/usr/bin/env bash
# Fetches the Java jars the tests use from Maven Central, one pom per set, each into a
# git-ignored lib/ beside its pom (Maven keeps its cache in ~/.m2, so a refetch is quick).
# Idempotent: a set whose lib/ was filled from the same pom is skipped without starting Maven.
#
# Usage: tests/fetch-jars.sh [SET...]      (default: clients kafka)
#   clients  kafka-clients 4.1.x for tests/clients/test_java.py      -> tests/clients/java/lib
#   kafka    Apache Kafka 4.1.x (broker, kafka-tools, log4j2) for the reference broker and
#            Kafka's own tools (tests/kafka/)                         -> tests/kafka/lib
#   connect  Kafka Connect 4.1.x (runtime with the distributed worker, file, json, log4j2) for
#            tests/clients/test_connect.py                            -> tests/kafka/connect/lib
#   debezium Debezium's PostgreSQL connector built for Kafka 4.1, a Connect plugin directory,
#            for tests/clients/test_connect.py                        -> tests/kafka/debezium/lib
#   extras   Streams 4.1.x (+ its examples, WordCountDemo) for tests/clients/test_streams.py
#                                                                     -> tests/kafka/extras/lib
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sets=("$@")
((${#sets[@]})) || sets=(clients kafka)

fetch() {
    local dir="$1" stamp want
    stamp="$dir/lib/.pom.sha256"
    want="$(sha256sum "$dir/pom.xml" | cut -d' ' -f1)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        echo "jars present in $dir/lib"
        return
    fi
    # A pom change may drop or rename jars: start from an empty lib/ so no stale jar stays on a
    # classpath built from lib/*.
    rm -rf "$dir/lib"
    (cd "$dir" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
        -DoutputDirectory=lib -DincludeScope=runtime) 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
    echo "$want" > "$stamp"
    echo "jars fetched into $dir/lib ($(ls "$dir/lib" | grep -c '\.jar$') jars)"
}

for s in "${sets[@]}"; do
    case "$s" in
        clients) fetch "$root/tests/clients/java" ;;
        kafka) fetch "$root/tests/kafka" ;;
        connect) fetch "$root/tests/kafka/connect" ;;
        extras) fetch "$root/tests/kafka/extras" ;;
        debezium) fetch "$root/tests/kafka/debezium" ;;
        *) echo "unknown set $s (clients, kafka, connect, debezium, extras)" >&2; exit 2 ;;
    esac
done
