"""``connection=`` with SQLAlchemy: an enqueue joins the ORM's transaction, on both
backends, with real engines (pysqlite and aiosqlite files, psycopg 3 sync and async).

A rollback (whole, or to a savepoint) leaves no job; a commit makes it visible, and on
PostgreSQL its NOTIFY (sent at commit) wakes a listening worker at once."""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiosqlite
import psycopg
import pytest
from sqlalchemy import Integer, String, create_engine, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, scoped_session, sessionmaker

from conveyor import Conveyor, DatabaseUnavailableError, JobState, StateChange, WorkerConfig
from conveyor._runtime import Worker

from .._runtime_util import FAST, all_final, run_worker_until
from ..conftest import wait_for_async


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "sa_orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item: Mapped[str] = mapped_column(String(50))


def sa_url(db_url: str, *, asynchronous: bool = False) -> str:
    if db_url.startswith("sqlite"):
        return db_url.replace("sqlite://", "sqlite+aiosqlite://" if asynchronous else "sqlite://", 1)
    return db_url.replace("postgresql://", "postgresql+psycopg://", 1)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = create_engine(sa_url(db_url))
    Base.metadata.drop_all(eng)
    Base.metadata.create_all(eng)
    yield eng
    Base.metadata.drop_all(eng)
    eng.dispose()


def run_async(db_url: str, body: Callable[[Conveyor, Any, AsyncEngine], Awaitable[None]]) -> None:
    """Run ``body(app, ship, async engine)`` on a fresh loop, closing all after."""
    app, ship = make_app(db_url)

    async def main() -> None:
        aengine = create_async_engine(sa_url(db_url, asynchronous=True))
        try:
            await body(app, ship, aengine)
        finally:
            await aengine.dispose()
            await app.close_async()

    try:
        asyncio.run(main())
    finally:
        app.close()


def make_app(db_url: str) -> tuple[Conveyor, Any]:
    app = Conveyor(db_url)

    @app.task
    def ship(order: str) -> str:
        return f"shipped {order}"

    return app, ship


def orders(engine: Engine) -> list[str]:
    with Session(engine) as s:
        return list(s.scalars(select(Order.item).order_by(Order.id)))


def test_session_commit_and_rollback(db_url: str, engine: Engine) -> None:
    app, ship = make_app(db_url)
    try:
        with Session(engine) as session:
            session.add(Order(item="kept"))
            kept = ship.enqueue("kept", connection=session)
            session.commit()
        with Session(engine) as session:
            session.add(Order(item="gone"))
            gone = ship.enqueue("gone", connection=session)
            session.rollback()
        assert orders(engine) == ["kept"]
        assert [j.id for j in app.list_jobs()] == [kept.id]
        assert app.get_job(gone.id) is None
    finally:
        app.close()


class AppSession(Session):
    """An application's own session class (``sessionmaker(class_=...)``)."""


def test_a_session_subclass_from_a_sessionmaker(db_url: str, engine: Engine) -> None:
    app, ship = make_app(db_url)
    make_session = sessionmaker(engine, class_=AppSession)
    try:
        with make_session() as session:
            kept = ship.enqueue("kept", connection=session)
            session.commit()
        with AppSession(engine) as session:  # the class itself, not sessionmaker's subclass
            ship.enqueue("gone", connection=session)
            session.rollback()
            also = ship.enqueue("also", connection=session)
            session.commit()
        assert sorted(j.id for j in app.list_jobs()) == [kept.id, also.id]
    finally:
        app.close()


def test_session_without_orm_work_and_enqueue_many(db_url: str, engine: Engine) -> None:
    """The enqueue is the session's first statement: it still begins the transaction
    that ``commit()`` commits (else commit would find nothing to do)."""
    app, ship = make_app(db_url)
    try:
        # open the app's storage first: on SQLite, opening writes, and would wait for the
        # session's write transaction (SQLite has one writer)
        assert app.count_jobs()["available"] == 0
        with Session(engine) as session:
            jobs = app.enqueue_many([ship.job("a"), ship.job("b")], connection=session)
            assert app.count_jobs()["available"] == 0  # not visible before commit
            session.commit()
        assert sorted(j.id for j in app.list_jobs()) == sorted(j.id for j in jobs)
        with Session(engine) as session:
            app.enqueue_many([ship.job("c")], connection=session)
        # closed without commit: rolled back
        assert app.count_jobs()["available"] == 2
    finally:
        app.close()


def test_connection_in_engine_begin(db_url: str, engine: Engine) -> None:
    app, ship = make_app(db_url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(Order).values(item="kept"))
            kept = ship.enqueue("kept", connection=conn)
        with pytest.raises(RuntimeError, match="boom"), engine.begin() as conn:
            ship.enqueue("gone", connection=conn)
            raise RuntimeError("boom")
        with engine.connect() as conn:  # commit as you go
            later = ship.options(connection=conn).enqueue("later")
            conn.commit()
        assert sorted(j.id for j in app.list_jobs()) == sorted([kept.id, later.id])
    finally:
        app.close()


def test_savepoint_rollback_leaves_no_job(db_url: str, engine: Engine) -> None:
    app, ship = make_app(db_url)
    try:
        with Session(engine) as session:
            session.add(Order(item="outer"))
            session.flush()
            outer = ship.enqueue("outer", connection=session)
            nested = session.begin_nested()
            session.add(Order(item="inner"))
            ship.enqueue("inner", connection=session)
            nested.rollback()
            session.commit()
        assert orders(engine) == ["outer"]
        assert [j.id for j in app.list_jobs()] == [outer.id]
    finally:
        app.close()


def test_async_session_commit_and_rollback(db_url: str, engine: Engine) -> None:
    async def body(app: Conveyor, ship: Any, aengine: AsyncEngine) -> None:
        async with AsyncSession(aengine) as session:
            session.add(Order(item="kept"))
            kept = await ship.enqueue_async("kept", connection=session)
            await session.commit()
        async with AsyncSession(aengine) as session:
            session.add(Order(item="gone"))
            await ship.enqueue_async("gone", connection=session)
            await session.rollback()
        async with AsyncSession(aengine) as session, session.begin():
            await app.enqueue_many_async([ship.job("outer")], connection=session)
            nested = await session.begin_nested()
            await ship.enqueue_async("inner", connection=session)
            await nested.rollback()  # the savepoint only
        jobs = await app.list_jobs_async()
        assert sorted(j.args[0] for j in jobs) == ["kept", "outer"]
        assert kept.id in {j.id for j in jobs}

    run_async(db_url, body)
    assert orders(engine) == ["kept"]


def test_async_connection_commit_and_rollback(db_url: str, engine: Engine) -> None:
    async def body(app: Conveyor, ship: Any, aengine: AsyncEngine) -> None:
        async with aengine.begin() as conn:
            kept = await ship.enqueue_async("kept", connection=conn)
        with pytest.raises(RuntimeError, match="boom"):
            async with aengine.begin() as conn:
                await ship.enqueue_async("gone", connection=conn)
                raise RuntimeError("boom")
        async with aengine.connect() as conn:  # commit as you go
            later = await ship.enqueue_async("later", connection=conn)
            await conn.commit()
        assert sorted(j.id for j in await app.list_jobs_async()) == sorted([kept.id, later.id])

    run_async(db_url, body)


def test_notify_is_sent_at_commit_not_before(db_url: str, engine: Engine) -> None:
    """PostgreSQL: the enqueue's NOTIFY is held by the server until the ORM commits, and
    a rolled-back enqueue sends none."""
    if not db_url.startswith("postgres"):
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    app, ship = make_app(db_url)
    try:
        with psycopg.connect(db_url, autocommit=True) as listener:
            listener.execute("LISTEN conveyor_jobs")
            with Session(engine) as session:
                ship.enqueue("x", connection=session)
                assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
                session.rollback()
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            with Session(engine) as session:
                ship.enqueue("x", connection=session)
                session.commit()
            got = list(listener.notifies(timeout=5, stop_after=1))
            assert [(n.channel, n.payload) for n in got] == [("conveyor_jobs", "default")]
    finally:
        app.close()


def test_commit_wakes_a_listening_worker(db_url: str, engine: Engine) -> None:
    """The worker waits on its wake-up (LISTEN on PostgreSQL, the data version on SQLite):
    each job committed through a Session starts well within the idle poll (1 s on
    PostgreSQL) and the stager's pass (set to a minute here), four times in a row."""
    config = WorkerConfig(queues={"default": 2}, stage_interval=60.0, shutdown_timeout=5.0,
                          heartbeat_interval=FAST.heartbeat_interval, lease_ttl=FAST.lease_ttl)
    latencies: list[float] = []

    async def body(app: Conveyor, ship: Any, _: AsyncEngine) -> None:
        started: dict[int, float] = {}

        def on_change(change: StateChange) -> None:
            if change.state is JobState.RUNNING:
                started.setdefault(change.job_id, time.monotonic())

        app.on_state_change(on_change)

        async def enqueue_one_by_one(worker: Worker) -> None:
            producer = worker.producers["default"]

            async def idle() -> bool:  # its last fetch found nothing: it waits for a wake
                return producer.idle

            for n in range(4):
                await wait_for_async(idle, timeout=10, message="the worker to idle")
                with Session(engine) as session:
                    job = ship.enqueue(f"woken {n}", connection=session)
                    session.commit()
                at = time.monotonic()
                while job.id not in started and time.monotonic() - at < 5:
                    await asyncio.sleep(0.005)
                latencies.append(started.get(job.id, at + 5) - at)

        await run_worker_until(app, all_final(app), config, timeout=30, during=enqueue_one_by_one)

    run_async(db_url, body)
    assert max(latencies) < 0.5, latencies


def test_unsupported_objects_are_clear_type_errors(db_url: str, engine: Engine,
                                                   tmp_path: Any) -> None:
    app, ship = make_app(db_url)
    other = "postgresql+psycopg://x@127.0.0.1/none" if db_url.startswith("sqlite") else \
        f"sqlite:///{tmp_path / 'other.db'}"
    try:
        async_engine = create_async_engine(sa_url(db_url, asynchronous=True))
        with pytest.raises(TypeError, match="await enqueue_async"):
            ship.enqueue("x", connection=AsyncSession(async_engine))
        with pytest.raises(TypeError, match="does not take a Engine"):
            ship.enqueue("x", connection=engine)
        with pytest.raises(TypeError, match="this app's database is"):
            ship.enqueue("x", connection=Session(create_engine(other)))
        # a MySQL engine (a stand-in DBAPI module: no connection is ever attempted)
        dbapi = types.SimpleNamespace(paramstyle="pyformat", version_info=(1, 1, 0))
        mysql = create_engine("mysql+pymysql://u@127.0.0.1/db", module=dbapi)
        with pytest.raises(TypeError, match=r"mysql\+pymysql"), Session(mysql) as session:
            ship.enqueue("x", connection=session)
        with pytest.raises(TypeError, match="does not take a scoped_session"):
            ship.enqueue("x", connection=scoped_session(sessionmaker(engine)))
        with pytest.raises(TypeError, match="does not take a sessionmaker"):
            ship.enqueue("x", connection=sessionmaker(engine))
        with pytest.raises(TypeError):
            ship.enqueue("x", connection="not a connection")
        assert app.count_jobs()["available"] == 0
    finally:
        app.close()


def test_bad_input_is_an_error_and_stores_nothing(db_url: str, engine: Engine) -> None:
    app, ship = make_app(db_url)
    try:
        with Session(engine) as session:
            session.add(Order(item="kept"))
            with pytest.raises(ValueError, match="queue"):
                ship.options(queue="bad queue!", connection=session).enqueue("x")
            with pytest.raises(TypeError):
                app.enqueue_many(["not a job"], connection=session)  # type: ignore[list-item]
            session.commit()  # the session is still usable
        assert orders(engine) == ["kept"]
        assert app.count_jobs()["available"] == 0
    finally:
        app.close()


def test_a_raw_aiosqlite_connection(db_url: str, engine: Engine) -> None:
    """aiosqlite keeps its sqlite3 connection on its own thread; the insert runs there."""
    if not db_url.startswith("sqlite"):
        pytest.skip("aiosqlite is SQLite's")

    async def body(app: Conveyor, ship: Any, _: AsyncEngine) -> None:
        async with aiosqlite.connect(db_url.removeprefix("sqlite:///")) as db:
            kept = await ship.enqueue_async("kept", connection=db)
            await db.commit()
            await ship.enqueue_async("gone", connection=db)
            await db.rollback()
        assert [j.id for j in await app.list_jobs_async()] == [kept.id]

    run_async(db_url, body)


def test_a_connection_the_server_dropped_is_a_clear_error(db_url: str, engine: Engine) -> None:
    """PostgreSQL: the session's server process is gone; the enqueue says the database
    is unavailable (the app's own error), and nothing is stored."""
    if not db_url.startswith("postgres"):
        pytest.skip("a server process to terminate is PostgreSQL's")
    app, ship = make_app(db_url)
    try:
        with Session(engine) as session:
            pid = session.execute(select(func.pg_backend_pid())).scalar_one()
            with psycopg.connect(db_url, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            with pytest.raises(DatabaseUnavailableError, match="cannot use PostgreSQL"):
                ship.enqueue("lost", connection=session)
            session.invalidate()  # as after any statement that met a dead connection
        assert app.count_jobs()["available"] == 0
    finally:
        app.close()
