"""A Starlette service whose jobs report to Sentry and whose /metrics serves the host's
own metrics and Conveyor's, from one prometheus-client registry.

    pip install 'conveyor[asgi,sentry,prometheus]' uvicorn
    SENTRY_DSN=https://key@o0.ingest.sentry.io/0 uvicorn app:api     # from this folder

POST /feeds {"url": ...} enqueues an import (a URL that is not https fails, and is
reported to Sentry once it runs out of attempts); a periodic job refreshes exchange
rates every 15 minutes (a Sentry Crons monitor); GET /metrics is for Prometheus.
See README.md.
"""

from __future__ import annotations

import os

import sentry_sdk
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from conveyor import Conveyor, WorkerConfig
from conveyor.contrib.asgi import conveyor_lifespan
from conveyor.contrib.prometheus import ConveyorCollector
from conveyor.contrib.sentry import install

if dsn := os.environ.get("SENTRY_DSN"):  # without one the SDK stays off
    sentry_sdk.init(dsn=dsn, environment=os.environ.get("SENTRY_ENVIRONMENT", "development"))

queue = Conveyor(os.environ.get("CONVEYOR_URL") or "sqlite:///observability.db")
install(queue)  # failures -> events tagged conveyor.job_id/task/queue/attempt; cron -> check-ins


class FeedUnavailable(Exception):
    pass


@queue.task(queue="imports", max_attempts=3, backoff=1)  # short backoff: fails for good in seconds
def import_feed(url: str) -> int:
    if not url.startswith("https://"):
        raise FeedUnavailable(f"cannot fetch {url}")
    return len(url)  # stands in for the number of items imported


@queue.periodic(cron="*/15 * * * *")
def refresh_exchange_rates() -> str:
    return "rates refreshed"


# The host's registry: its own metrics, and Conveyor's read from the database at each scrape.
registry = CollectorRegistry()
REQUESTS = Counter("shop_http_requests", "Requests served, by path", ["path"], registry=registry)
registry.register(ConveyorCollector(queue))


async def add_feed(request: Request) -> JSONResponse:
    REQUESTS.labels("/feeds").inc()
    try:
        body = await request.json()
    except ValueError:  # not JSON
        body = None
    url = body.get("url") if isinstance(body, dict) else None
    if not isinstance(url, str):
        return JSONResponse({"detail": "url must be a string"}, status_code=422)
    job = await import_feed.enqueue_async(url)
    return JSONResponse({"job_id": job.id}, status_code=202)


def metrics(request: Request) -> Response:
    # a def endpoint: Starlette runs it on a thread, so a slow scrape blocks no request
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def create_api(worker: bool | WorkerConfig = True) -> Starlette:
    """The service, with a worker in the same process (a `conveyor worker app:queue`
    elsewhere does as well)."""
    return Starlette(routes=[Route("/feeds", add_feed, methods=["POST"]), Route("/metrics", metrics)],
                     lifespan=conveyor_lifespan(queue, worker=worker))


api = create_api()
