"""Batches with callbacks, on both backends: Sidekiq's meaning, each callback exactly
once (a member retried to success included), open batches, counts, bad input."""

from __future__ import annotations

import pytest

from conveyor import BatchClosedError, BatchNotFoundError, Conveyor, JobState
from tests.apps.workflows_app import WorkflowTasks, build


def state(app: Conveyor, job_id: int | None) -> str:
    assert job_id is not None
    job = app.get_job(job_id)
    return job.state.value if job is not None else "deleted"


def callback_runs(ran: object, *names: str) -> list[str]:
    return [o.job.args[0] for o in ran if o.job.args and o.job.args[0] in names]  # type: ignore[attr-defined]


def test_every_job_completes_success_and_complete_run_once(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.step.job(f"m{i}") for i in range(3)],
                         on_success=wf.step.job("success"), on_complete=wf.step.job("complete"),
                         on_discard=wf.step.job("discard"))
    assert (batch.total, batch.pending, batch.open, batch.finished) == (3, 3, False, False)
    assert [j.batch_id for j in batch.jobs] == [batch.id] * 3
    assert state(wf.app, batch.on_success) == "pending"
    ran = wf.app.drain()
    assert sorted(callback_runs(ran, "success", "complete", "discard")) == ["complete", "success"]
    after = wf.app.get_batch(batch.id)
    assert after is not None and after.finished
    assert (after.completed, after.discarded, after.cancelled, after.pending) == (3, 0, 0, 0)
    assert state(wf.app, after.on_discard) == "cancelled"
    assert len(wf.app.drain()) == 0  # nothing runs twice


def test_a_discarded_job_runs_on_discard_once_and_cancels_on_success(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.fail.job("f1"), wf.step.job("ok"), wf.fail.job("f2")],
                         on_success=wf.step.job("success"), on_complete=wf.step.job("complete"),
                         on_discard=wf.step.job("discard"))
    ran = wf.app.drain()
    assert sorted(callback_runs(ran, "success", "complete", "discard")) == ["complete", "discard"]
    after = wf.app.get_batch(batch.id)
    assert after is not None and (after.completed, after.discarded) == (1, 2)
    assert state(wf.app, after.on_success) == "cancelled"


def test_a_job_retried_to_success_counts_as_completed(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.step.job("a"), wf.flaky.job("b")],
                         on_success=wf.step.job("success"), on_discard=wf.step.job("discard"))
    ran = wf.app.drain(include_scheduled=True)
    assert [o.kind for o in ran if o.job.task == wf.flaky.name] == ["retried", "completed"]
    assert callback_runs(ran, "success", "discard") == ["success"]
    after = wf.app.get_batch(batch.id)
    assert after is not None and (after.completed, after.discarded, after.finished) == (2, 0, True)


def test_an_operator_retry_of_a_discarded_member_moves_its_count(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.fail.job("f"), wf.step.job("slow")], open=True)
    wf.app.drain()
    assert (b := wf.app.get_batch(batch.id)) is not None and b.discarded == 1
    wf.app.retry_job(batch.jobs[0].id)
    b = wf.app.get_batch(batch.id)
    assert b is not None and (b.discarded, b.pending) == (0, 1)


def test_an_open_batch_finishes_only_once_closed(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.step.job("a")], on_complete=wf.step.job("complete"), open=True)
    wf.app.drain()
    assert (b := wf.app.get_batch(batch.id)) is not None and not b.finished and b.pending == 0
    added = wf.app.batch_add(batch.id, [wf.step.job("b"), wf.step.job("c")])
    assert [j.batch_id for j in added] == [batch.id] * 2
    assert (b := wf.app.get_batch(batch.id)) is not None and (b.total, b.pending) == (3, 2)
    wf.app.drain()
    assert state(wf.app, batch.on_complete) == "pending"
    closed = wf.app.batch_close(batch.id)
    assert closed.finished and not closed.open
    ran = wf.app.drain()
    assert callback_runs(ran, "complete") == ["complete"]
    with pytest.raises(BatchClosedError):
        wf.app.batch_add(batch.id, [wf.step.job("late")])
    assert wf.app.list_jobs(task=wf.step.name, limit=100)[0].args != ["late"]


def test_an_empty_closed_batch_finishes_at_once(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([], on_success=wf.step.job("success"))
    assert batch.finished and state(wf.app, batch.on_success) == "available"


def test_bad_input_is_a_clear_error_and_writes_nothing(wf: WorkflowTasks) -> None:
    with pytest.raises(TypeError, match="list of jobs"):
        wf.app.batch(wf.step.job("a"))
    with pytest.raises(TypeError, match="on_success"):
        wf.app.batch([wf.step.job("a")], on_success="report")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="batch id"):
        wf.app.get_batch("1")  # type: ignore[arg-type]
    with pytest.raises(BatchNotFoundError):
        wf.app.batch_add(424242, [wf.step.job("a")])
    with pytest.raises(BatchNotFoundError):
        wf.app.batch_close(424242)
    assert wf.app.get_batch(424242) is None
    assert wf.app.list_jobs() == []


def test_explain_says_a_callback_waits_for_its_batch(wf: WorkflowTasks) -> None:
    batch = wf.app.batch([wf.step.job("a")], on_complete=wf.step.job("complete"))
    assert batch.on_complete is not None
    why = wf.app.explain_job(batch.on_complete)
    assert f"waiting for batch {batch.id} to finish" in " ".join(why.reasons)
    assert wf.app.get_job(batch.on_complete).state is JobState.PENDING  # type: ignore[union-attr]


def test_oversized_payloads_are_refused_and_write_nothing(wf: WorkflowTasks) -> None:
    from conveyor import PayloadTooLargeError, chain

    big = "x" * (wf.app.config.max_payload_bytes + 1)
    with pytest.raises(PayloadTooLargeError):
        wf.app.enqueue_workflow(chain(wf.step.job("a"), wf.step.job(big)))
    with pytest.raises(PayloadTooLargeError):
        wf.app.batch([wf.step.job("a")], on_complete=wf.step.job(big))
    with pytest.raises(PayloadTooLargeError):
        wf.app.batch([wf.step.job("a")], meta={"note": big})
    assert wf.app.list_jobs() == []


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:1/conveyor_gone",
                                 "sqlite:////nonexistent-dir/conveyor/jobs.db"])
def test_a_dead_database_is_a_clear_error(url: str) -> None:
    from conveyor import DatabaseUnavailableError, chain

    tasks = build(url)
    try:
        with pytest.raises(DatabaseUnavailableError):
            tasks.app.enqueue_workflow(chain(tasks.step.job("a"), tasks.step.job("b")))
        with pytest.raises(DatabaseUnavailableError):
            tasks.app.batch([tasks.step.job("a")], on_complete=tasks.step.job("done"))
        with pytest.raises(DatabaseUnavailableError):
            tasks.step.options(depends_on=[1]).enqueue("c")
        with pytest.raises(DatabaseUnavailableError):
            tasks.app.get_batch(1)
    finally:
        tasks.app.close()
