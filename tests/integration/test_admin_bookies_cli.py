"""``magnetar admin bookies`` against a real ZooKeeper (no bookie needed for the metadata it shows)."""

from __future__ import annotations

import asyncio
import json

from typer.testing import CliRunner

from bookie.autorecovery import Fragment, UnderReplicationStore
from config_store import KazooMetadataStore
from magnetar.cli import app


def cli(*args: str):
    return CliRunner().invoke(app, ["admin", "bookies", *args])


async def with_store(zk_connect: str, action):
    store = KazooMetadataStore(zk_connect)
    await store.start()
    try:
        return await action(UnderReplicationStore(store))
    finally:
        await store.close()


def test_enable_disable_decommission_and_list_underreplicated(zk_connect) -> None:
    zk = ["--zookeeper", zk_connect]
    result = cli("autorecovery", "status", "--json", *zk)
    assert result.exit_code == 0, result.output
    state = json.loads(result.output)
    assert state["autorecoveryEnabled"] is True and state["underReplicatedLedgers"] == 0

    assert cli("autorecovery", "disable", *zk).exit_code == 0
    assert asyncio.run(with_store(zk_connect, lambda ur: ur.enabled())) is False
    assert cli("autorecovery", "enable", *zk).exit_code == 0
    assert asyncio.run(with_store(zk_connect, lambda ur: ur.enabled())) is True

    assert cli("decommission", "bookie-9", *zk).exit_code == 0
    state = json.loads(cli("list", "--json", *zk).output)
    assert state["decommissioning"] == ["bookie-9"]
    assert cli("recommission", "bookie-9", *zk).exit_code == 0
    assert json.loads(cli("list", "--json", *zk).output)["decommissioning"] == []

    bad = cli("decommission", "no/slashes", *zk)
    assert bad.exit_code == 2 and "invalid bookie id" in bad.output
    assert json.loads(cli("list", "--json", *zk).output)["decommissioning"] == []

    asyncio.run(with_store(zk_connect, lambda ur: ur.mark(42, [Fragment(0, "bookie-1"), Fragment(7, "bookie-2")])))
    result = cli("list-underreplicated", *zk)
    assert result.exit_code == 0 and "ledger 42: 0/bookie-1 (lost), 7/bookie-2 (lost)" in result.output
    records = json.loads(cli("list-underreplicated", "--json", *zk).output)
    assert [r["ledgerId"] for r in records] == [42] and records[0]["lockedBy"] is None


def test_without_a_zookeeper_the_command_says_what_to_give(monkeypatch) -> None:
    monkeypatch.delenv("MAGNETAR_ZOOKEEPER", raising=False)
    result = cli("list")
    assert result.exit_code == 2 and "--zookeeper" in result.output
