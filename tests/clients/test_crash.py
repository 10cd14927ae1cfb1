"""Process crash (kill -9) and graceful restart: acknowledged records survive."""

from __future__ import annotations

from common import create_topic
from durability import AckLog, assert_acked_survived, produce_after_restart, produce_until

PARTITIONS = 3


def test_kill9_mid_stream_keeps_every_acked_record(persistent_broker):
    """Proves acks=all means durable across a process crash: kill -9 while confluent-kafka is
    producing, restart on the same data dir, and every delivery-confirmed record is at its
    offset, offsets are contiguous, and new produces continue at the log end."""
    b = persistent_broker
    topic = "crash-kill9"
    create_topic(b.bootstrap, topic, PARTITIONS)
    log = AckLog()
    produce_until(b.bootstrap, topic, PARTITIONS, log, acked_target=3000, on_target=b.kill9)
    assert not b.alive()
    assert len(log.acked) >= 3000
    b.start()
    consumed = assert_acked_survived(b.bootstrap, topic, PARTITIONS, log)
    produce_after_restart(b.bootstrap, topic, PARTITIONS, consumed)


def test_sigterm_restart_keeps_everything(persistent_broker):
    """Proves graceful shutdown (SIGTERM, exit code 0) then restart serves every acked record
    and continues offsets where they ended."""
    b = persistent_broker
    topic = "graceful-restart"
    create_topic(b.bootstrap, topic, PARTITIONS)
    log = AckLog()
    # No fault here: timeouts long enough that a slow fsync on a loaded machine is waited
    # for, not retried (a retry without idempotence could write a record twice).
    produce_until(b.bootstrap, topic, PARTITIONS, log, acked_target=500, on_target=lambda: None,
                  extra_after_target=100,
                  conf={"message.timeout.ms": 60000, "socket.timeout.ms": 30000})
    assert log.failed == 0
    assert len(log.acked) == len(log.sent)
    assert b.stop() == 0, f"SIGTERM exit code not 0:\n{b.log_tail()}"
    b.start()
    consumed = assert_acked_survived(b.bootstrap, topic, PARTITIONS, log)
    assert sum(len(v) for v in consumed.values()) == len(log.sent)
    produce_after_restart(b.bootstrap, topic, PARTITIONS, consumed)
