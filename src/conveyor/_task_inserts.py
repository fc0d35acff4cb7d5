"""A batch of ``JobSpec`` to ``JobInsert``: jobs of one task and one options object
share every field but their arguments (``task.job(...)`` in a loop), so the batch is
built from a template per group, its arguments encoded a run at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _payload
from ._storage import InsertRun, JobInsert, insert_with_arguments
from ._task import JobSpec, Task
from ._task_options import EnqueueOptions


def to_inserts(specs: Sequence[JobSpec], max_payload_bytes: int,
               now: float | None = None) -> list[JobInsert]:
    """``[spec.to_insert(...) for spec in specs]``, cheaper for a batch (``to_runs``)."""
    if len(specs) == 1:  # task.enqueue(): shares with the task's earlier enqueues
        return [_single_insert(specs[0], max_payload_bytes, now)]
    return [job for run in to_runs(specs, max_payload_bytes, now) for job in run.inserts()]


def to_runs(specs: Sequence[JobSpec], max_payload_bytes: int,
            now: float | None = None) -> list[InsertRun]:
    """The inserts of ``specs`` as runs: jobs of one task built with one options object
    (``task.job(...)`` in a loop) share every field but their arguments, so each one
    after the first encodes only those, a run of them at once (``_Templated``), and
    they stay one run (``InsertRun``) for whoever writes them."""
    templates: dict[tuple[int, int], JobInsert | None] = {}
    out: list[InsertRun] = []
    append = out.append
    task: Task[Any, Any] | None = None
    options: EnqueueOptions | None = None
    run = _Templated(out, max_payload_bytes)
    pending = run.pending
    for spec in specs:
        if spec.task is not task or spec.options is not options:  # another group
            run.flush()
            task, options = spec.task, spec.options
            key = (id(task), id(options))  # both outlive the loop: ids stay unique
            if key not in templates:
                insert = spec.to_insert(max_payload_bytes, now)
                templates[key] = insert if spec._shares_template() else None
                run.template = templates[key]
                append(InsertRun.of(insert))
                continue
            run.template = templates[key]
        if run.template is None:  # unique, sealed or keyed jobs: each one in full
            append(InsertRun.of(spec.to_insert(max_payload_bytes, now)))
        else:
            pending.append(spec)
    run.flush()
    return out


class _Templated:
    """A run of jobs that differ from their ``template`` only in their arguments,
    encoded together when the run ends (``flush``): calls without keyword arguments
    are checked once for the whole run (``_payload.encode_positional_many``) and
    stay one ``InsertRun``."""

    __slots__ = ("max_bytes", "out", "pending", "template")

    def __init__(self, out: list[InsertRun], max_bytes: int) -> None:
        self.out, self.max_bytes = out, max_bytes
        self.template: JobInsert | None = None
        self.pending: list[JobSpec] = []

    def flush(self) -> None:
        pending, template = self.pending, self.template
        if not pending or template is None:
            return
        like, task, size = insert_with_arguments, pending[0].task, self.max_bytes
        texts = (None if any(s.kwargs for s in pending) else
                 _payload.encode_positional_many([s.args for s in pending], size, task.codec))
        if texts is not None:
            self.out.append(InsertRun(like(template, texts[0], "{}"), texts))
        else:
            encode, name, of = _payload.encode_arguments, template.task, InsertRun.of
            self.out += [of(like(template, *encode(name, s.args, s.kwargs, size, task.codec,
                                                   task.positional))) for s in pending]
        pending.clear()


def _single_insert(spec: JobSpec, max_payload_bytes: int, now: float | None) -> JobInsert:
    """``spec.to_insert(...)`` of a lone job (``task.enqueue``): a job of the task's own
    options is its task's template with other arguments, as in ``to_inserts``; the
    template is kept on the task (its options and defaults are frozen)."""
    task = spec.task
    if spec.options is not task._opts or not spec._shares_template():
        return spec.to_insert(max_payload_bytes, now)
    kept = task._template
    if kept is None or kept[0] != max_payload_bytes:
        insert = spec.to_insert(max_payload_bytes, now)
        task._template = (max_payload_bytes, insert)
        return insert
    template = kept[1]
    return insert_with_arguments(template, *_payload.encode_arguments(
        template.task, spec.args, spec.kwargs, max_payload_bytes, task.codec, task.positional))
