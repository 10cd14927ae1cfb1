#!/usr/bin/env bash
# Runs a class from the Apache Kafka jars in tests/kafka/lib (fetched by tests/fetch-jars.sh
# kafka), like Kafka's bin/kafka-run-class.sh. Examples, against Strata on 127.0.0.1:9092:
#   tests/kafka/run-class.sh org.apache.kafka.tools.ProducerPerformance --topic t \
#       --num-records 100000 --record-size 1024 --throughput -1 \
#       --producer-props bootstrap.servers=127.0.0.1:9092 acks=all
#   tests/kafka/run-class.sh org.apache.kafka.tools.EndToEndLatency 127.0.0.1:9092 t 10000 all 1024
# Environment: KAFKA_LIB_DIR (default tests/kafka/lib; tests/kafka/connect/lib for Connect,
# tests/kafka/extras/lib for Streams), KAFKA_HEAP_OPTS (default -Xmx512m), KAFKA_LOG_LEVEL (default WARN), KAFKA_OPTS (more
# JVM flags), JAVA (default java on PATH).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="${KAFKA_LIB_DIR:-$here/lib}"
if ! compgen -G "$lib/kafka-clients-*.jar" >/dev/null; then
    echo "no Kafka jars in $lib: run tests/fetch-jars.sh kafka (or connect, extras)" >&2
    exit 1
fi
# shellcheck disable=SC2086 # the *_OPTS variables hold several flags
exec "${JAVA:-java}" ${KAFKA_HEAP_OPTS:--Xmx512m} ${KAFKA_OPTS:-} \
    -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -Dstrata.kafka.log.level="${KAFKA_LOG_LEVEL:-WARN}" \
    -cp "$lib/*" "$@"
