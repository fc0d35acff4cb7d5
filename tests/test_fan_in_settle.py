"""A dependency counts once toward its dependents, however often it becomes final.

An edge is ``settled`` once it has counted (at insert, when its dependency was final
already, or when the dependency first became final). A dependency retried and final
again must not count a second time: the dependent would run before its other
dependencies finished. Both backends (the triggers are SQL of each dialect).
"""

from __future__ import annotations

from typing import Any

from conveyor import Discard, JobState, Workflow

from .apps.workflows_app import WorkflowTasks


def _tasks(wf: WorkflowTasks) -> tuple[Any, Any, Any]:
    app = wf.app

    @app.task(queue="first", max_attempts=1)
    def breaks() -> None:
        raise Discard("breaks every time")

    @app.task(queue="later")
    def later() -> str:
        return "later"

    @app.task(queue="fan")
    def fan_in() -> str:
        return "ran"

    return breaks, later, fan_in


def _state(wf: WorkflowTasks, job_id: int) -> JobState:
    job = wf.app.get_job(job_id)
    assert job is not None
    return job.state


def _finish(wf: WorkflowTasks, later_id: int, fan_id: int) -> None:
    """The other dependency finishes: now, and only now, the fan-in runs, once."""
    assert len(wf.app.drain(["later"]).completed) == 1
    assert _state(wf, fan_id) is JobState.AVAILABLE
    assert [o.result for o in wf.app.drain(["fan"]).completed] == ["ran"]
    assert wf.app.drain().completed == [] and _state(wf, later_id) is JobState.COMPLETED


def test_a_dependency_retried_and_final_again_counts_once(wf: WorkflowTasks) -> None:
    breaks, later, fan_in = _tasks(wf)
    flow = Workflow()
    a, b = flow.add(breaks.job()), flow.add(later.job())
    flow.add(fan_in.job(), depends_on=[a, b], on_failure="run")
    run = wf.app.enqueue_workflow(flow)
    first, other, fan = (j.id for j in run.jobs)
    for _ in range(3):  # discarded, retried, discarded again...
        assert len(wf.app.drain(["first"]).discarded) == 1
        assert _state(wf, fan) is JobState.PENDING, "released before its other dependency"
        wf.app.retry_job(first)
    assert len(wf.app.drain(["first"]).discarded) == 1
    assert _state(wf, fan) is JobState.PENDING
    _finish(wf, other, fan)


def test_a_dependency_final_at_insert_counts_once_when_retried(wf: WorkflowTasks) -> None:
    breaks, later, fan_in = _tasks(wf)
    done = breaks.enqueue()
    assert len(wf.app.drain(["first"]).discarded) == 1  # final before the fan-in exists
    flow = Workflow()
    b = flow.add(later.job())
    flow.add(fan_in.job(), depends_on=[done, b], on_failure="run")
    run = wf.app.enqueue_workflow(flow)
    other, fan = (j.id for j in run.jobs)
    assert _state(wf, fan) is JobState.PENDING
    for _ in range(2):
        wf.app.retry_job(done.id)
        assert len(wf.app.drain(["first"]).discarded) == 1
        assert _state(wf, fan) is JobState.PENDING, "released before its other dependency"
    _finish(wf, other, fan)
