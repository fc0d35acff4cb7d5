"""A small FastAPI service that hands slow work to Conveyor.

    pip install 'conveyor[fastapi]' uvicorn
    DASHBOARD_PASSWORD=a-long-password uvicorn app:api      # from this folder

POST /signups enqueues from an async handler, POST /reports from a sync one; the jobs
run on the worker this process starts beside the web server; the dashboard is at
/conveyor behind HTTP Basic (user "admin", DASHBOARD_PASSWORD). See README.md.
"""

import contextlib
import os
import secrets
from collections.abc import AsyncIterator
from typing import Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBasic
from pydantic import BaseModel, Field

from conveyor import Conveyor, ConveyorConfig, PayloadTooLargeError, WorkerConfig
from conveyor.contrib.asgi import conveyor_lifespan, mount_dashboard

# CONVEYOR_URL=postgresql://... to scale out (run `conveyor migrate` once first).
queue = Conveyor(os.environ.get("CONVEYOR_URL") or "sqlite:///example.db",
                 config=ConveyorConfig(max_payload_bytes=64 * 1024))


@queue.task(queue="mail", max_attempts=5)
async def send_welcome(email: str, name: str) -> str:
    return f"welcome mail sent to {name} <{email}>"


@queue.task
def build_report(kind: str, note: str) -> dict[str, object]:
    return {"kind": kind, "note_chars": len(note)}


class Signup(BaseModel):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)
    name: str = Field(min_length=1, max_length=100)


class ReportRequest(BaseModel):
    kind: Literal["daily", "weekly"]
    note: str = ""


@contextlib.asynccontextmanager
async def service_lifespan(api: FastAPI) -> AsyncIterator[dict[str, object]]:
    """The service's own startup and shutdown; Conveyor is open while it runs."""
    yield {"service": "example"}


def create_api(app: Conveyor = queue, *, worker: bool | WorkerConfig = True,
               dashboard_password: str | None = None) -> FastAPI:
    api = FastAPI(lifespan=conveyor_lifespan(app, worker=worker, lifespan=service_lifespan))

    @api.post("/signups", status_code=202)
    async def signup(body: Signup) -> dict[str, int]:
        # async handler: the async API, on the server's loop
        job = await send_welcome.enqueue_async(body.email, body.name)
        return {"job_id": job.id}

    @api.post("/reports", status_code=202)
    def report(body: ReportRequest) -> dict[str, int]:
        # sync handler (FastAPI runs it on a thread): the sync API
        job = build_report.enqueue(body.kind, body.note)
        return {"job_id": job.id}

    @api.get("/jobs/{job_id}")
    async def job_state(job_id: int) -> dict[str, object]:
        if job_id < 1 or (job := await app.get_job_async(job_id)) is None:
            raise HTTPException(404, "no such job")
        return {"id": job.id, "state": job.state.value, "result": job.result}

    @api.exception_handler(PayloadTooLargeError)
    async def too_large(request: Request, exc: PayloadTooLargeError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=413)

    password = dashboard_password or os.environ.get("DASHBOARD_PASSWORD", "")
    basic = HTTPBasic(realm="Conveyor")

    async def staff_only(request: Request) -> bool:
        # FastAPI's own security scheme: no credentials -> 401 with WWW-Authenticate
        credentials = await basic(request)
        assert credentials is not None
        user_ok = secrets.compare_digest(credentials.username.encode(), b"admin")
        password_ok = secrets.compare_digest(credentials.password.encode(), password.encode())
        if not (password and user_ok and password_ok):
            raise HTTPException(401, "wrong credentials", {"WWW-Authenticate": "Basic"})
        return True

    mount_dashboard(api, "/conveyor", app, authorize=staff_only)
    return api


api = create_api()
