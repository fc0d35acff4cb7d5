"""The dashboard's pages (GET), plus ``/healthz`` and ``/metrics``."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .._storage import JobCountCappedParams, JobSearchParams
from . import _data
from ._base import DashboardBase, safe_path
from ._charts import Line, bars, lines
from ._format import percent, seconds
from ._query import PAGE_SIZES, STATE_CHOICES, JobQuery, positive_int


class Pages(DashboardBase):
    async def overview(self, request: Request) -> Response:
        view = await _data.overview(self.app)
        s = view.series
        charts = {
            "throughput": bars(s.minutes, [Line("completed", s.completed, "s-completed"),
                                           Line("failed", s.failed, "s-failed")],
                               "Jobs finished per minute"),
            "failure": lines(s.minutes, [Line("failure rate", s.failure_rate, "s-failed")],
                             "Failure rate per minute", percent),
            "latency": lines(s.minutes, [Line("p50", s.p50, "s-p50"), Line("p95", s.p95, "s-p95")],
                             "Enqueue-to-start latency", seconds),
            "depth": lines(s.minutes, [Line(name, s.depth[name], f"s-{name}")
                                       for name in ("available", "scheduled", "retryable",
                                                    "running")], "Queue depth"),
        }
        return self.render(request, "overview.html", "/", view=view, charts=charts)

    async def queues(self, request: Request) -> Response:
        return self.render(request, "queues.html", "/queues", queues=await _data.queues(self.app))

    async def jobs(self, request: Request) -> Response:
        params = request.query_params
        query = JobQuery.parse(params)
        limit = positive_int(params.get("limit"), 50) or 50
        limit = limit if limit in PAGE_SIZES else 50
        page = await _data.jobs_page(
            self.app, query.to_filter(), self.settings.redact, limit=limit,
            before=positive_int(params.get("before")), after=positive_int(params.get("after")),
            cap=self.settings.count_cap)
        return self.render(request, "jobs.html", "/jobs", page=page, query=query, limit=limit,
                           states=STATE_CHOICES, sizes=PAGE_SIZES, text_scan=_data.TEXT_SCAN)

    async def job(self, request: Request) -> Response:
        job_id = positive_int(request.path_params["job_id"])
        detail = await _data.job_detail(self.app, job_id, self.settings.redact) if job_id else None
        if detail is None:
            raise HTTPException(404, f"no job with id {request.path_params['job_id']}")
        return self.render(request, "job.html", "/jobs", d=detail)

    async def failures(self, request: Request) -> Response:
        query = JobQuery.parse(request.query_params)
        groups = await _data.failure_groups(self.app, query.queue or None, query.task or None)
        return self.render(request, "failures.html", "/failures", groups=groups, query=query,
                           JobQuery=JobQuery)

    async def bulk(self, request: Request) -> Response:
        """The confirmation page of a bulk action: what matches, how many, the cap."""
        action = request.query_params.get("action", "")
        if action not in ("retry", "discard"):
            raise HTTPException(400, "action must be retry or discard")
        query = JobQuery.parse(request.query_params)
        storage = await self.app.storage()
        cap = self.settings.bulk_cap
        flt = await _data.bounded(self.app, query.to_filter())
        matching = await storage.job_count_capped(JobCountCappedParams(flt, cap + 1))
        sample = await storage.job_search(JobSearchParams(flt, limit=10))
        return self.render(request, "confirm.html", "/failures", action=action, query=query,
                           count=min(matching, cap), over=matching > cap, cap=cap,
                           sample=[self.settings.redact(j) for j in sample], live=False,
                           back=safe_path(request.query_params.get("back", "/failures")))

    async def schedules(self, request: Request) -> Response:
        return self.render(request, "schedules.html", "/schedules",
                           schedules=await _data.schedules(self.app))

    async def workers(self, request: Request) -> Response:
        return self.render(request, "workers.html", "/workers",
                           nodes=await _data.workers(self.app))

    async def healthz(self, request: Request) -> Response:
        """200 when the database answers and its schema is current, else 503."""
        health = await _data.health(self.app)
        if health.ok:
            body = {"status": "ok", "database": "ok", "schema": health.version}
        elif not health.reachable:
            body = {"status": "unhealthy", "database": "unreachable"}
        else:
            body = {"status": "unhealthy", "database": "ok",
                    "schema": f"at {health.version}, expected {health.latest}"}
        return JSONResponse(body, status_code=200 if health.ok else 503)

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(await _data.prometheus(self.app),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")
