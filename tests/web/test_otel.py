"""OpenTelemetry: the trace that enqueues a job continues in the job's execution."""

from __future__ import annotations

import asyncio
from typing import Any

from conveyor import Conveyor
from conveyor.otel import META_KEY, instrument

from .._require import import_or_skip
from .._runtime_util import all_final, run_worker_until

sdk_trace = import_or_skip("opentelemetry.sdk.trace", "opentelemetry-sdk missing (the dev extra)")
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode, get_current_span  # noqa: E402


def test_trace_context_flows_from_enqueue_to_execution(app: Conveyor) -> None:
    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrument(app, tracer_provider=provider)
    instrument(app, tracer_provider=provider)  # a second call changes nothing
    seen: dict[str, Any] = {}

    @app.task
    def work(n: int) -> None:  # sync: runs in a thread, still inside the span
        seen[f"work{n}"] = get_current_span().get_span_context()

    @app.task(max_attempts=1)
    async def boom() -> None:
        raise RuntimeError("kaput")

    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("http request") as request:
        job = work.enqueue(1)
    orphan = boom.enqueue()
    assert set(job.meta[META_KEY]) >= {"traceparent"}
    asyncio.run(_drain(app))

    spans = {s.name: s for s in exporter.get_finished_spans()}
    publish, process = spans["work publish"], spans["work process"]
    trace_id = request.get_span_context().trace_id
    assert publish.kind == SpanKind.PRODUCER and process.kind == SpanKind.CONSUMER
    assert publish.context.trace_id == process.context.trace_id == trace_id
    assert publish.parent is not None and publish.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None and process.parent.span_id == publish.context.span_id
    assert seen["work1"].span_id == process.context.span_id
    assert (process.attributes or {}).get("messaging.message.id") == str(job.id)
    failed = spans["boom process"]
    assert failed.status.status_code == StatusCode.ERROR and failed.events[0].name == "exception"
    assert failed.context.trace_id != trace_id  # enqueued outside any trace: a new one
    assert orphan.meta[META_KEY]["traceparent"].split("-")[1] == format(failed.context.trace_id, "032x")


async def _drain(app: Conveyor) -> None:
    try:
        await run_worker_until(app, all_final(app))
    finally:
        await app.close_async()
