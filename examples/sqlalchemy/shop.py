"""Orders and their jobs in one SQLAlchemy transaction: commit, both exist; roll back,
neither does.

    pip install 'conveyor[sqlalchemy]' aiosqlite      # aiosqlite: the async part on SQLite
    python shop.py                                     # SQLite, in shop.db
    CONVEYOR_URL=postgresql://user@localhost/app python shop.py

Places four orders (sync Session and AsyncSession, one commit and one rollback each),
then runs a burst worker that ships what was committed. See README.md.
"""

from __future__ import annotations

import asyncio
import os

from sqlalchemy import create_engine, func, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from conveyor import Conveyor, WorkerConfig

# One database for the orders and the jobs (the enqueue must see the app's tables).
URL = os.environ.get("CONVEYOR_URL") or "sqlite:///shop.db"
queue = Conveyor(URL)


def sqlalchemy_url(url: str, *, asynchronous: bool = False) -> str:
    """The same database as Conveyor's URL, with a driver Conveyor can join: psycopg 3
    on PostgreSQL (sync and async), pysqlite or aiosqlite on SQLite."""
    scheme, rest = url.split("://", 1)
    if scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return f"sqlite+aiosqlite://{rest}" if asynchronous else url


engine = create_engine(sqlalchemy_url(URL))
async_engine = create_async_engine(sqlalchemy_url(URL, asynchronous=True))


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "shop_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    shipped: Mapped[bool] = mapped_column(default=False)


class OutOfStock(Exception):
    pass


@queue.task
def ship(order_id: int) -> str:
    with Session(engine) as session, session.begin():
        order = session.get(Order, order_id)
        if order is None:  # cannot happen: the job commits with its order or not at all
            raise LookupError(f"no order {order_id}")
        order.shipped = True
        return f"shipped order {order_id} ({order.item})"


def place_order(item: str) -> int:
    """Store the order and enqueue its shipping, in one transaction."""
    with Session(engine) as session:
        order = Order(item=item)
        session.add(order)
        session.flush()  # the order's id, for the job
        ship.options(connection=session).enqueue(order.id)  # in the session's transaction
        if item == "unobtainium":
            raise OutOfStock(item)  # leaving the block without commit rolls both back
        session.commit()
        return order.id


async def place_order_async(item: str) -> int:
    """The same with an AsyncSession (an async web handler, say)."""
    async with AsyncSession(async_engine) as session, session.begin():
        order = Order(item=item)
        session.add(order)
        await session.flush()
        await ship.options(connection=session).enqueue_async(order.id)
        if item == "unobtainium":
            raise OutOfStock(item)  # session.begin() rolls back on the way out
        return order.id  # committed by session.begin() on the way out


async def place_async_orders() -> None:
    print("async order", await place_order_async("pen"), "committed")
    try:
        await place_order_async("unobtainium")
    except OutOfStock:
        print("async order rolled back: no order, no job")
    await async_engine.dispose()
    await queue.close_async()  # this loop's connections to Conveyor's database


async def ship_everything() -> None:
    try:  # a burst worker runs every job there is, then returns
        await queue.run_worker(config=WorkerConfig(burst=True))
    finally:
        await queue.close_async()


def main() -> None:
    queue.migrate()  # Conveyor's tables (`conveyor migrate` does the same)
    Base.metadata.create_all(engine)  # yours

    print("order", place_order("book"), "committed")
    try:
        place_order("unobtainium")
    except OutOfStock:
        print("order rolled back: no order, no job")
    asyncio.run(place_async_orders())

    print("jobs waiting:", queue.count_jobs()["available"])
    asyncio.run(ship_everything())
    with Session(engine) as session:
        for order in session.scalars(select(Order).order_by(Order.id)):
            print(f"order {order.id}: {order.item}, shipped={order.shipped}")
        print("orders stored:", session.scalar(select(func.count()).select_from(Order)))
    for job in reversed(queue.list_jobs(task="ship")):
        print(f"job {job.id}: {job.state.value}, {job.result}")
    queue.close()


if __name__ == "__main__":
    main()
