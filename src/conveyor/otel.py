"""OpenTelemetry: carry the trace context from enqueue to execution.

Example::

    from conveyor.otel import instrument

    instrument(app)            # once, before enqueueing or starting workers

Every enqueue then records a ``<task> publish`` span (PRODUCER) in the caller's trace
and stores its context in the job's ``meta["otel"]`` (W3C ``traceparent`` /
``tracestate``, through the globally configured propagator). Every execution runs in a
``<task> process`` span (CONSUMER) whose parent is that context, on whichever worker
and however much later it runs; the handler sees it as the current span, also in sync
handlers. Needs only ``opentelemetry-api`` (``pip install 'conveyor[otel]'``); an SDK
and an exporter are the application's choice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from . import __version__
from ._context import JobContext
from ._errors import Cancel, Snooze

if TYPE_CHECKING:
    from ._app import Conveyor

#: Where a job's trace context lives in its meta.
META_KEY = "otel"


def instrument(app: Conveyor, tracer_provider: Any = None) -> None:
    """Propagate trace context through ``app``'s jobs (idempotent per app)."""
    try:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
    except ImportError:
        raise ImportError(
            "conveyor.otel needs opentelemetry-api: pip install 'conveyor[otel]'") from None
    if "otel" in app.hooks.integrations:
        return
    tracer = trace.get_tracer("conveyor", __version__, tracer_provider=tracer_provider)

    def inject(task: str, meta: dict[str, Any]) -> None:
        attributes = {"messaging.system": "conveyor", "messaging.operation": "publish",
                      "conveyor.task": task}
        with tracer.start_as_current_span(f"{task} publish", kind=SpanKind.PRODUCER,
                                          attributes=attributes):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
        if carrier:
            meta[META_KEY] = carrier

    async def middleware(job: JobContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
        carrier = job.job.meta.get(META_KEY) if isinstance(job.job.meta, dict) else None
        parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
        attributes: dict[str, str | int] = {
            "messaging.system": "conveyor", "messaging.operation": "process",
            "messaging.destination.name": job.queue, "messaging.message.id": str(job.id),
            "conveyor.task": job.task, "conveyor.attempt": job.attempt}
        with tracer.start_as_current_span(f"{job.task} process", context=parent,
                                          kind=SpanKind.CONSUMER, attributes=attributes,
                                          record_exception=False,
                                          set_status_on_exception=False) as span:
            try:
                return await call_next()
            except (Snooze, Cancel) as signal:  # outcomes the handler chose, not errors
                span.add_event(f"conveyor.{type(signal).__name__.lower()}")
                raise
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise

    app.hooks.add_enqueue_hook(inject)
    app.add_middleware(middleware)
    app.hooks.integrations.add("otel")


__all__ = ["META_KEY", "instrument"]
