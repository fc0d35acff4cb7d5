"""``Conveyor``: the async core's methods, and their sync twins, each one line through
the one bridge (``_sync``, a private event loop on a thread)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .._job import Job, JobState
from .._storage import FairKeyRow, JobEdit, JobFilter, LeaderRow, LimiterRow, Migration, NodeRow
from .._task import JobSpec
from .._workflow import Chain, Chord, Group, Workflow
from .composition import Batch, Dependency, WorkflowInfo, WorkflowRun
from .control import KEEP, QueueInfo, ScheduleInfo, _Keep
from .limiters import Limiter, declare, list_limiters
from .maintenance import DEFAULT_BATCH, OnCount, OnProgress
from .search import SearchPage
from .testing import TestingApp

if TYPE_CHECKING:
    from .._explain import Explanation


class Conveyor(TestingApp):
    """A job queue bound to one database.

    Example::

        app = Conveyor("sqlite:///jobs.db")

        @app.task(queue="mail")
        async def send_email(to: str) -> None: ...

        send_email.enqueue("a@b.c")
    """

    # -- jobs -------------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job | None:
        """Example: ``app.get_job(job.id).state``"""
        return self._sync(self.get_job_async(job_id))

    def list_jobs(
        self, *, state: JobState | str | None = None, queue: str | None = None,
        task: str | None = None, limit: int = 50, before_id: int | None = None,
        tag: str | None = None, args_contains: Mapping[str, Any] | None = None,
    ) -> list[Job]:
        """Newest first. Example: ``app.list_jobs(state="discarded", limit=10)``;
        by tag or keyword argument, among the 100,000 job ids below ``before_id`` (or
        the newest): ``app.list_jobs(tag="vip", args_contains={"order_id": 1234})``;
        ``search_jobs`` says where that window ended, to go on to older jobs."""
        return self._sync(self.list_jobs_async(
            state=state, queue=queue, task=task, limit=limit, before_id=before_id,
            tag=tag, args_contains=args_contains))

    def search_jobs(
        self, *, state: JobState | str | None = None, queue: str | None = None,
        task: str | None = None, limit: int = 50, before_id: int | None = None,
        tag: str | None = None, args_contains: Mapping[str, Any] | None = None,
    ) -> SearchPage:
        """As ``list_jobs``, with where to go on. Example: every job of an order, window
        after window: ``page = app.search_jobs(args_contains={"order_id": 1234})``, then
        ``app.search_jobs(..., before_id=page.next_before_id)`` until it is None."""
        return self._sync(self.search_jobs_async(
            state=state, queue=queue, task=task, limit=limit, before_id=before_id,
            tag=tag, args_contains=args_contains))

    def wait_jobs(self, jobs: Sequence[Job | int], timeout: float | None = None, *,
                  raise_failed: bool = True) -> list[Job]:
        """Example: ``a, b = app.wait_jobs([job_a, job_b.id], timeout=60)``"""
        return self._sync(self.wait_jobs_async(jobs, timeout, raise_failed=raise_failed))

    def wait_job(self, job_id: int, timeout: float | None = None) -> Job:
        """Example: ``app.wait_job(42, timeout=60).result``"""
        return self._sync(self.wait_job_async(job_id, timeout))

    def retry_job(self, job_id: int, *, args: Sequence[Any] | None = None,
                  kwargs: Mapping[str, Any] | None = None, source: str = "api",
                  user: str | None = None) -> Job:
        """Example: ``app.retry_job(42)`` (``InvalidStateError`` if it cannot be);
        edit and retry: ``app.retry_job(42, args=["fixed@example.com"])``"""
        return self._sync(self.retry_job_async(job_id, args=args, kwargs=kwargs,
                                               source=source, user=user))

    def job_edits(self, job_id: int) -> list[JobEdit]:
        """Example: ``app.job_edits(42)[-1].args_before`` (oldest first)"""
        return self._sync(self.job_edits_async(job_id))

    def cancel_job(self, job_id: int, *, source: str = "api") -> Job:
        """Example: ``app.cancel_job(42)``"""
        return self._sync(self.cancel_job_async(job_id, source=source))

    def count_jobs(self, *, queue: str | None = None) -> dict[str, int]:
        return self._sync(self.count_jobs_async(queue=queue))

    def migrate(self, *, dry_run: bool = False) -> list[Migration]:
        return self._sync(self.migrate_async(dry_run=dry_run))

    def pending_migrations(self) -> list[Migration]:
        """Example: ``[m.name for m in app.pending_migrations()]``"""
        return self._sync(self.pending_migrations_async())

    # -- workflows and batches (the async core is in composition.py) -----------------------

    def enqueue_workflow(self, wf: Workflow | Chain | Group | Chord, *,
                         connection: Any = None) -> WorkflowRun:
        """Example: ``run = app.enqueue_workflow(chain(fetch.job(url), parse.job()))``"""
        if connection is not None:
            return self._enqueue_workflow_on(wf, connection)
        return self._sync(self.enqueue_workflow_async(wf))

    def get_workflow(self, workflow_id: str) -> WorkflowInfo | None:
        """Example: ``app.get_workflow(run.id).counts``"""
        return self._sync(self.get_workflow_async(workflow_id))

    def job_dependencies(self, job_id: int) -> list[Dependency]:
        """Example: ``app.job_dependencies(current_job().id)[0].result``"""
        return self._sync(self.job_dependencies_async(job_id))

    def batch(self, jobs: Sequence[JobSpec], *, on_success: JobSpec | None = None,
              on_complete: JobSpec | None = None, on_discard: JobSpec | None = None,
              open: bool = False, meta: Mapping[str, Any] | None = None,
              connection: Any = None) -> Batch:
        """Example: ``app.batch([a.job(1), a.job(2)], on_complete=report.job())``"""
        if connection is not None:
            callbacks = {"on_success": on_success, "on_complete": on_complete,
                         "on_discard": on_discard}
            return self._batch_on(jobs, callbacks, open, meta, connection)
        return self._sync(self.batch_async(jobs, on_success=on_success, on_complete=on_complete,
                                           on_discard=on_discard, open=open, meta=meta))

    def batch_add(self, batch_id: int, jobs: Sequence[JobSpec]) -> list[Job]:
        """Example: ``app.batch_add(b.id, [a.job(3)])``"""
        return self._sync(self.batch_add_async(batch_id, jobs))

    def batch_close(self, batch_id: int) -> Batch:
        """Example: ``app.batch_close(b.id)``"""
        return self._sync(self.batch_close_async(batch_id))

    def get_batch(self, batch_id: int) -> Batch | None:
        """Example: ``app.get_batch(b.id).pending``"""
        return self._sync(self.get_batch_async(batch_id))

    # -- schedules --------------------------------------------------------------------------

    def add_schedule(self, name: str, **kwargs: Any) -> None:
        """Example: ``app.add_schedule("cleanup", cron="0 3 * * *", task=cleanup)``"""
        self._sync(self.add_schedule_async(name, **kwargs))

    def list_schedules(self) -> list[ScheduleInfo]:
        return self._sync(self.list_schedules_async())

    def pause_schedule(self, name: str) -> None:
        self._sync(self.pause_schedule_async(name))

    def resume_schedule(self, name: str) -> None:
        self._sync(self.resume_schedule_async(name))

    def trigger_schedule(self, name: str, *, source: str = "api") -> Job:
        return self._sync(self.trigger_schedule_async(name, source=source))

    def remove_schedule(self, name: str) -> None:
        self._sync(self.remove_schedule_async(name))

    # -- limiters (the core is in limiters.py) ----------------------------------------------

    def limiter(self, name: str, *, rate: str | None = None, concurrency: int | None = None,
                burst: int = 1, lease: float = 30.0, wait: float = 5.0,
                timeout: float | None = 30.0) -> Limiter:
        """A cluster-wide limiter for code in handlers or outside jobs.

        Example: ``slack = app.limiter("slack", rate="20/s")`` then ``with slack: ...``;
        ``ocr = app.limiter("ocr", concurrency=3)`` then ``with ocr.hold(key=acct): ...``
        """
        return declare(self, name, rate=rate, concurrency=concurrency, burst=burst,
                       lease=lease, wait=wait, timeout=timeout)

    async def list_limiters_async(self) -> list[LimiterRow]:
        return await list_limiters(self)

    def list_limiters(self) -> list[LimiterRow]:
        """Example: ``[(r.name, len(r.holders)) for r in app.list_limiters()]``"""
        return self._sync(self.list_limiters_async())

    # -- queues and cluster -----------------------------------------------------------------

    def pause_queue(self, name: str) -> None:
        """Example: ``app.pause_queue("mail")``"""
        self._sync(self.pause_queue_async(name))

    def resume_queue(self, name: str) -> None:
        self._sync(self.resume_queue_async(name))

    def set_queue_concurrency(self, name: str, concurrency: int | None, *,
                              per_node: bool = False) -> None:
        """Example: ``app.set_queue_concurrency("mail", 20)``"""
        self._sync(self.set_queue_concurrency_async(name, concurrency, per_node=per_node))

    def set_queue_rate_limit(self, name: str, rate: str | None) -> None:
        self._sync(self.set_queue_rate_limit_async(name, rate))

    def set_fair_weight(self, queue: str, key: str, weight: float | None) -> None:
        """Example: ``app.set_fair_weight("reports", "acme", 3)`` (None: back to 1)"""
        self._sync(self.set_fair_weight_async(queue, key, weight))

    def list_fair_keys(self, queue: str) -> list[FairKeyRow]:
        """Example: ``for k in app.list_fair_keys("reports"): print(k.key, k.waiting)``"""
        return self._sync(self.list_fair_keys_async(queue))

    def set_queue_backoff(self, name: str, backoff: str | float | None) -> None:
        """Example: ``app.set_queue_backoff("mail", "exp:5:3600")`` (None: built-in)"""
        self._sync(self.set_queue_backoff_async(name, backoff))

    def set_queue_retention(self, name: str, *, completed: float | _Keep | None = KEEP,
                            discarded: float | _Keep | None = KEEP) -> None:
        """Example: ``app.set_queue_retention("mail", completed=3600, discarded=86400)``"""
        self._sync(self.set_queue_retention_async(name, completed=completed, discarded=discarded))

    def list_queues(self) -> list[QueueInfo]:
        return self._sync(self.list_queues_async())

    def list_nodes(self) -> list[NodeRow]:
        return self._sync(self.list_nodes_async())

    def get_leader(self) -> LeaderRow | None:
        return self._sync(self.get_leader_async())

    def explain_job(self, job_id: int) -> Explanation:
        """Example: ``print(app.explain_job(42))``"""
        return self._sync(self.explain_job_async(job_id))

    # -- one-off maintenance (the async core is in maintenance.py) --------------------------

    def discard_job(self, job_id: int, *, reason: str | None = None,
                    source: str = "api") -> Job:
        """Example: ``app.discard_job(42, reason="customer left")``"""
        return self._sync(self.discard_job_async(job_id, reason=reason, source=source))

    def delete_job(self, job_id: int, *, force: bool = False, source: str = "api") -> Job:
        """Example: ``app.delete_job(42)`` (returns the job as it was)"""
        return self._sync(self.delete_job_async(job_id, force=force, source=source))

    def retry_matching(self, flt: JobFilter, *, limit: int, source: str = "api") -> int:
        """Example: ``app.retry_matching(JobFilter(queue="mail"), limit=1000)``"""
        return self._sync(self.retry_matching_async(flt, limit=limit, source=source))

    def discard_matching(self, flt: JobFilter, *, limit: int, source: str = "api") -> int:
        """Example: ``app.discard_matching(JobFilter(task="sync"), limit=1000)``"""
        return self._sync(self.discard_matching_async(flt, limit=limit, source=source))

    def cancel_workflow(self, workflow_id: str, *, source: str = "api") -> int:
        """Example: ``app.cancel_workflow(run.id)`` (how many jobs were cancelled)"""
        return self._sync(self.cancel_workflow_async(workflow_id, source=source))

    def purge_jobs(
        self, *, states: Sequence[JobState | str] | JobState | str | None = None,
        queue: str | None = None, task: str | None = None,
        older_than: float | timedelta | None = None, dry_run: bool = False,
        batch_size: int = DEFAULT_BATCH, on_count: OnCount | None = None,
        on_progress: OnProgress | None = None, source: str = "api",
    ) -> int:
        """Example: ``app.purge_jobs(states="discarded", older_than=timedelta(days=30))``"""
        return self._sync(self.purge_jobs_async(
            states=states, queue=queue, task=task, older_than=older_than, dry_run=dry_run,
            batch_size=batch_size, on_count=on_count, on_progress=on_progress, source=source))

    def prune_now(self, *, completed_retention: float | timedelta | None = None,
                  discarded_retention: float | timedelta | None = None,
                  dry_run: bool = False, batch_size: int = DEFAULT_BATCH) -> int:
        """Example: ``app.prune_now(dry_run=True)``"""
        return self._sync(self.prune_now_async(
            completed_retention=completed_retention, discarded_retention=discarded_retention,
            dry_run=dry_run, batch_size=batch_size))

    def rescue_now(self, *, dry_run: bool = False, limit: int = 10_000) -> list[Job]:
        """Example: ``[j.id for j in app.rescue_now(dry_run=True)]``"""
        return self._sync(self.rescue_now_async(dry_run=dry_run, limit=limit))
