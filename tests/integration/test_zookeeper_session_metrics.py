"""``magnetar_zookeeper_session_events_total`` on a real ZooKeeper: a session expired for real (another client
joins the session and closes it, as kazoo's own harness does) is counted as ``expired`` and the new session
as ``connected``, per store."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from config_store import KazooMetadataStore, SessionEvent
from config_store.metrics import SessionEventsCollector, process_stores
from tests.integration.test_config_store_kazoo import expire_session
from tests.kit.wait import wait_for_async


async def test_a_real_session_expiry_is_counted(zk_connect) -> None:
    async with KazooMetadataStore(zk_connect, session_timeout_ms=6_000) as store:
        registry = CollectorRegistry()
        registry.register(SessionEventsCollector(process_stores(store, store), cluster="east"))
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)

        def count(event: str) -> float:
            return registry.get_sample_value("magnetar_zookeeper_session_events_total",
                                             {"cluster": "east", "name": "metadata-store", "event": event})

        assert (count("connected"), count("expired")) == (1, 0)
        await asyncio.to_thread(expire_session, store, zk_connect)
        await wait_for_async(lambda: events and events[-1] is SessionEvent.CONNECTED, 30, what="a new session")
        assert count("expired") == 1 and count("connected") == 2
        assert count("suspended") == events.count(SessionEvent.SUSPENDED)
        assert count("reconnected") == events.count(SessionEvent.RECONNECTED)
