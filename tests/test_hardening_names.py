"""Issue 28, defect 6: a name ending in a newline is refused everywhere (the checks
ended in ``$``, which matches before a trailing newline): queue, task, schedule, tag,
type tag and label names, through the Python API and the CLI. Both backends."""

from __future__ import annotations

import asyncio

import pytest

from conveyor import Conveyor, RateLimit, WorkerConfig
from conveyor._config import check_labels
from conveyor._limits import parse_rate
from conveyor._storage import WakeHub
from conveyor._storage.postgres import PostgresConfig, PostgresStorage

from .test_cli import invoke

NEWLINE_NAMES = ("mail\n", "mail\r\n", "\nmail", "ma\nil")


def _stored(app: Conveyor) -> int:
    return sum(app.count_jobs().values())


@pytest.mark.parametrize("name", NEWLINE_NAMES)
def test_the_python_api_refuses_names_with_a_newline(app: Conveyor, name: str) -> None:
    noop = app.task(name="noop")(lambda *a: None)
    with pytest.raises(ValueError, match="invalid task name"):
        app.task(name=name)(lambda: None)
    with pytest.raises(ValueError, match="invalid queue name"):
        app.task(name="other", queue=name)(lambda: None)
    with pytest.raises(ValueError, match="invalid queue name"):
        noop.options(queue=name)
    with pytest.raises(ValueError, match="invalid tag"):
        noop.options(tags=[name]).enqueue()
    with pytest.raises(ValueError, match="invalid tag"):
        app.enqueue_many([noop.options(tags=["ok", name]).job()])
    with pytest.raises(ValueError, match="invalid task name"):
        app.periodic(cron="* * * * *", name=name)(lambda: None)
    with pytest.raises(ValueError, match="invalid task name"):
        app.add_schedule(name, cron="* * * * *", task=noop)
    with pytest.raises(ValueError, match="invalid queue name"):
        app.add_schedule("fine", cron="* * * * *", task=noop, queue=name)
    for queue_action in (app.pause_queue, app.resume_queue):
        with pytest.raises(ValueError, match="invalid queue name"):
            queue_action(name)
    with pytest.raises(ValueError, match="invalid queue name"):
        app.list_jobs(queue=name)
    with pytest.raises(ValueError, match="invalid task name"):
        app.list_jobs(task=name)
    assert _stored(app) == 0
    assert [s.row.name for s in app.list_schedules()] == []


@pytest.mark.parametrize("name", NEWLINE_NAMES)
def test_type_tags_label_keys_and_worker_queues_refuse_a_newline(name: str) -> None:
    app = Conveyor("sqlite:///:memory:")

    class Money:
        pass

    with pytest.raises(ValueError, match="invalid type tag"):
        app.register_type(Money, lambda m: 1, lambda v: Money(), tag=name.lower())
    with pytest.raises(ValueError, match="label key"):
        check_labels({name: "eu"})
    with pytest.raises(ValueError, match="invalid queue name"):
        asyncio.run(app.run_worker({name: 1}))
    with pytest.raises(ValueError, match="invalid queue name"):
        asyncio.run(app.run_worker(config=WorkerConfig(queues={name: 1})))


def test_a_rate_may_still_end_in_whitespace() -> None:
    """Rates are not names: surrounding whitespace (a newline included) stays allowed."""
    assert parse_rate("10/s\n") == (10, 1.0)
    assert RateLimit(" 5/2s\n").interval == 0.4


@pytest.mark.parametrize("args", [
    ["t\n"],
    ["t", "--queue", "x\n"],
    ["t\n", "--queue", "x\n"],
])
def test_the_cli_refuses_names_with_a_newline(app: Conveyor, db_url: str,
                                              args: list[str]) -> None:
    result = invoke("enqueue", *args, "--url", db_url)
    assert result.exit_code == 2, result.output
    assert "invalid" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert _stored(app) == 0


@pytest.mark.parametrize("channel", ["conveyor_jobs\n", "x; DROP TABLE y"])
def test_a_listen_channel_with_a_newline_is_refused(channel: str) -> None:
    with pytest.raises(ValueError, match="channel must match"):
        PostgresStorage(PostgresConfig("postgresql://postgres@127.0.0.1:5432/postgres",
                                       channel=channel), WakeHub())
