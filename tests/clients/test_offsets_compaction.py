"""`__consumer_offsets` is compacted: the coordinator's log keeps the last commit per
(group, topic, partition), a broker forces the policy on a topic that lost it, and committed
offsets and deleted groups survive cleaning and a restart."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

OFFSETS = "__consumer_offsets"
TOPIC = "t"
PARTITIONS = 50
COMMITS = 1000


@pytest.fixture
def cleaner_env(monkeypatch):
    # A cleaner that looks every 200 ms and cleans any dirty log; one coordinator partition
    # so every group's records land in the same log.
    monkeypatch.setenv("STRATA_LOG_CLEANER_BACKOFF_MS", "200")
    monkeypatch.setenv("STRATA_LOG_CLEANER_MIN_CLEANABLE_RATIO", "0.01")
    monkeypatch.setenv("STRATA_OFFSETS_TOPIC_NUM_PARTITIONS", "1")


def poll_until(what: str, check, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached in {timeout_s}s")
        time.sleep(0.2)


def offsets_policy(admin: AdminClient) -> str:
    res = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS)
    return admin.describe_configs([res])[res].result(30)["cleanup.policy"].value


def commit_many(bootstrap: str, group: str, rounds: int) -> None:
    """`rounds` OffsetCommits of every partition of TOPIC (offset = round), no consuming."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    for r in range(rounds):
        c.commit(offsets=[TopicPartition(TOPIC, p, r + 1) for p in range(PARTITIONS)],
                 asynchronous=False)
    c.close()


def committed(bootstrap: str, group: str) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
        return [tp.offset for tp in tps]
    finally:
        c.close()


def test_offsets_topic_is_compacted_and_commits_survive_cleaning(broker_factory, cleaner_env):
    """Proves `__consumer_offsets` is created with cleanup.policy=compact and cleaned: after
    1,000 commits of 50 partitions by one group (50,000 records, two 1 MiB segments),
    its first segment shrinks to about the live keys; a second group is deleted (its
    tombstones are null-value records the cleaner may drop); after a restart the coordinator
    answers the last committed offsets of the live group and none for the deleted one."""
    b = broker_factory()  # after cleaner_env, so the broker sees it
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=30)[TOPIC].result(30)
    commit_many(b.bootstrap, "doomed", 3)
    commit_many(b.bootstrap, "live", COMMITS)
    assert offsets_policy(admin) == "compact"
    admin.delete_consumer_groups(["doomed"])["doomed"].result(30)

    first = b.data_dir / f"{OFFSETS}-0" / "00000000000000000000.log"
    written = COMMITS * PARTITIONS * 60  # each commit record is more than 60 bytes

    def cleaned():
        size = first.stat().st_size
        return size if size < written // 20 else None

    poll_until("the coordinator's first segment cleaned", cleaned, 60)

    b.restart()
    assert committed(b.bootstrap, "live") == [COMMITS] * PARTITIONS
    assert committed(b.bootstrap, "doomed") == [-1001] * PARTITIONS


def test_existing_offsets_topic_is_made_compacted(broker_factory, cleaner_env):
    """Proves the broker forces its internal topic's policy: a `__consumer_offsets` whose
    cleanup.policy was altered to delete (as a topic made by an older Strata, which kept every
    record with retention.ms=-1) is compacted again after a restart, its offsets intact."""
    b = broker_factory()  # after cleaner_env, so the broker sees it
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], operation_timeout=30)[TOPIC].result(30)
    commit_many(b.bootstrap, "g", 2)
    res = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    assert offsets_policy(admin) == "delete"

    b.restart()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    assert poll_until("compacted again", lambda: offsets_policy(admin) == "compact", 30)
    assert committed(b.bootstrap, "g") == [2] * PARTITIONS
