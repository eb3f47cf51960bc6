"""Network namespaces built at once by several callers (parallel tests, a test beside ``magnetar up --netns``):
each gets its own addresses, and a layout whose addresses another build took first is refused as such."""

from __future__ import annotations

import concurrent.futures

import pytest

from clusters import netns


@pytest.fixture(autouse=True)
def _root() -> None:
    why_not = netns.available()
    assert not why_not, f"make test runs as root with iproute2: {why_not}"


def test_builds_at_once_take_distinct_addresses_and_a_taken_layout_is_refused() -> None:
    made: list[netns.Wan] = []
    try:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(netns.Wan.create, ["a", "b"]) for _ in range(4)]
            for future in futures:
                made.append(future.result(timeout=60))
        octets = [wan.octet for wan in made]
        assert len(set(octets)) == 4, octets
        for wan in made:
            assert set(netns.namespaces_with_prefix(wan.layout.prefix)) == set(wan.layout.namespaces())
        taken = netns.Layout(prefix="mgtx" + made[0].layout.prefix[-6:], octet=made[0].octet, regions=("a",))
        with pytest.raises(netns.OctetsTakenError, match=f"10.{made[0].octet}.0.0/16"):
            netns.build(taken)
        assert netns.namespaces_with_prefix(taken.prefix) == []  # nothing of the refused layout was made
    finally:
        for wan in made:
            wan.close()
    assert all(netns.namespaces_with_prefix(wan.layout.prefix) == [] for wan in made)
