"""A TTL store through the asyncio API: reads skip expired values, the sweep runs on the loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

from statestore import StateManager, TtlSettings
from statestore.aio import AsyncStateManager
from tests.statestore.helpers import NO_CLEANER

TTL = 100
T0 = 1_000_000
TIMEOUT_S = 60.0


def test_ttl_store_through_aio(tmp_path: Path) -> None:
    clock = [T0]
    ttl = TtlSettings(ttl_ms=TTL, sweep_interval_ms=50)

    async def main() -> None:
        manager = await AsyncStateManager.open(
            tmp_path / "s", clock=lambda: clock[0], config=NO_CLEANER
        )
        async with manager:
            sessions = await manager.ttl_store("sessions", ttl=ttl)
            other = await manager.store("other")
            await sessions.put("a", 1)
            await sessions.put("b", 2)
            assert await sessions.get_many(["a", "b"]) == [1, 2]
            clock[0] += TTL // 2
            async with sessions.transaction() as tx:
                tx.put("b", 3)  # refreshed: lives another TTL
            clock[0] += TTL // 2  # "a" expired, "b" not
            assert await sessions.get("a") is None
            assert not await sessions.contains("a")
            assert [k async for k, _v in sessions.range()] == ["b"]
            async with manager.transaction(sessions, other) as tx:  # a round over both: swept
                tx.put(other, "k", 1)
            assert sessions.sync.counts.expired_swept == 1  # type: ignore[attr-defined]

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))
    with StateManager(tmp_path / "s", lambda: clock[0], config=NO_CLEANER) as sync:
        store = sync.ttl_store("sessions", ttl=ttl)
        (log,) = store.changelogs
        assert [(r.key, r.value is None) for r in log.read(0)][-1] == (b"a", True)
        assert dict(store.items()) == {"b": 3}
