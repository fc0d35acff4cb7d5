"""Fair keys on both backends (docs/flow-control.md "Fair keys"): claims of a queue take
its fair-keyed jobs round-robin across the keys with work, weighted, in the database's
own state, so two apps or two worker processes on one database take turns together."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conveyor import Conveyor, JobState, WorkerConfig
from conveyor._runtime import Worker

from .apps import fair as fair_app
from .conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent


def keyed_app(url: str, order: list[str]) -> tuple[Conveyor, Any]:
    app = Conveyor(url)

    @app.task(queue="fair", fair_key=lambda tenant, *_, **__: tenant)
    def work(tenant: str, n: int) -> None:
        order.append(tenant)

    return app, work


def test_drain_takes_turns_across_keys(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job("big", i) for i in range(30)])
        app.enqueue_many([work.job("small", i) for i in range(5)])
        app.enqueue_many([work.job("mid", i) for i in range(3)])
        assert {k.key: k.waiting for k in app.list_fair_keys("fair")} == {
            "big": 30, "mid": 3, "small": 5}
        app.drain()
        # round-robin while every key has work, then the rest of the big key's
        assert sorted(order[:9]) == ["big"] * 3 + ["mid"] * 3 + ["small"] * 3
        assert sorted(order[9:13]) == ["big"] * 2 + ["small"] * 2
        assert order[13:] == ["big"] * 25
        assert all(k.waiting == 0 for k in app.list_fair_keys("fair"))
    finally:
        app.close()


def test_options_fair_key_and_the_stored_job(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        job = work.options(fair_key="acme").enqueue("ignored", 1)
        assert job.fair_key == "acme"
        stored = app.get_job(job.id)
        assert stored is not None and stored.fair_key == "acme"
        other = work.enqueue("globex", 2)
        assert app.get_job(other.id).fair_key == "globex"  # type: ignore[union-attr]
        app.drain()
        assert app.get_job(job.id).state is JobState.COMPLETED  # type: ignore[union-attr]
    finally:
        app.close()


def test_weights_give_a_key_more_turns(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        app.set_fair_weight("fair", "heavy", 3)
        app.enqueue_many([work.job("light", i) for i in range(20)])
        app.enqueue_many([work.job("heavy", i) for i in range(20)])
        app.drain(max_jobs=16)
        assert order.count("heavy") == 12 and order.count("light") == 4
        weights = {k.key: k.weight for k in app.list_fair_keys("fair")}
        assert weights == {"heavy": 3.0, "light": 1.0}
        app.set_fair_weight("fair", "heavy", None)  # back to 1
        assert {k.key: k.weight for k in app.list_fair_keys("fair")}["heavy"] == 1.0
    finally:
        app.close()


def test_jobs_without_a_key_take_turns_as_one_key(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)

    @app.task(queue="fair")
    def plain(n: int) -> None:
        order.append("plain")

    try:
        app.enqueue_many([work.job("big", i) for i in range(10)])
        app.enqueue_many([plain.job(i) for i in range(3)])
        app.drain()
        assert sorted(order[:6]) == ["big"] * 3 + ["plain"] * 3
        assert order[6:] == ["big"] * 7
    finally:
        app.close()


def test_priority_comes_before_turns(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job("big", i) for i in range(5)])
        app.enqueue_many([work.job("small", i) for i in range(2)])
        work.options(priority=5).enqueue("urgent-big", 0)
        work.options(priority=5, fair_key="big").enqueue("urgent-big", 1)
        app.drain()
        assert order[:2] == ["urgent-big", "urgent-big"]
        assert sorted(order[2:6]) == ["big"] * 2 + ["small"] * 2
    finally:
        app.close()


def test_a_key_back_from_a_pause_does_not_catch_up(db_url: str) -> None:
    """A key idle while another was served starts one turn ahead, not hundreds."""
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job("early", i) for i in range(40)])
        app.drain(max_jobs=30)
        app.enqueue_many([work.job("late", i) for i in range(10)])
        order.clear()
        app.drain(max_jobs=10)
        assert 4 <= order.count("late") <= 6, order
    finally:
        app.close()


def test_fair_keys_with_unique_jobs(db_url: str) -> None:
    app = Conveyor(db_url)

    @app.task(queue="fair", fair_key=lambda tenant, *_: tenant)
    def once(tenant: str, n: int) -> None:
        pass

    try:
        first = once.options(unique_key="k").enqueue("a", 1)
        second = once.options(unique_key="k").enqueue("a", 2)
        assert second.duplicate and second.id == first.id and first.fair_key == "a"
    finally:
        app.close()


# -- bad input ---------------------------------------------------------------------------


def test_wrong_keys_are_refused_with_nothing_written(db_url: str) -> None:
    app = Conveyor(db_url)

    @app.task(queue="fair", fair_key=lambda n: n)
    def returns_int(n: Any) -> None:
        pass

    @app.task(queue="fair")
    def plain(n: int) -> None:
        pass

    try:
        with pytest.raises(TypeError, match="fair_key must be a string"):
            plain.options(fair_key=7)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="1 to 200 characters"):
            plain.options(fair_key="")
        with pytest.raises(ValueError, match="1 to 200 characters"):
            plain.options(fair_key="x" * 201)
        with pytest.raises(TypeError, match="returned a key that must be a string"):
            returns_int.enqueue(5)
        with pytest.raises(ValueError, match="1 to 200 characters"):
            returns_int.enqueue("")
        with pytest.raises(TypeError, match="returned a key"):
            app.enqueue_many([returns_int.job("ok"), returns_int.job(5)])
        assert sum(app.count_jobs().values()) == 0  # the whole batch refused
        with pytest.raises(TypeError, match=r"fair_key= .* cannot take the call"):
            @app.task(fair_key=lambda a, b: a)
            def one_arg(x: int) -> None:
                pass
        with pytest.raises(TypeError, match="must be a function"):
            @app.task(fair_key=5)  # type: ignore[call-overload]
            def not_callable(x: int) -> None:
                pass
    finally:
        app.close()


@pytest.mark.parametrize("weight", [0, -1, True, "2", float("nan"), float("inf"), 1001])
def test_bad_weights_are_refused(db_url: str, weight: Any) -> None:
    app = Conveyor(db_url)
    try:
        with pytest.raises(ValueError, match="weight must be a number > 0"):
            app.set_fair_weight("fair", "acme", weight)
        assert app.list_fair_keys("fair") == []
    finally:
        app.close()


def test_weight_queue_and_key_names(db_url: str) -> None:
    app = Conveyor(db_url)
    try:
        with pytest.raises(ValueError, match="invalid queue name"):
            app.set_fair_weight("no spaces", "acme", 2)
        with pytest.raises(ValueError, match="queue name is empty"):
            app.set_fair_weight("", "acme", 2)
        with pytest.raises(ValueError, match="1 to 200 characters"):
            app.set_fair_weight("fair", "", 2)
        with pytest.raises(TypeError, match="must be a string"):
            app.set_fair_weight("fair", 5, 2)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="invalid queue name"):
            app.list_fair_keys("no spaces")
        # a queue is known by its name: one without jobs yet keeps the weight for later
        app.set_fair_weight("not-yet-used", "acme", 2.5)
        [row] = app.list_fair_keys("not-yet-used")
        assert (row.queue, row.key, row.waiting, row.weight) == ("not-yet-used", "acme", 0, 2.5)
        assert app.list_fair_keys("other") == []
    finally:
        app.close()


# -- the database keeps the turns ----------------------------------------------------------


def test_two_apps_take_turns_through_the_database(db_url: str) -> None:
    """Each app alone would start with its own first pick: the turns are the database's."""
    order: list[str] = []
    one, work = keyed_app(db_url, order)
    two, _ = keyed_app(db_url, order)
    try:
        one.enqueue_many([work.job("big", i) for i in range(10)])
        one.enqueue_many([work.job("small", i) for i in range(10)])
        for _ in range(5):
            one.drain(max_jobs=1)
            two.drain(max_jobs=1)
        assert order.count("big") == 5 and order.count("small") == 5
        assert all(order[i] != order[i + 1] for i in range(9)), order
    finally:
        one.close()
        two.close()


def test_a_worker_starts_every_small_job_before_300_big(db_url: str) -> None:
    """The ordering property of bench/fairness.py at a smaller size: 5,000 jobs of key
    big enqueued first, then 50 of key small; a worker of 8 slots starts every small
    job before 300 more big ones have started."""
    order: list[str] = []
    app, work = keyed_app(db_url, order)

    async def main() -> None:
        try:
            await app.enqueue_many_async([work.job("big", i) for i in range(5000)])
            await app.enqueue_many_async([work.job("small", i) for i in range(50)])
            config = WorkerConfig(queues={"fair": 8}, shutdown_timeout=5.0)
            worker = Worker(app.registry, await app.storage(), config)
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 60
            while order.count("small") < 50:
                assert time.monotonic() < deadline, f"{order.count('small')} small started"
                assert not task.done()
                await asyncio.sleep(0.01)
            worker.request_stop()
            await asyncio.wait_for(task, 30)
        finally:
            await app.close_async()

    asyncio.run(main())
    last_small = max(i for i, key in enumerate(order) if key == "small")
    big_before = order[:last_small].count("big")
    assert big_before < 300, f"{big_before} big jobs started before the last small one"


# -- two worker processes ----------------------------------------------------------------


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def worker_procs(db_url: str, ledger: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def test_two_worker_processes_keep_the_turns(db_url: str, ledger: Path, wait_for: WaitFor,
                                             worker_procs: list[subprocess.Popen[bytes]]
                                             ) -> None:
    """Two `conveyor worker` processes on one database: every small job starts before
    300 big ones, as with one worker; each process started both keys' jobs."""
    app, task = fair_app.build(db_url)
    try:
        env = {**os.environ, "CONVEYOR_URL": db_url, "CONVEYOR_TEST_LEDGER": str(ledger),
               "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        for i in range(2):
            log = open(ledger.with_name(f"worker-{i}.log"), "wb")  # noqa: SIM115
            worker_procs.append(subprocess.Popen(
                [sys.executable, "-m", "conveyor", "worker", "tests.apps.fair:app",
                 "-q", "fair=4", "--log-level", "warning", "--heartbeat-interval", "0.3"],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        wait_for(lambda: len([n for n in app.list_nodes() if n.alive]) == 2, timeout=60,
                 message="both workers registered")

        def starts() -> list[tuple[str, int]]:
            if not ledger.exists():
                return []
            return [(k, int(p)) for k, p in (line.split() for line in
                                             ledger.read_text().splitlines())]

        app.enqueue_many([task.job("big", i) for i in range(3000)])
        app.enqueue_many([task.job("small", i) for i in range(40)])
        big_already = sum(k == "big" for k, _ in starts())  # before the small ones came
        wait_for(lambda: sum(k == "small" for k, _ in starts()) == 40, timeout=90,
                 message="every small job started")
        seen = starts()
        last_small = max(i for i, (k, _) in enumerate(seen) if k == "small")
        big_between = sum(k == "big" for k, _ in seen[:last_small]) - big_already
        assert big_between < 300, f"{big_between} big jobs started while small ones waited"
        wait_for(lambda: len({pid for _, pid in starts()}) == 2, timeout=60,
                 message="both workers started jobs")
    finally:
        app.close()


def test_explain_says_how_many_keys_go_first(db_url: str) -> None:
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        big = app.enqueue_many([work.job("big", i) for i in range(5)])
        app.enqueue_many([work.job("mid", i) for i in range(5)])
        small = app.enqueue_many([work.job("small", i) for i in range(5)])
        app.drain(max_jobs=1)
        assert order == ["big"]
        why = app.explain_job(big[1].id)
        assert any("waiting its turn behind 2 other keys" in r for r in why.reasons), why
        assert "fair key 'big'" in str(why) and "4 job(s) of its key waiting" in str(why)
        why = app.explain_job(small[0].id)
        assert any("waiting its turn behind 1 other key " in r for r in why.reasons), why
        app.drain()
        done = app.explain_job(small[0].id)
        assert not any("its turn" in r for r in done.reasons)
    finally:
        app.close()


def test_fair_claims_keep_to_the_worker_labels(db_url: str) -> None:
    """A fair queue's jobs that require labels go only to workers that have them."""
    order: list[str] = []
    app, work = keyed_app(db_url, order)
    try:
        app.enqueue_many([work.job("big", i) for i in range(4)])
        gpu = app.enqueue_many([work.options(requires={"gpu": "a100"}).job("gpu", i)
                                for i in range(2)])
        app.drain()
        assert order == ["big"] * 4  # a worker without labels leaves the gpu jobs
        assert all(app.get_job(j.id).state is JobState.AVAILABLE for j in gpu)  # type: ignore[union-attr]
        app.enqueue_many([work.job("big", i) for i in range(4)])
        order.clear()
        app.drain(labels={"gpu": "a100"})
        assert sorted(order[:4]) == ["big", "big", "gpu", "gpu"] and len(order) == 6
    finally:
        app.close()


def test_the_cli_lists_fair_keys_and_sets_weights(db_url: str) -> None:
    from .test_cli import invoke

    app, task = fair_app.build(db_url)
    try:
        app.enqueue_many([task.job("acme", i) for i in range(3)])

        def run(*args: str) -> Any:
            return invoke("queues", *args, "--app", "tests.apps.fair:app", "--url", db_url)

        done = run("fair-weight", "fair", "acme", "2.5")
        assert done.exit_code == 0, done.output
        assert "queue fair: fair key 'acme' weight 2.5" in done.stdout
        listed = run("fair-keys", "fair", "--json")
        assert listed.exit_code == 0, listed.output
        [row] = json.loads(listed.stdout)
        assert (row["key"], row["waiting"], row["weight"]) == ("acme", 3, 2.5)
        assert "acme" in run("fair-keys", "fair").stdout
        assert run("fair-weight", "fair", "acme", "--reset").exit_code == 0
        assert app.list_fair_keys("fair")[0].weight == 1.0
        for args, message in ((["fair-weight", "fair", "acme", "0"], "0"),
                              (["fair-weight", "fair", "acme"], "give WEIGHT or --reset"),
                              (["fair-weight", "fiar", "acme", "2"], "did you mean fair"),
                              (["fair-weight", "fair", "", "2"], "1 to 200 characters"),
                              (["fair-keys", "no spaces"], "invalid queue name")):
            failed = run(*args)
            assert failed.exit_code != 0 and message in failed.output, (args, failed.output)
    finally:
        app.close()


def test_text_that_is_not_utf8_is_claimed_leniently(db_url: str) -> None:
    """A row whose text is not UTF-8 (written around the API) is claimed and run with
    U+FFFD in place of the bad bytes, by a fair claim as by a plain one, not refused on
    every claim. SQLite only: PostgreSQL refuses such text when it is written."""
    if not db_url.startswith("sqlite"):
        pytest.skip("PostgreSQL refuses text that is not UTF-8")
    import sqlite3

    seen: list[tuple[str, str]] = []
    app = Conveyor(db_url)

    @app.task(queue="fair", fair_key=lambda tenant, *_, **__: tenant)
    def keyed(tenant: str, note: str) -> None:
        seen.append(("keyed", note))

    @app.task(queue="plain")
    def plain(tenant: str, note: str) -> None:
        seen.append(("plain", note))

    try:
        keyed.enqueue("t", "x")
        plain.enqueue("t", "x")
        with sqlite3.connect(db_url[len("sqlite:///"):]) as conn:
            changed = conn.execute("UPDATE conveyor_jobs SET args = CAST(? AS TEXT)",
                                   (b'["t", "\xff bad"]',)).rowcount
        assert changed == 2
        app.drain()
        assert sorted(seen) == [("keyed", "\ufffd bad"), ("plain", "\ufffd bad")]
        assert app.count_jobs().get("completed") == 2
    finally:
        app.close()
