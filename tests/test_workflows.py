"""Job dependencies and workflows, on both backends: order, fan-in results, failure
policies, one transaction, a fan-in whose last two dependencies finish at once, and a
worker killed mid-workflow."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from conveyor import (
    Conveyor,
    JobState,
    UnknownDependencyError,
    Workflow,
    WorkflowError,
    chain,
    chord,
    group,
)
from conveyor._storage import (
    JobAck,
    JobAckManyParams,
    JobFetchAvailableParams,
    WakeHub,
    create_storage,
)
from tests.apps.workflows_app import WorkflowTasks
from tests.conftest import WaitFor

ROOT = Path(__file__).resolve().parent.parent


def states(app: Conveyor, *ids: int) -> list[str]:
    found = [app.get_job(i) for i in ids]
    return [j.state.value if j is not None else "deleted" for j in found]


def test_chain_runs_in_order(wf: WorkflowTasks) -> None:
    run = wf.app.enqueue_workflow(chain(wf.step.job("a"), wf.step.job("b"), wf.step.job("c")))
    assert [j.state for j in run.jobs] == [JobState.AVAILABLE, JobState.PENDING, JobState.PENDING]
    assert [j.workflow_id for j in run.jobs] == [run.id] * 3
    ran = wf.app.drain()
    assert [o.job.kwargs.get("name") or o.job.args[0] for o in ran] == ["a", "b", "c"]
    assert states(wf.app, *(j.id for j in run.jobs)) == ["completed"] * 3


def test_each_enqueue_of_a_workflow_is_a_run_of_its_own(wf: WorkflowTasks) -> None:
    flow = Workflow(chain(wf.step.job("a"), wf.step.job("b")))
    first, second = wf.app.enqueue_workflow(flow), wf.app.enqueue_workflow(flow)
    assert first.id != second.id
    info = wf.app.get_workflow(second.id)
    assert info is not None and [j.id for j in info.jobs] == [j.id for j in second.jobs]


def test_chord_callback_receives_the_group_results_in_order(wf: WorkflowTasks) -> None:
    header = group(*(wf.step.job(str(i)) for i in range(5)))
    run = wf.app.enqueue_workflow(chord(header, wf.collect))
    callback = run.jobs[-1]
    assert callback.state is JobState.PENDING and callback.deps_pending == 5
    wf.app.drain()
    done = wf.app.get_job(callback.id)
    assert done is not None and done.state is JobState.COMPLETED
    assert done.result == ["0!", "1!", "2!", "3!", "4!"]


def test_dag_by_names_waits_for_every_dependency(wf: WorkflowTasks) -> None:
    dag = Workflow()
    dag.add(wf.step.job("publish"), name="publish", depends_on=["thumb", "ocr"])  # later names
    fetch = dag.add(wf.step.job("fetch"))
    dag.add(wf.step.job("thumb"), name="thumb", depends_on=[fetch])
    dag.add(wf.step.job("ocr"), name="ocr", depends_on=[fetch])
    run = wf.app.enqueue_workflow(dag)
    order = [o.job.args[0] for o in wf.app.drain()]
    assert order[0] == "fetch" and order[-1] == "publish" and sorted(order[1:3]) == ["ocr", "thumb"]
    info = wf.app.get_workflow(run.id)
    assert info is not None and info.finished and not info.failed
    assert {(e.job_id, e.depends_on) for e in info.edges} == {
        (run.jobs[0].id, run.jobs[2].id), (run.jobs[0].id, run.jobs[3].id),
        (run.jobs[2].id, run.jobs[1].id), (run.jobs[3].id, run.jobs[1].id)}
    assert info.counts["completed"] == 4


def test_a_cycle_is_refused_and_nothing_is_written(wf: WorkflowTasks) -> None:
    dag = Workflow()
    dag.add(wf.step.job("a"), name="a", depends_on=["c"])
    dag.add(wf.step.job("b"), name="b", depends_on=["a"])
    dag.add(wf.step.job("c"), name="c", depends_on=["b"])
    with pytest.raises(WorkflowError, match=r"cycle: .*a -> "):
        wf.app.enqueue_workflow(dag)
    assert wf.app.list_jobs() == []


def test_unknown_dependency_is_refused_and_nothing_is_written(wf: WorkflowTasks) -> None:
    known = wf.step.enqueue("known")
    with pytest.raises(UnknownDependencyError, match="999999"):
        wf.step.options(depends_on=[known, 999999]).enqueue("x")
    with pytest.raises(UnknownDependencyError):
        wf.app.enqueue_many([wf.step.job("y"),
                             wf.step.options(depends_on=[424242]).job("z")])
    assert [j.id for j in wf.app.list_jobs()] == [known.id]


def test_bad_input_is_a_clear_error(wf: WorkflowTasks) -> None:
    with pytest.raises(TypeError, match="depends_on"):
        wf.step.options(depends_on=5).enqueue("x")
    with pytest.raises(TypeError, match="positive job ids"):
        wf.step.options(depends_on=["1"]).enqueue("x")
    with pytest.raises(WorkflowError, match="on_failure"):
        wf.step.options(on_failure="ignore").enqueue("x")
    with pytest.raises(TypeError, match=r"task\.job"):
        chain(wf.step.job("a"), "b")
    with pytest.raises(TypeError, match="Workflow"):
        wf.app.enqueue_workflow([wf.step.job("a")])  # type: ignore[arg-type]
    with pytest.raises(WorkflowError, match="results"):
        chord(group(wf.step.job("a")), wf.step.job("b"))
    with pytest.raises(WorkflowError, match="unique"):
        wf.app.enqueue_workflow(chain(wf.step.job("a"), wf.unique_step.job("u")))
    with pytest.raises(WorkflowError, match="no add"):
        dag = Workflow()
        dag.add(wf.step.job("a"), depends_on=["missing"])
        wf.app.enqueue_workflow(dag)
    assert wf.app.list_jobs() == []


def test_cancel_policy_cascades_through_dependents(wf: WorkflowTasks) -> None:
    run = wf.app.enqueue_workflow(chain(wf.fail.job("a"), wf.step.job("b"), wf.step.job("c")))
    wf.app.drain()
    assert states(wf.app, *(j.id for j in run.jobs)) == ["discarded", "cancelled", "cancelled"]
    info = wf.app.get_workflow(run.id)
    assert info is not None and info.finished and info.failed


def test_run_policies_run_the_dependent_with_or_without_the_failure(wf: WorkflowTasks) -> None:
    for policy, expected in (("run", [None, "ok!"]),
                             ("run_with_failure", ["failure", "ok!"])):
        dag = Workflow(on_failure=policy)  # type: ignore[arg-type]
        dag.add(chord(group(wf.fail.job("bad"), wf.step.job("ok")), wf.collect))
        run = wf.app.enqueue_workflow(dag)
        wf.app.drain()
        done = wf.app.get_job(run.jobs[-1].id)
        assert done is not None and done.state is JobState.COMPLETED
        first, second = done.result
        assert second == expected[1]
        if expected[0] is None:
            assert first is None
        else:
            assert first["state"] == "discarded" and first["job_id"] == run.jobs[0].id
            assert "bad fails" in str(first["error"])
        deps = wf.app.job_dependencies(done.id)
        assert [d.state for d in deps] == [JobState.DISCARDED, JobState.COMPLETED]
        assert deps[0].error is not None and deps[1].result == "ok!"


def test_dependencies_already_final_at_insert(wf: WorkflowTasks) -> None:
    ok = wf.step.enqueue("ok")
    bad = wf.fail.enqueue("bad")
    wf.app.drain()
    runs = wf.step.options(depends_on=[ok]).enqueue("after-ok")
    assert runs.state is JobState.AVAILABLE and runs.deps_pending == 0
    cancelled = wf.step.options(depends_on=[ok, bad]).enqueue("after-bad")
    assert cancelled.state is JobState.CANCELLED
    anyway = wf.step.options(depends_on=[bad.id], on_failure="run").enqueue("anyway")
    assert anyway.state is JobState.AVAILABLE
    # a workflow job waiting on existing jobs (final or not) and on its own jobs
    dag = Workflow()
    a = dag.add(wf.step.job("a"), depends_on=[ok])
    dag.add(wf.step.job("b"), depends_on=[a, anyway])
    run = wf.app.enqueue_workflow(dag)
    assert [j.state for j in run.jobs] == [JobState.AVAILABLE, JobState.PENDING]
    assert run.jobs[1].deps_pending == 2


def test_operator_cancel_and_delete_of_a_dependency(wf: WorkflowTasks) -> None:
    first = wf.step.enqueue("first")
    after = wf.step.options(depends_on=[first]).enqueue("after")
    then = wf.step.options(depends_on=[after]).enqueue("then")
    wf.app.cancel_job(first.id)
    assert states(wf.app, first.id, after.id, then.id) == ["cancelled"] * 3
    # deleting a waiting dependency counts as its cancellation (here: "run" policy)
    gone = wf.step.enqueue("gone")
    runs = wf.step.options(depends_on=[gone], on_failure="run").enqueue("runs")
    wf.app.delete_job(gone.id)
    assert states(wf.app, runs.id) == ["available"]
    # cancelling or discarding a pending job itself is allowed
    waiting = wf.step.options(depends_on=[runs]).enqueue("waiting")
    assert wf.app.discard_job(waiting.id).state is JobState.DISCARDED


def test_prune_keeps_a_finished_dependency_whose_dependent_waits(wf: WorkflowTasks) -> None:
    a = wf.step.enqueue("a")
    slow = wf.step.options(delay=3600).enqueue("slow")
    fan_in = wf.step.options(depends_on=[a, slow]).enqueue("fan-in")
    wf.app.drain(queues=["wf"])
    assert wf.app.prune_now(completed_retention=0) == 0
    assert states(wf.app, a.id, fan_in.id) == ["completed", "pending"]


def test_a_dependency_retried_and_finished_again_counts_once(wf: WorkflowTasks) -> None:
    a = wf.step.enqueue("a")
    slow = wf.step.options(delay=3600).enqueue("slow")
    waiting = wf.step.options(depends_on=[a, slow]).enqueue("waiting")
    wf.app.drain()
    assert wf.app.get_job(waiting.id).deps_pending == 1  # type: ignore[union-attr]
    wf.app.retry_job(a.id)
    wf.app.drain()
    assert states(wf.app, a.id, waiting.id) == ["completed", "pending"]
    assert wf.app.get_job(waiting.id).deps_pending == 1  # type: ignore[union-attr]


def test_explain_says_what_a_pending_job_waits_on(wf: WorkflowTasks) -> None:
    a, b = wf.step.enqueue("a"), wf.step.enqueue("b")
    job = wf.step.options(depends_on=[a, b]).enqueue("c")
    why = wf.app.explain_job(job.id)
    assert f"waiting on jobs {a.id} and {b.id}" in " ".join(why.reasons)
    wf.app.drain(max_jobs=1)
    why = wf.app.explain_job(job.id)
    assert f"waiting on job {b.id} " in " ".join(why.reasons)


def test_a_workflow_in_a_rolled_back_caller_transaction_leaves_nothing(
        wf: WorkflowTasks, db_url: str) -> None:
    flow = chord(group(wf.step.job("a"), wf.step.job("b")), wf.collect)
    if db_url.startswith("sqlite"):
        conn = sqlite3.connect(db_url[len("sqlite:///"):], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        run = wf.app.enqueue_workflow(flow, connection=conn)
        conn.execute("ROLLBACK")
        conn.close()
    else:
        with psycopg.connect(db_url) as pg:
            run = wf.app.enqueue_workflow(flow, connection=pg)
            pg.rollback()
    assert len(run.jobs) == 3
    assert wf.app.list_jobs() == [] and wf.app.get_workflow(run.id) is None
    # and committed, all of it is there
    committed = wf.app.enqueue_workflow(flow)
    info = wf.app.get_workflow(committed.id)
    assert info is not None and len(info.jobs) == 3 and len(info.edges) == 2


def test_enqueue_workflow_async_in_the_callers_async_transaction(
        wf: WorkflowTasks, db_url: str) -> None:
    async def main() -> None:
        if db_url.startswith("sqlite"):
            run = await wf.app.enqueue_workflow_async(chain(wf.step.job("a"), wf.step.job("b")))
            assert [j.state for j in run.jobs] == [JobState.AVAILABLE, JobState.PENDING]
            return
        async with await psycopg.AsyncConnection.connect(db_url) as conn, conn.transaction():
            run = await wf.app.enqueue_workflow_async(
                chain(wf.step.job("a"), wf.step.job("b")), connection=conn)
        info = await wf.app.get_workflow_async(run.id)
        assert info is not None and [j.state for j in info.jobs] == [JobState.AVAILABLE,
                                                                      JobState.PENDING]

    asyncio.run(main())


def test_fan_in_whose_last_two_dependencies_finish_at_once_runs_once(
        wf: WorkflowTasks, db_url: str) -> None:
    """Two storages (two connections, as two nodes would be) ack the last two
    dependencies at the same moment, five times: the fan-in is released each time,
    exactly once (one available row, one claim)."""
    asyncio.run(_race_fan_in(wf, db_url))


async def _race_fan_in(wf: WorkflowTasks, db_url: str) -> None:
    nodes = [create_storage(db_url, WakeHub()) for _ in range(2)]
    for storage in nodes:
        await storage.open()
    try:
        for _ in range(5):
            run = await wf.app.enqueue_workflow_async(
                chord(group(wf.step.job("x"), wf.step.job("y")), wf.collect))
            claimed = [await s.job_fetch_available(JobFetchAvailableParams("wf", 1, f"n{i}", 30))
                       for i, s in enumerate(nodes)]
            assert sorted(c[0].id for c in claimed) == [j.id for j in run.jobs[:2]]
            await asyncio.gather(*(
                s.job_ack_many(JobAckManyParams([JobAck(c[0].id, c[0].lease_token or 0,
                                                        JobState.COMPLETED, result_json='"r"')],
                                                f"n{i}"))
                for i, (s, c) in enumerate(zip(nodes, claimed, strict=True))))
            fan_in = await nodes[0].job_get(run.jobs[2].id)
            assert fan_in is not None and fan_in.state is JobState.AVAILABLE
            assert fan_in.deps_pending == 0 and fan_in.kwargs["results"] == ["r", "r"]
            again = [await s.job_fetch_available(JobFetchAvailableParams("wf", 10, "n", 30))
                     for s in nodes]
            assert [j.id for batch in again for j in batch] == [fan_in.id]
            await nodes[0].job_ack_many(JobAckManyParams(
                [JobAck(j.id, j.lease_token or 0, JobState.COMPLETED)
                 for batch in again for j in batch], "n"))
    finally:
        for storage in nodes:
            await storage.close()


def _worker(db_url: str, ledger: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "CONVEYOR_URL": db_url, "CONVEYOR_TEST_LEDGER": str(ledger),
           "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    cmd = [sys.executable, "-m", "conveyor", "worker", "tests.apps.workflows_app:app",
           "--queues", "wf", "--lease-ttl", "3", "--heartbeat-interval", "0.5",
           "--node-ttl", "2", "--rescue-interval", "0.5"]
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def test_a_worker_killed_mid_workflow_leaves_nothing_stuck(
        wf: WorkflowTasks, db_url: str, tmp_path: Path, wait_for: WaitFor) -> None:
    gate, ledger = tmp_path / "gate", tmp_path / "ledger.txt"
    run = wf.app.enqueue_workflow(chain(
        wf.gated.job(str(gate)), chord(group(wf.step.job("b"), wf.step.job("c")),
                                       wf.collect)))
    first = _worker(db_url, ledger, tmp_path / "w1.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: ledger.exists() and "start gated" in ledger.read_text(), timeout=30,
                 message="the first worker starts the gated job")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        gate.touch()
        second = _worker(db_url, ledger, tmp_path / "w2.log")
        wait_for(lambda: states(wf.app, run.jobs[-1].id) == ["completed"], timeout=60,
                 message="the fan-in completes on the second worker")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=15)
    assert states(wf.app, *(j.id for j in run.jobs)) == ["completed"] * 4
    runs = [line.split()[1] for line in ledger.read_text().splitlines()
            if line.startswith("run ")]
    assert sorted(runs) == ["collect", "gated", "step", "step"]  # each dependent once
    done = wf.app.get_job(run.jobs[-1].id)
    assert done is not None and done.result == ["b!", "c!"]


def test_cli_shows_workflows_batches_and_dependencies(wf: WorkflowTasks, db_url: str) -> None:
    import json

    from tests.test_cli import invoke

    run = wf.app.enqueue_workflow(chain(wf.step.job("a"), wf.step.job("b")))
    batch = wf.app.batch([wf.step.job("m")], on_complete=wf.step.job("done"))
    shown = invoke("workflows", "show", run.id, "--url", db_url)
    assert shown.exit_code == 0 and f"#{run.jobs[0].id}" in shown.output
    assert "pending" in shown.output
    data = json.loads(invoke("workflows", "show", run.id, "--url", db_url, "--json").output)
    assert data["edges"] == [{"job_id": run.jobs[1].id, "depends_on": run.jobs[0].id,
                              "on_failure": "cancel"}]
    data = json.loads(invoke("batches", "show", str(batch.id), "--url", db_url, "--json").output)
    assert (data["total"], data["pending"], data["on_complete"]) == (1, 1, batch.on_complete)
    data = json.loads(invoke("jobs", "show", str(run.jobs[1].id), "--url", db_url,
                             "--json").output)
    assert data["state"] == "pending" and data["dependencies"][0]["id"] == run.jobs[0].id
    listed = json.loads(invoke("jobs", "list", "--state", "pending", "--url", db_url,
                               "--json").output)
    assert {j["id"] for j in listed} == {run.jobs[1].id, batch.on_complete}
    assert invoke("workflows", "show", "nope", "--url", db_url).exit_code != 0
    assert invoke("batches", "show", "999", "--url", db_url).exit_code != 0


def _archive(app: Conveyor) -> int:
    """Move every finished job to history now, as the leader's archiver does."""
    from conveyor._runtime.archiver import Archiver

    async def once() -> int:
        return await Archiver(await app.storage(), None, 1.0, after=0.0).run_once()
    return app._sync(once())


def test_workflows_and_batches_read_through_the_archive(wf: WorkflowTasks) -> None:
    """Finished jobs leave the hot table at once: a chord whose first results were
    archived still gets them all, a job may depend on an archived one, and the workflow,
    its dependencies and a batch's jobs are read from both tables."""
    run = wf.app.enqueue_workflow(chord(group(*(wf.step.job(str(i)) for i in range(4))),
                                        wf.collect))
    wf.app.drain(max_jobs=2)
    assert _archive(wf.app) >= 2
    wf.app.drain()
    callback = wf.app.get_job(run.jobs[-1].id)
    assert callback is not None and callback.result == ["0!", "1!", "2!", "3!"]
    assert _archive(wf.app) >= 3
    info = wf.app.get_workflow(run.id)
    assert info is not None and info.counts.get("completed") == 5 and len(info.edges) == 4
    deps = wf.app.job_dependencies(callback.id)
    assert [d.state for d in deps] == [JobState.COMPLETED] * 4
    assert [d.result for d in deps] == ["0!", "1!", "2!", "3!"]

    first = wf.step.enqueue("first")
    wf.app.drain()
    _archive(wf.app)
    later = wf.step.options(depends_on=[first]).enqueue("later")
    assert later.state is not JobState.PENDING
    wf.app.drain()
    assert states(wf.app, later.id) == ["completed"]

    batch = wf.app.batch([wf.step.job("m1"), wf.step.job("m2")])
    wf.app.drain()
    _archive(wf.app)
    got = wf.app.get_batch(batch.id)
    assert got is not None and got.completed == 2 and got.total == 2


def test_dependencies_hold_on_every_enqueue_path(wf: WorkflowTasks) -> None:
    """``depends_on`` is kept by the ids-only bulk path and by a single async enqueue
    (the pipelined path), not only by ``enqueue_many``."""
    first = wf.step.enqueue("first")
    (bulk_id,) = wf.app.enqueue_many_ids([wf.step.options(depends_on=[first]).job("bulk")])

    async def single() -> int:
        job = await wf.step.options(depends_on=[first]).enqueue_async("single")
        return int(job.id)

    single_id = asyncio.run(single())
    assert states(wf.app, bulk_id, single_id) == ["pending", "pending"]
    wf.app.drain()
    assert states(wf.app, first.id, bulk_id, single_id) == ["completed"] * 3
