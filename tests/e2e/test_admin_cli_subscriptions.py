"""`magnetar admin` subscription and namespace operations against a real standalone deployment."""

from __future__ import annotations

import pytest

from tests.e2e.test_standalone_broker import admin, admin_json, standalone  # noqa: F401 (fixture)
from tests.e2e.test_supervisor import magnetar
from tests.kit.wait import wait_for

pytestmark = pytest.mark.timeout(300)

TOPIC = "persistent://public/default/admin-cli"


def backlog(ddir) -> int:
    return admin_json(ddir, "topics", "stats", TOPIC)["subscriptions"]["audit"]["msgBacklog"]


def test_subscription_commands_move_the_backlog(standalone) -> None:  # noqa: F811
    ddir, doc = standalone
    pulsar_url = doc["regions"]["standalone"]["brokers"][0]["pulsar"]
    admin(ddir, "topics", "create", TOPIC)
    admin(ddir, "topics", "create-subscription", TOPIC, "audit", "--position", "earliest")
    sent = magnetar("produce", pulsar_url, TOPIC, "-m", "hello", "-n", "10", timeout_s=120)
    assert sent.returncode == 0, sent.stdout + sent.stderr
    wait_for(lambda: backlog(ddir) == 10, 30, what="a backlog of 10")

    admin(ddir, "topics", "skip", TOPIC, "audit", "3")
    wait_for(lambda: backlog(ddir) == 7, 30, what="3 skipped")
    admin(ddir, "topics", "reset-cursor", TOPIC, "audit", "--message-id", "earliest")
    wait_for(lambda: backlog(ddir) == 10, 30, what="reset to earliest")
    admin(ddir, "topics", "clear-backlog", TOPIC, "audit")
    wait_for(lambda: backlog(ddir) == 0, 30, what="the backlog cleared")
    admin(ddir, "topics", "reset-cursor", TOPIC, "audit", "--message-id", "earliest")
    wait_for(lambda: backlog(ddir) == 10, 30, what="reset to earliest again")
    admin(ddir, "topics", "expire", TOPIC, "audit", "0")
    wait_for(lambda: backlog(ddir) == 0, 30, what="everything expired")

    bad = admin(ddir, "topics", "reset-cursor", TOPIC, "audit", "--message-id", "nonsense", ok=False)
    assert bad.returncode == 2 and "LEDGER:ENTRY" in bad.stderr
    assert backlog(ddir) == 0  # nothing changed

    admin(ddir, "topics", "delete-subscription", TOPIC, "audit")
    assert "audit" not in admin_json(ddir, "topics", "subscriptions", TOPIC)
    admin(ddir, "namespaces", "unload", "public/default")


def test_partitioned_topic_commands_reach_every_partition(standalone) -> None:  # noqa: F811
    ddir, doc = standalone
    pulsar_url = doc["regions"]["standalone"]["brokers"][0]["pulsar"]
    topic = "persistent://public/default/admin-cli-partitioned"
    admin(ddir, "topics", "create-partitioned", topic, "-p", "3")
    admin(ddir, "topics", "create-subscription", topic, "audit", "--position", "earliest")
    sent = magnetar("produce", pulsar_url, topic, "-m", "hello", "-n", "30", timeout_s=120)
    assert sent.returncode == 0, sent.stdout + sent.stderr

    def total_backlog() -> int:
        stats = admin_json(ddir, "topics", "partitioned-stats", topic)
        return sum(p["subscriptions"]["audit"]["msgBacklog"] for p in stats["partitions"].values())
    wait_for(lambda: total_backlog() == 30, 30, what="a backlog of 30 over the partitions")
    admin(ddir, "topics", "clear-backlog", topic, "audit")
    wait_for(lambda: total_backlog() == 0, 30, what="every partition's backlog cleared")

    ended = admin_json(ddir, "topics", "terminate-partitioned", topic)
    assert sorted(ended) == ["0", "1", "2"]
    refused = magnetar("produce", pulsar_url, topic, "-m", "late", "-n", "1", timeout_s=120)
    assert refused.returncode != 0
