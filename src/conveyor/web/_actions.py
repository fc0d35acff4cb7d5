"""The dashboard's actions: POST only, each behind ``action_form`` (write role, not
read-only, same origin, CSRF token), each logged, each answered with a redirect.

There is deliberately no action that enqueues an arbitrary task or edits arguments:
retry re-runs a job as it was written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .._app import ScheduleNotFoundError
from .._errors import ConveyorError
from .._hooks import StateChange
from .._job import Job, JobState
from .._storage import JobBulkParams, JobCancelParams, JobChanged, JobFilter, JobGetParams, JobRetryParams
from . import _data
from ._base import DashboardBase, safe_path
from ._query import JobQuery, positive_int
from ._security import action_form, form_text


def _changes(changed: list[JobChanged], state: JobState) -> list[StateChange]:
    return [StateChange(c.id, c.task, c.queue, c.attempt, state, c.previous, "dashboard")
            for c in changed]


class Actions(DashboardBase):
    # -- one job ------------------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        await action_form(request, self.settings)
        action = request.path_params["action"]
        job_id = positive_int(request.path_params["job_id"])
        if job_id is None or action not in ("retry", "cancel", "discard"):
            raise HTTPException(404)
        self.audit(request, f"job.{action}", job=job_id)
        storage = await self.app.storage()
        before = await storage.job_get(JobGetParams(job_id))
        if before is None:
            raise HTTPException(404, f"no job with id {job_id}")
        job: Job | None = None
        if action == "retry":
            job = await storage.job_retry(JobRetryParams(job_id))
        elif action == "cancel":
            job = await storage.job_cancel(JobCancelParams(job_id))
        else:
            changed = await storage.job_discard_matching(
                JobBulkParams(JobFilter(ids=(job_id,)), limit=1))
            self.app.hooks.emit(_changes(changed, JobState.DISCARDED))
            job = before if changed else None
        if action != "discard":
            self.app.hooks.changed(job, before.state, "dashboard")
        if job is None:
            return self.redirect(request, f"/jobs/{job_id}", "error",
                                 f"Job {job_id} is {before.state.value} and cannot be "
                                 f"{'cancelled' if action == 'cancel' else action + 'ed'}.")
        done = {"retry": "retried", "cancel": "cancelled", "discard": "discarded"}[action]
        return self.redirect(request, f"/jobs/{job_id}", done, job_id)

    # -- many jobs ----------------------------------------------------------------------------

    async def bulk_action(self, request: Request) -> Response:
        """Retry or discard every job matching the filter, at most ``bulk_cap``."""
        form = await action_form(request, self.settings)
        action = form_text(form, "action")
        if action not in ("retry", "discard"):
            raise HTTPException(400, "action must be retry or discard")
        query = JobQuery.parse(form)
        back = safe_path(form_text(form, "back", "/failures"))
        self.audit(request, f"bulk.{action}", filter=query.describe(), cap=self.settings.bulk_cap)
        storage = await self.app.storage()
        params = JobBulkParams(await _data.bounded(self.app, query.to_filter()),
                               limit=self.settings.bulk_cap)
        try:
            if action == "retry":
                changed = await storage.job_retry_matching(params)
            else:
                changed = await storage.job_discard_matching(params)
        except ConveyorError as exc:
            return self.redirect(request, back, "error", f"Bulk {action} failed: {exc}")
        state = JobState.AVAILABLE if action == "retry" else JobState.DISCARDED
        self.app.hooks.emit(_changes(changed, state))
        return self.redirect(request, back, f"bulk-{action}", len(changed))

    # -- queues and schedules ---------------------------------------------------------------------

    async def queue_action(self, request: Request) -> Response:
        form = await action_form(request, self.settings)
        name, action = request.path_params["name"], request.path_params["action"]
        self.audit(request, f"queue.{action}", queue=name)
        try:
            if action == "pause":
                await self.app.pause_queue_async(name)
            elif action == "resume":
                await self.app.resume_queue_async(name)
            elif action == "concurrency":
                raw = form_text(form, "concurrency")
                limit = positive_int(raw) if raw else None
                if raw and limit is None:
                    return self.redirect(request, "/queues", "error",
                                         "Concurrency must be a whole number of at least 1.")
                await self.app.set_queue_concurrency_async(
                    name, limit, per_node=form_text(form, "scope") == "per_node")
            else:
                raise HTTPException(404)
        except ValueError as exc:
            return self.redirect(request, "/queues", "error", str(exc))
        done = {"pause": "paused", "resume": "resumed", "concurrency": "concurrency"}[action]
        return self.redirect(request, "/queues", done, name)

    async def schedule_action(self, request: Request) -> Response:
        await action_form(request, self.settings)
        name, action = request.path_params["name"], request.path_params["action"]
        self.audit(request, f"schedule.{action}", schedule=name)
        calls: dict[str, Callable[[str], Awaitable[object]]] = {
            "pause": self.app.pause_schedule_async, "resume": self.app.resume_schedule_async,
            "trigger": self.app.trigger_schedule_async,
        }
        if action not in calls:
            raise HTTPException(404)
        try:
            result = await calls[action](name)
        except (ScheduleNotFoundError, ValueError) as exc:
            return self.redirect(request, "/schedules", "error", str(exc))
        if isinstance(result, Job):
            self.app.hooks.emit_jobs([result], None, "dashboard")
            return self.redirect(request, "/schedules", "triggered", result.id)
        return self.redirect(request, "/schedules", f"schedule-{action}d", name)
