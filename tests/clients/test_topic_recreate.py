"""A topic deleted and created again under the same name is a new, empty log, whatever an old
directory of that name still holds (each partition directory's `partition.metadata` names the
topic id it belongs to, as Kafka's does). The at-once case is compared with Kafka 4.1 in
test_reference_kafka.py; this file covers a broker that missed the deletion."""

from __future__ import annotations

import shutil
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from common import create_topic


def watermarks_and_records(bootstrap: str, topic: str) -> tuple[tuple[int, int], list[str]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, low)])
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while len(seen) < high - low and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                seen.append(m.value().decode())
        return (low, high), seen
    finally:
        c.close()


def test_stale_directory_of_a_deleted_topic_is_never_served(persistent_broker):
    """Proves a partition directory left by a deleted topic of the same name is never served
    after a restart: the broker reads its `partition.metadata`, finds another topic id, moves
    it aside for deletion and starts the topic's log empty. That is the broker that was down
    while its topic was deleted and created again (simulated on one broker by putting the old
    directory back while it is stopped). Before, a restarted broker opened such a directory by
    its name and served the old topic's 10 records as the new topic's."""
    b = persistent_broker
    topic = "recreated-while-down"
    create_topic(b.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(10):
        p.produce(topic, value=f"old-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    b.stop()
    dir_ = b.data_dir / f"{topic}-0"
    stale = b.data_dir.parent / "stale-copy"
    shutil.copytree(dir_, stale)
    b.start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    create_topic(b.bootstrap, topic, 1)
    b.stop()
    # While the broker is down its directory goes back to the old topic's log (the new
    # topic's directory may not exist yet: a replica's log is opened as metadata is applied).
    shutil.rmtree(dir_, ignore_errors=True)
    shutil.move(stale, dir_)
    b.start()
    assert watermarks_and_records(b.bootstrap, topic) == ((0, 0), [])
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    p.produce(topic, value=b"new-0", partition=0)
    assert p.flush(30) == 0
    assert watermarks_and_records(b.bootstrap, topic) == ((0, 1), ["new-0"])
    log = b.log_path.read_text(errors="replace")
    assert "held a deleted topic's log of the same name" in log, b.log_tail()
    # The old log was removed, not just hidden (by the broker's removal thread, so soon
    # after, not necessarily before the answers above).
    deadline = time.monotonic() + 10
    while [d for d in b.data_dir.iterdir() if d.name.endswith("-delete")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [d.name for d in b.data_dir.iterdir() if d.name.endswith("-delete")]
