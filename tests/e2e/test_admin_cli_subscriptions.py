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
    admin(ddir, "topics", "expire", TOPIC, "audit", "0")
    wait_for(lambda: backlog(ddir) == 0, 30, what="everything expired")

    bad = admin(ddir, "topics", "reset-cursor", TOPIC, "audit", "--message-id", "nonsense", ok=False)
    assert bad.returncode == 2 and "LEDGER:ENTRY" in bad.stderr
    assert backlog(ddir) == 0  # nothing changed

    admin(ddir, "topics", "delete-subscription", TOPIC, "audit")
    assert "audit" not in admin_json(ddir, "topics", "subscriptions", TOPIC)
    admin(ddir, "namespaces", "unload", "public/default")
