"""Rich task arguments (tagged JSON, read back as the handler's annotations), the
pluggable types, and arguments encrypted at rest: on both backends, with real workers
(in-process, and `conveyor worker` processes for encryption from the environment)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NewType
from uuid import UUID, uuid4

import psycopg
import pydantic
import pytest
from cryptography.fernet import Fernet

from conveyor import Conveyor, Job, JobState
from conveyor._payload_crypt import ENV, EncryptionError, fingerprint

from ._runtime_util import all_final, in_state, run_worker_until
from .conftest import WaitFor

if TYPE_CHECKING:  # a name the handler's annotations cannot resolve at run time
    from decimal import Context as OnlyForTypeCheckers

ROOT = Path(__file__).resolve().parent.parent
SECRET = "4111-1111-1111-1111"


OrderId = NewType("OrderId", UUID)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Size(enum.IntEnum):
    S = 1
    L = 3


@dataclasses.dataclass
class Point:
    x: Decimal
    at: datetime
    color: Color
    tags: set[str] = dataclasses.field(default_factory=set)


class Address(pydantic.BaseModel):
    city: str
    since: date
    id: UUID


@dataclasses.dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


def stored(url: str, job_id: int) -> str:
    """The job's args and kwargs as the database holds them (read around the API)."""
    query = "SELECT args, kwargs FROM conveyor_jobs_all WHERE id = "
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            row = conn.execute(query + "?", (job_id,)).fetchone()
    else:
        with psycopg.connect(url) as conn:
            row = conn.execute(query.replace("args, kwargs", "args::text, kwargs::text") + "%s",
                               (job_id,)).fetchone()
    assert row is not None
    return f"{row[0]} {row[1]}"


def write_args(url: str, job_id: int, text: str) -> None:
    """Change a job's stored args around the API (as someone with database access could)."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute("UPDATE conveyor_jobs SET args = ? WHERE id = ?", (text, job_id))
        return
    with psycopg.connect(url) as pg:
        pg.execute("UPDATE conveyor_jobs SET args = %s::jsonb WHERE id = %s", (text, job_id))


def run_all(app: Conveyor) -> None:
    async def main() -> None:
        await run_worker_until(app, all_final(app))
        await app.close_async()
    asyncio.run(main())


def run_until(app: Conveyor, job: Job, *states: JobState) -> Job:
    async def main() -> None:
        await run_worker_until(app, in_state(app, job, *states))
        await app.close_async()
    asyncio.run(main())
    done = app.get_job(job.id)
    assert done is not None
    return done


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Two fresh Fernet keys; CONVEYOR_ENCRYPTION_KEYS set to the first."""
    made = [Fernet.generate_key().decode() for _ in range(2)]
    monkeypatch.setenv(ENV, made[0])
    yield made


# -- rich types -----------------------------------------------------------------------------


def test_rich_arguments_reach_the_handler_as_the_annotated_types(app: Conveyor, db_url: str) -> None:
    got: dict[str, Any] = {}

    @app.task
    def handler(when: datetime, naive: datetime, day: date, clock: time, wait: timedelta,
                ident: UUID, price: Decimal, color: Color, size: Size, point: Point,
                address: Address, ids: list[UUID], prices: dict[str, Decimal],
                by_number: dict[int, Color], maybe: UUID | None, pair: tuple[int, Color],
                blob: bytes, members: frozenset[str], either: int | Point,
                untyped: Any = None) -> dict[str, Any]:
        got.update(locals())
        return {"price": str(price), "ids": [str(i) for i in ids]}

    ident, paris = uuid4(), timezone(timedelta(hours=1))
    values: dict[str, Any] = dict(
        when=datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=paris),
        naive=datetime(2026, 3, 1, 9, 30), day=date(2026, 2, 28), clock=time(23, 59, 1),
        wait=timedelta(days=2, microseconds=7), ident=ident, price=Decimal("19.990"),
        color=Color.BLUE, size=Size.L,
        point=Point(Decimal("-0.5"), datetime(2026, 1, 1, tzinfo=UTC), Color.RED, {"b", "a"}),
        address=Address(city="Lyon", since=date(2020, 5, 4), id=ident),
        ids=[ident, uuid4()], prices={"a": Decimal("1E+3")}, by_number={7: Color.RED},
        maybe=None, pair=(1, Color.BLUE), blob=b"\x00\xff bytes", members=frozenset({"x"}),
        either=Point(Decimal(1), datetime(2026, 1, 1), Color.RED),
        untyped={"when": datetime(2026, 1, 2, tzinfo=UTC), "ids": {ident}},
    )
    job = handler.enqueue(**values)
    # Stored as tagged JSON, readable without Python: no pickle anywhere.
    text = stored(db_url, job.id)
    assert f'"v": "{ident}"' in text.replace('":"', '": "') or f'"v":"{ident}"' in text
    assert '"__conveyor__"' in text and "Lyon" in text
    assert job.kwargs["ident"] == {"__conveyor__": "uuid", "v": str(ident)}
    assert job.kwargs["when"] == {"__conveyor__": "datetime", "v": "2026-03-01T09:30:00.123456+01:00"}
    assert job.kwargs["color"] == "blue" and job.kwargs["size"] == 3  # enums: their value

    done = run_until(app, job, JobState.COMPLETED, JobState.DISCARDED, JobState.RETRYABLE)
    assert done.state == JobState.COMPLETED, done.errors
    assert done.result == {"price": "19.990", "ids": [str(i) for i in values["ids"]]}
    for name, value in values.items():
        if name == "untyped":
            continue
        assert got[name] == value, name
        assert type(got[name]) is type(value), (name, type(got[name]))
    assert got["when"].utcoffset() == timedelta(hours=1) and got["naive"].tzinfo is None
    assert type(got["point"].x) is Decimal and got["point"].tags == {"a", "b"}
    assert type(got["by_number"]) is dict and list(got["by_number"]) == [7]
    # No annotation: the tags still give back the value's own type (sets included).
    assert got["untyped"] == {"when": datetime(2026, 1, 2, tzinfo=UTC), "ids": {ident}}


def test_plain_json_is_stored_as_before_and_converted_by_annotation(app: Conveyor) -> None:
    got: dict[str, Any] = {}

    @app.task
    def handler(ident: UUID, when: datetime, color: Color, n: int, opts: dict[str, Any],
                order: OrderId | None = None,
                hidden: OnlyForTypeCheckers | None = None) -> None:  # unresolvable: as stored
        got.update(locals())

    ident = uuid4()
    # What another language (or `conveyor enqueue --args`) sends: plain JSON text.
    job = handler.enqueue(str(ident), "2026-01-01T00:00:00+00:00", "red", 3,  # type: ignore[arg-type]
                          opts={"a": [1, 2]}, order=str(ident))  # type: ignore[arg-type]
    assert job.args == [str(ident), "2026-01-01T00:00:00+00:00", "red", 3]
    assert job.kwargs == {"opts": {"a": [1, 2]}, "order": str(ident)}
    assert run_until(app, job, JobState.COMPLETED, JobState.DISCARDED).state == JobState.COMPLETED
    assert got["ident"] == ident and got["when"] == datetime(2026, 1, 1, tzinfo=UTC)
    assert got["color"] is Color.RED and got["n"] == 3 and got["opts"] == {"a": [1, 2]}
    assert got["hidden"] is None and got["order"] == ident and type(got["order"]) is UUID


def test_user_dicts_that_use_the_tag_key_round_trip(app: Conveyor) -> None:
    got: list[Any] = []

    @app.task
    def handler(plain: dict[str, Any], rich: Any, nested: list[Any]) -> None:
        got.append([plain, rich, nested])

    plain = {"__conveyor__": "uuid", "v": "not a uuid"}
    rich = {"__conveyor__": "encrypted", "v": uuid4(), "inner": {"__conveyor__": "dict"}}
    nested = [{"__conveyor__": None}, {"__conveyor__": "set", "v": [1]}]
    job = handler.enqueue(plain, rich, nested)  # with a UUID: the tagging path
    only_json = handler.enqueue(plain, "x", nested)  # plain JSON: the C encoder's path
    for stored_job in (job, only_json):
        assert stored_job.args[0] == {"__conveyor__": "dict", "v": plain}
    run_all(app)
    assert app.count_jobs()["completed"] == 2
    assert len(got) == 2 and [plain, rich, nested] in got and [plain, "x", nested] in got


def test_an_unstorable_argument_is_named_and_nothing_is_inserted(app: Conveyor) -> None:
    @app.task
    def handler(path: str, options: dict[str, Any] | None = None) -> None: ...

    with pytest.raises(TypeError, match=r"argument 'options' of task 'handler' .*type _thread\.lock "
                       r"at \['inner'\]\[1\] .*register_type"):
        handler.enqueue("/p", options={"inner": [1, __import__("threading").Lock()]})
    with pytest.raises(TypeError, match=r"argument 'path' \(#0\) .*: type object is neither"):
        handler.enqueue(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"argument 'path' \(#0\).*not JSON-serialisable"):
        handler.enqueue(float("inf"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"\(a key\)"):
        handler.enqueue("/p", options={object(): 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="argument 'options'"):
        app.enqueue_many([handler.job("/ok"), handler.job("/p", options={"x": object()})])
    assert sum(app.count_jobs().values()) == 0


def test_a_value_that_cannot_become_its_annotation_discards_the_job(app: Conveyor) -> None:
    @app.task
    def handler(ident: UUID) -> None:
        raise AssertionError("must not run")

    job = handler.enqueue("not-a-uuid")  # type: ignore[arg-type]
    done = run_until(app, job, JobState.DISCARDED, JobState.COMPLETED, JobState.RETRYABLE)
    assert done.state == JobState.DISCARDED and done.attempt == 1
    assert "argument 'ident' (#0) of task 'handler' cannot be made a UUID" in done.errors[-1]["error"]


# -- registered types ------------------------------------------------------------------------


def _register_money(app: Conveyor) -> None:
    app.register_type(Money, lambda m: [str(m.amount), m.currency],
                      lambda v: Money(Decimal(v[0]), v[1]), tag="money")


def test_a_registered_type_round_trips_with_or_without_an_annotation(app: Conveyor) -> None:
    _register_money(app)
    got: list[Any] = []

    @app.task
    def handler(price: Money, others: list[Money], untyped: Any) -> None:
        got.extend([price, others, untyped])

    price = Money(Decimal("9.99"), "EUR")
    job = handler.enqueue(price, [price], untyped={"p": price})
    assert job.args[0] == {"__conveyor__": "money", "v": ["9.99", "EUR"]}
    assert run_until(app, job, JobState.COMPLETED, JobState.DISCARDED).state == JobState.COMPLETED
    assert got == [price, [price], {"p": price}]
    with pytest.raises(ValueError, match="already registered"):
        _register_money(app)
    with pytest.raises(ValueError, match="built in"):
        app.register_type(Point, str, str, tag="uuid")
    with pytest.raises(ValueError, match="invalid type tag"):
        app.register_type(Point, str, str, tag="Bad Tag")
    with pytest.raises(TypeError, match="takes a class"):
        app.register_type(price, str, str)  # type: ignore[arg-type]


def test_a_worker_that_lacks_a_registered_type_retries_the_job(db_url: str) -> None:
    producer, worker = Conveyor(db_url), Conveyor(db_url)
    _register_money(producer)
    for app in (producer, worker):
        @app.task(max_attempts=3, backoff=3600)
        def handler(price: Money) -> None: ...
    try:
        job = producer.tasks["handler"].enqueue(Money(Decimal(1), "EUR"))
        done = run_until(worker, job, JobState.RETRYABLE, JobState.DISCARDED, JobState.COMPLETED)
        assert done.state == JobState.RETRYABLE  # another worker may know it: not discarded
        assert "unknown type tag 'money'" in done.errors[-1]["error"]
        assert "register_type" in done.errors[-1]["error"]
    finally:
        producer.close()
        worker.close()


# -- encryption at rest ----------------------------------------------------------------------


def test_encrypted_arguments_are_sealed_at_rest_and_plain_in_the_handler(
        app: Conveyor, db_url: str, keys: list[str]) -> None:
    got: dict[str, Any] = {}

    @app.task(encrypt=True)
    def pay(card: str, amount: Decimal, when: datetime, *, memo: dict[str, Any]) -> str:
        got.update(card=card, amount=amount, when=when, memo=memo)
        return "paid"

    when = datetime(2026, 5, 1, tzinfo=UTC)
    job = pay.enqueue(SECRET, Decimal("12.50"), when, memo={"__conveyor__": "x", "n": 1})
    text = stored(db_url, job.id)
    assert SECRET not in text and "12.50" not in text and "memo" not in text
    key_id = fingerprint(keys[0].encode())
    assert job.args == [{"__conveyor__": "encrypted", "key": key_id, "v": job.args[0]["v"]}]
    assert job.kwargs == {}
    assert SECRET not in str(app.get_job(job.id)) and SECRET not in str(app.explain_job(job.id))
    assert app.explain_job(job.id).job.args[0]["__conveyor__"] == "encrypted"

    done = run_until(app, job, JobState.COMPLETED, JobState.DISCARDED, JobState.RETRYABLE)
    assert done.state == JobState.COMPLETED and done.result == "paid", done.errors
    assert got == {"card": SECRET, "amount": Decimal("12.50"), "when": when,
                   "memo": {"__conveyor__": "x", "n": 1}}


def test_turning_encrypt_on_or_off_keeps_queued_jobs_runnable(db_url: str, keys: list[str]) -> None:
    before, after, ran = Conveyor(db_url), Conveyor(db_url), list[str]()

    def pay(card: str) -> None:
        ran.append(card)

    sealed_task = before.task(encrypt=True)(pay)
    plain_task = after.task(pay)
    try:
        sealed_task.enqueue("sealed")  # queued by the old code, run by the new one
        plain = plain_task.enqueue("plain")
        assert plain.args == ["plain"]
        run_all(after)
        after.tasks.clear()
        after.task(encrypt=True)(pay)  # and the other way round
        plain_task.enqueue("plain again")
        run_all(after)
        assert sorted(ran) == ["plain", "plain again", "sealed"]
    finally:
        before.close()
        after.close()


def test_a_task_without_encrypt_stores_plaintext(app: Conveyor, db_url: str, keys: list[str]) -> None:
    @app.task
    def pay(card: str) -> None: ...

    job = pay.enqueue(SECRET)
    assert SECRET in stored(db_url, job.id) and job.args == [SECRET]


def test_key_rotation_old_jobs_still_run_and_a_lost_key_is_a_clear_error(
        app: Conveyor, keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = keys
    ran: list[str] = []

    @app.task(encrypt=True, max_attempts=1)
    def pay(card: str) -> None:
        ran.append(card)

    sealed_old = pay.enqueue("old")
    monkeypatch.setenv(ENV, f" {new} , {old} ")  # the new key first; the old one still decrypts
    sealed_new = pay.enqueue("new")
    assert sealed_new.args[0]["key"] == fingerprint(new.encode()) != sealed_old.args[0]["key"]
    run_all(app)
    assert sorted(ran) == ["new", "old"]

    gone = pay.enqueue("gone")  # sealed with `new`, which is then removed
    monkeypatch.setenv(ENV, old)
    done = run_until(app, gone, JobState.DISCARDED, JobState.COMPLETED, JobState.RETRYABLE)
    error = done.errors[-1]["error"]
    assert done.state == JobState.DISCARDED and "gone" not in ran
    assert f"encrypted with key {fingerprint(new.encode())}, which is not among" in error
    assert fingerprint(old.encode()) in error and new not in error and old not in error
    # Put the key back and retry: nothing was lost.
    monkeypatch.setenv(ENV, f"{old},{new}")
    app.retry_job(gone.id)
    assert run_until(app, gone, JobState.COMPLETED, JobState.DISCARDED).state == JobState.COMPLETED
    assert "gone" in ran


def test_a_token_moved_to_another_task_or_damaged_is_discarded(
        app: Conveyor, db_url: str, keys: list[str]) -> None:
    @app.task(encrypt=True)
    def one(card: str) -> None: ...

    @app.task(encrypt=True)
    def two(card: str) -> None:
        raise AssertionError("must not run")

    source, moved, damaged = one.enqueue(SECRET), two.enqueue("x"), two.enqueue("y")
    marker = dict(source.args[0])
    bad = {**moved.args[0], "v": moved.args[0]["v"][:-8] + "AAAAAAA="}
    for job, value in ((moved, marker), (damaged, bad)):
        write_args(db_url, job.id, json.dumps([value]))
    run_all(app)
    assert "belong to another task ('one')" in _last_error(app, moved)
    assert "do not verify" in _last_error(app, damaged)


def _last_error(app: Conveyor, job: Job) -> str:
    done = app.get_job(job.id)
    assert done is not None and done.state == JobState.DISCARDED
    return str(done.errors[-1]["error"])


def test_encryption_needs_its_key_and_refuses_a_bad_one(
        app: Conveyor, monkeypatch: pytest.MonkeyPatch) -> None:
    @app.task(encrypt=True)
    def pay(card: str) -> None: ...

    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(EncryptionError, match=f"{ENV} is not set"):
        pay.enqueue(SECRET)
    monkeypatch.setenv(ENV, f"{Fernet.generate_key().decode()},not-a-key-{SECRET}")
    with pytest.raises(EncryptionError, match="key #2 is not a Fernet key") as info:
        pay.enqueue(SECRET)
    assert SECRET not in str(info.value)
    with pytest.raises(TypeError, match="encrypt= takes True or False"):
        app.task(name="x", encrypt="yes")(lambda: None)  # type: ignore[call-overload]
    assert sum(app.count_jobs().values()) == 0


def test_a_worker_without_the_key_retries_instead_of_losing_the_job(
        app: Conveyor, keys: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    @app.task(encrypt=True, max_attempts=5, backoff=3600)
    def pay(card: str) -> None: ...

    job = pay.enqueue(SECRET)
    monkeypatch.delenv(ENV)
    done = run_until(app, job, JobState.RETRYABLE, JobState.DISCARDED, JobState.COMPLETED)
    assert done.state == JobState.RETRYABLE and f"{ENV} is not set" in done.errors[-1]["error"]


def test_unique_encrypted_jobs_merge_without_a_guessable_key(app: Conveyor, keys: list[str]) -> None:
    import hashlib

    from conveyor import Unique

    @app.task(encrypt=True, unique=Unique())
    def pay(card: str) -> None: ...

    first, second = pay.enqueue(SECRET), pay.enqueue(SECRET)
    assert first.id == second.id and pay.enqueue("other").id != first.id
    plain_hash = hashlib.sha256(f'["{SECRET}"]|{{}}'.encode()).hexdigest()[:32]
    assert first.unique_key is not None and plain_hash not in first.unique_key


def test_encrypt_without_the_extra_is_a_clear_error_and_import_still_works(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['cryptography'] = None\n"  # as if the extra were absent
        "import conveyor\n"
        f"app = conveyor.Conveyor('sqlite:///{tmp_path}/x.db')\n"
        "app.task(name='plain')(lambda: None)\n"
        "try:\n    app.task(name='sealed', encrypt=True)(lambda: None)\n"
        "except conveyor.ConveyorError as exc:\n    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=60, check=True)
    assert "encrypt=True needs the cryptography package: pip install 'conveyor[encryption]'" in out.stdout


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_the_dashboard_shows_encrypted_arguments_as_encrypted(
        app: Conveyor, keys: list[str]) -> None:
    from starlette.testclient import TestClient

    from conveyor.web import create_app

    @app.task(encrypt=True)
    def pay(card: str) -> None: ...

    job = pay.enqueue(SECRET)
    key_id, token = fingerprint(keys[0].encode()), job.args[0]["v"]
    with TestClient(create_app(app), base_url="http://localhost") as client:
        listing, page = client.get("/jobs").text, client.get(f"/jobs/{job.id}").text
        found = client.get(f"/jobs?q={key_id}").text  # an operator finds a key's jobs
        other = client.get("/jobs?q=000000000000").text
    assert f"🔒 encrypted (key {key_id})" in listing
    assert f"Encrypted at rest with key <code>{key_id}</code>" in page
    for html in (listing, page, found):
        assert SECRET not in html and token not in html
    assert f"/jobs/{job.id}" in found and f"/jobs/{job.id}" not in other


def test_real_worker_processes_decrypt_with_the_key_from_their_environment(
        db_url: str, tmp_path: Path, keys: list[str], wait_for: WaitFor) -> None:
    from conveyor.cli._loading import retarget

    from .apps import arguments as module

    app = retarget(module.app, db_url)
    customer, at = uuid4(), datetime(2026, 6, 1, 12, tzinfo=UTC)
    line = module.Line(uuid4(), module.Money(Decimal("3.5"), "EUR"), module.Tier.GOLD)
    job = app.tasks["charge"].enqueue(customer, [line], date(2026, 7, 1), at,
                                      module.Money(Decimal("3.5"), "EUR"))
    env = {**os.environ, "CONVEYOR_URL": db_url, ENV: f"{keys[1]},{keys[0]}",
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "conveyor", "worker",
                                 "tests.apps.arguments:app", "--log-level", "warning"],
                                env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    def finished() -> Job | None:
        current = app.get_job(job.id)
        return current if current is not None and current.finished_at is not None else None

    try:
        done = wait_for(finished, timeout=60, interval=0.1,
                        message="the worker process never finished the job")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        app.close()
    assert done is not None
    assert done.state == JobState.COMPLETED, (done.errors, log.read_text())
    # The CLI shows the sealed marker, never the plaintext (it never decrypts).
    shown = subprocess.run([sys.executable, "-m", "conveyor", "jobs", "show", str(job.id),
                            "--app", "tests.apps.arguments:app"], env={**env, "COLUMNS": "300"},
                           cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    args_shown = shown.split("kwargs")[0]  # the result is plaintext: handlers choose what it holds
    assert '"__conveyor__": "encrypted"' in args_shown and str(customer) not in args_shown, shown
    assert done.result["customer"] == ["UUID", repr(customer)]
    assert done.result["lines"] == ["list", repr([line])]
    assert done.result["total"] == ["Money", repr(module.Money(Decimal("3.5"), "EUR"))]
    assert done.result["at"] == ["datetime", repr(at)] and done.result["note"] == ["NoneType", "None"]


class Sku(str):
    """A str subclass: plain JSON would store it as text and lose the type."""


def test_a_registered_subclass_of_a_json_type_keeps_its_type(app: Conveyor) -> None:
    app.register_type(Sku, str, Sku, tag="sku")
    got: list[Any] = []

    @app.task
    def handler(anything: Any) -> None:
        got.append(anything)

    job = handler.enqueue(Sku("A-1"))
    assert job.args == [{"__conveyor__": "sku", "v": "A-1"}]
    assert run_until(app, job, JobState.COMPLETED, JobState.DISCARDED).state == JobState.COMPLETED
    assert got == ["A-1"] and type(got[0]) is Sku


def test_a_registered_type_wins_over_the_built_in_rule(app: Conveyor) -> None:
    app.register_type(UUID, lambda u: u.hex, lambda v: UUID(hex=v), tag="uuid-hex")
    with pytest.raises(ValueError, match="plain JSON"):
        app.register_type(dict, str, str, tag="mydict")
    got: list[Any] = []

    @app.task
    def handler(ident: UUID, anything: Any) -> None:
        got.extend([ident, anything])

    ident = uuid4()
    job = handler.enqueue(ident, [ident])
    tagged = {"__conveyor__": "uuid-hex", "v": ident.hex}
    assert job.args == [tagged, [tagged]]
    assert run_until(app, job, JobState.COMPLETED, JobState.DISCARDED).state == JobState.COMPLETED
    assert got == [ident, [ident]]


def test_the_payload_cap_applies_to_the_sealed_form_too(db_url: str, keys: list[str]) -> None:
    from conveyor import ConveyorConfig, PayloadTooLargeError

    app = Conveyor(db_url, config=ConveyorConfig(max_payload_bytes=800))

    @app.task(encrypt=True)
    def pay(note: str) -> None: ...

    try:
        with pytest.raises(PayloadTooLargeError, match="encrypted arguments of task 'pay' are"):
            pay.enqueue("x" * 600)  # 606 bytes of JSON, about 1,000 once sealed
        with pytest.raises(PayloadTooLargeError, match="over the cap of 800 bytes"):
            pay.enqueue("x" * 900)  # refused before sealing
        assert pay.enqueue("x" * 100).args[0]["__conveyor__"] == "encrypted"
        assert sum(app.count_jobs().values()) == 1
    finally:
        app.close()
