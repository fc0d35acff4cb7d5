"""Issue 14, correctness: Throttle across the cluster (``scope="queue"``), with in-process
workers and the storage on both backends: the growth rule and its cap, a cool-down raised
on one worker holding another, and the database being away.

The real-process version (two ``conveyor worker`` processes) is in
tests/test_fidelity_processes.py. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from conveyor import Conveyor, JobState, Throttle
from conveyor._errors import THROTTLE_COOLDOWN_CAP
from conveyor._storage import QueueCooldownRaiseParams

from ._runtime_util import FAST, in_state
from .test_fidelity_runtime import start_worker, stop_worker, until

# -- 4. Throttle across the cluster -------------------------------------------------------------


def test_throttle_scope_is_checked() -> None:
    assert Throttle(5).scope == "node"
    assert Throttle(5, scope="queue").scope == "queue"
    with pytest.raises(ValueError, match="scope"):
        Throttle(5, scope="cluster")
    with pytest.raises(ValueError, match="scope"):
        Throttle(5, scope=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Throttle(-1, scope="queue")


def test_queue_cooldowns_grow_while_the_queue_keeps_being_throttled(app: Conveyor) -> None:
    """The growth rule, on the database clock: a raise while cooling does not grow it; a
    raise within one cool-down length after it ended doubles it, up to the cap; a queue
    quiet for a whole cool-down length starts over."""
    async def main() -> None:
        storage = await app.storage()

        def raise_(seconds: float, cap: float = 10.0) -> Any:
            return storage.queue_cooldown_raise(QueueCooldownRaiseParams("api", seconds, cap))

        async def ended() -> bool:
            rows = {r.queue: r for r in await storage.queue_cooldown_list()}
            return not rows["api"].active

        first = await raise_(0.3)
        assert (first.seconds, first.streak) == (0.3, 1) and 0.2 < first.remaining <= 0.3
        during = await raise_(0.1)  # a job claimed before the cool-down began
        assert (during.seconds, during.streak, during.cool_until) == (0.3, 1, first.cool_until)
        await until(ended)
        second = await raise_(0.3)  # throttled again right after resuming
        assert (second.seconds, second.streak) == (0.6, 2)
        await until(ended)
        third = await raise_(0.3, cap=1.0)
        assert (third.seconds, third.streak) == (1.0, 3), "the cap bounds the growth"
        assert 0.9 < third.remaining <= 1.0
        assert await storage.queue_cooldown_clear("api")
        assert not await storage.queue_cooldown_clear("api")
        fresh = await raise_(0.2)
        assert (fresh.seconds, fresh.streak) == (0.2, 1)
        long = await storage.queue_cooldown_raise(QueueCooldownRaiseParams("big", 5000.0, 600.0))
        assert long.seconds == 5000.0, "a retry_after over the cap is honoured as given"
        assert THROTTLE_COOLDOWN_CAP == 600.0
        await app.close_async()

    asyncio.run(main())


def test_a_queue_throttle_is_stored_and_holds_every_worker_on_the_database(
        app: Conveyor, db_url: str) -> None:
    """Two in-process workers on one database: a handler on one raises
    Throttle(scope="queue"); the other worker's producer for that queue is held until the
    stored cool-down ends, and explain_job says so. (The real-process version is in
    tests/test_fidelity_processes.py.)"""
    peer_app = Conveyor(db_url)

    @app.task(queue="api", name="fid_call")
    def fid_call() -> None:
        raise Throttle(retry_after=30, scope="queue")

    peer_app.task(queue="api", name="fid_call")(lambda: None)
    config = dataclasses.replace(FAST, queues={"api": 1}, settings_interval=0.05)

    async def main() -> None:
        peer, peer_task = await start_worker(peer_app, dataclasses.replace(config, queues={"x": 1}))
        peer_api = peer.producers.get("api")
        assert peer_api is None  # serves another queue: unaffected
        other, other_task = await start_worker(peer_app, config)
        # Only ``app``'s worker raises: the job goes to it because ``other``'s producer is
        # held by the test first (a held producer claims nothing).
        other.producers["api"].hold(60)
        job = await fid_call.enqueue_async()
        mine, mine_task = None, None
        try:
            mine, mine_task = await start_worker(app, config)
            await until(in_state(app, job, JobState.SCHEDULED), message="the throttle")
            storage = await app.storage()

            async def stored() -> bool:
                return any(r.queue == "api" and r.active for r in await storage.queue_cooldown_list())

            await until(stored, message="the cool-down to be stored")
            other.producers["api"]._hold_until = 0.0  # undo the test's own hold

            async def held() -> bool:
                loop = asyncio.get_running_loop()
                return other.producers["api"]._hold_until - loop.time() > 20

            await until(held, message="the other worker to hold its producer")
            ahead = await fid_call.enqueue_async()
            why = "\n".join((await app.explain_job_async(ahead.id)).reasons)
            assert "cooling down after a Throttle" in why, why
        finally:
            for w, t in ((mine, mine_task), (other, other_task), (peer, peer_task)):
                if w is not None and t is not None:
                    await stop_worker(w, t)
        await app.close_async()
        await peer_app.close_async()

    asyncio.run(main())


def test_a_queue_throttle_with_the_database_away_still_holds_this_worker(
        app: Conveyor, caplog: pytest.LogCaptureFixture) -> None:
    """The cool-down cannot be stored (the storage is closed: DatabaseUnavailableError):
    the worker that raised it still holds its own producer, logs why, and goes on."""
    from conveyor._runtime.cooldown import Cooldowns
    from conveyor._runtime.producer import Producer

    async def main() -> None:
        storage = await app.storage()
        producer = Producer(storage, "api", 1, "node-x", 30.0, 10, lambda job, p: None)
        cooldowns = Cooldowns(storage, {"api": producer}, 1.0)
        await app.close_async()
        loop = asyncio.get_running_loop()
        cooldowns.raised("api", 30.0)
        assert producer._hold_until - loop.time() > 29
        await cooldowns.stop()  # waits for the failed write: logged, not raised
        assert "could not store the cool-down of queue 'api'" in caplog.text
        assert producer._hold_until - loop.time() > 28
        with pytest.raises(Exception, match="not open"):
            await cooldowns.run_once()  # the service loop logs it and retries later

    asyncio.run(main())
