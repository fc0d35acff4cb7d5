"""``ConveyorBackend``: Conveyor as a backend of Django's Tasks framework.

    TASKS = {"default": {"BACKEND": "conveyor.contrib.django.ConveyorBackend",
                         "QUEUES": ["default", "mail"], "OPTIONS": {}}}

OPTIONS (all optional; docs/django.md):

* ``DATABASE``: the Django database alias whose transactions enqueues follow
  (default ``"default"``).
* ``URL``: Conveyor's database. Without it, Conveyor lives in the ``DATABASE`` itself
  (PostgreSQL only) and an enqueue is written through Django's own connection, inside the
  current transaction. With it (another database, or SQLite), an enqueue inside a
  transaction is written once that transaction commits (``transaction.on_commit``).
* ``MAX_ATTEMPTS`` (1: a task runs once, as with Django's own backends; more gives
  Conveyor's retries with backoff), ``TIMEOUT`` (seconds, none by default).
* ``CONFIG``: keyword arguments of ``conveyor.ConveyorConfig``.
"""

from __future__ import annotations

import collections
import threading
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.tasks import Task as DjangoTask
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.crypto import get_random_string
from django.utils.json import normalize_json

from conveyor import Conveyor, ConveyorConfig, Job, JobSpec, Task
from conveyor._job import MAX_ID
from conveyor._payload import check_queue_name, check_run_at, check_task_name

from ._results import to_result
from ._runner import DjangoTasks, conveyor_task, find_task

OPTION_NAMES = frozenset({"DATABASE", "URL", "MAX_ATTEMPTS", "TIMEOUT", "CONFIG"})
#: Django connection OPTIONS that are Django's own, not libpq parameters.
_DJANGO_ONLY = frozenset({"isolation_level", "server_side_binding", "assume_role", "pool",
                          "cursor_factory", "context"})
PENDING_PREFIX = "pending-"
#: Pending ids remembered after their commit, per process (the oldest are forgotten).
_PENDING_KEPT = 10_000


def postgres_url(settings_dict: dict[str, Any]) -> str:
    """A ``postgresql://`` URL for a Django PostgreSQL database's settings."""
    user, password = settings_dict.get("USER") or "", settings_dict.get("PASSWORD") or ""
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    host = str(settings_dict.get("HOST") or "")
    host = f"[{host}]" if ":" in host and not host.startswith("/") else quote(host, safe="")
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    extra = {k: str(v) for k, v in (settings_dict.get("OPTIONS") or {}).items()
             if k not in _DJANGO_ONLY and isinstance(v, str | int)}
    query = "?" + urlencode(extra) if extra else ""
    name = quote(str(settings_dict.get("NAME") or ""), safe="")
    return f"postgresql://{auth + '@' if auth else ''}{host}{port}/{name}{query}"


class ConveyorBackend(BaseTaskBackend):
    """Enqueue Django tasks as Conveyor jobs; ``manage.py conveyor_worker`` runs them."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = {str(k).upper(): v for k, v in self.options.items()}
        unknown = sorted(set(options) - OPTION_NAMES)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown keys {unknown}; "
                f"known: {sorted(OPTION_NAMES)}")
        self.database: str = options.get("DATABASE", "default")
        self.url: str | None = options.get("URL")
        self.max_attempts = _positive_int(alias, "MAX_ATTEMPTS", options.get("MAX_ATTEMPTS", 1))
        timeout = options.get("TIMEOUT")
        if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
            raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS']['TIMEOUT'] must be > 0")
        self.timeout: float | None = timeout
        self.config = ConveyorConfig(**options.get("CONFIG", {}))
        self._app: Conveyor | None = None
        self._lock = threading.Lock()
        self._tasks: dict[str, Task[Any, Any]] = {}
        self._pending: collections.OrderedDict[str, int] = collections.OrderedDict()

    # -- the Conveyor app -----------------------------------------------------------------

    @property
    def joins_transaction(self) -> bool:
        """True when jobs are written through Django's connection (no ``URL``)."""
        return self.url is None

    def conveyor_url(self) -> str:
        if self.url is not None:
            return self.url
        connection = connections[self.database]
        if connection.vendor != "postgresql":
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: DATABASES[{self.database!r}] is {connection.vendor}; "
                "Conveyor shares only a PostgreSQL database. Set OPTIONS['URL'] to "
                "Conveyor's own database (e.g. 'sqlite:////path/conveyor.db').")
        return postgres_url(connection.settings_dict)

    @property
    def app(self) -> Conveyor:
        """The Conveyor app of this backend (made on first use; made again if the Django
        database it shares was renamed, as Django's test runner does)."""
        url = self.conveyor_url()
        with self._lock:
            if self._app is None or self._app.url != url:
                if self._app is not None:
                    self._app.close()
                app = Conveyor(url, config=self.config)
                app.registry.tasks = app.tasks = DjangoTasks(app, self)
                self._app, self._tasks = app, {}
            return self._app

    def migrate(self) -> list[str]:
        """Apply Conveyor's pending schema migrations; returns their names."""
        return [m.name for m in self.app.migrate()]

    # -- validation -----------------------------------------------------------------------

    def validate_task(self, task: DjangoTask[Any, Any]) -> None:
        super().validate_task(task)
        try:
            check_queue_name(task.queue_name)
            check_task_name(task.module_path)
            check_run_at(_aware(task.run_after))
        except ValueError as exc:
            raise InvalidTask(str(exc)) from None

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if self.database not in settings.DATABASES:
            return [checks.Error(f"TASKS[{self.alias!r}]: OPTIONS['DATABASE'] is "
                                 f"{self.database!r}, which is not in DATABASES",
                                 id="conveyor.E001")]
        try:
            self.conveyor_url()
        except ImproperlyConfigured as exc:
            return [checks.Error(str(exc), id="conveyor.E002")]
        return []

    # -- enqueue --------------------------------------------------------------------------

    def _conveyor_task(self, task: DjangoTask[Any, Any]) -> Task[Any, Any]:
        app = self.app
        found = self._tasks.get(task.module_path)
        if found is None:  # queue, priority and run_after are given per enqueue
            found = self._tasks[task.module_path] = conveyor_task(app, task, self)
        return found

    def _spec(self, task: DjangoTask[Any, Any], args: list[Any], kwargs: dict[str, Any]
              ) -> JobSpec:
        run_after = _aware(task.run_after)
        meta = {"django_backend": self.alias,
                "run_after": run_after.isoformat() if run_after else None}
        spec = self._conveyor_task(task).options(
            queue=task.queue_name, priority=task.priority, run_at=run_after, meta=meta,
        ).job(*args, **kwargs)
        spec.to_insert(self.config.max_payload_bytes)  # refuse now, not at commit
        return spec

    def enqueue(self, task: DjangoTask[Any, Any], args: Any, kwargs: Any
                ) -> TaskResult[Any, Any]:
        self.validate_task(task)
        args, kwargs = normalize_json(args), normalize_json(kwargs)  # Django's JSON rule
        spec = self._spec(task, args, kwargs)
        connection = connections[self.database]
        if self.joins_transaction:
            connection.ensure_connection()
            job = self.app.enqueue_many([spec], connection=connection.connection)[0]
            return self._enqueued(task, job, args, kwargs)
        if not connection.in_atomic_block:
            return self._enqueued(task, self.app.enqueue_many([spec])[0], args, kwargs)
        result = self._result(task, PENDING_PREFIX + get_random_string(32), args, kwargs, None)
        transaction.on_commit(lambda: self._on_commit(spec, result), using=self.database)
        return result

    def _result(self, task: DjangoTask[Any, Any], result_id: str, args: list[Any],
                kwargs: dict[str, Any], enqueued_at: datetime | None) -> TaskResult[Any, Any]:
        return TaskResult(task=task, id=result_id, status=TaskResultStatus.READY,
                          enqueued_at=enqueued_at, started_at=None, finished_at=None,
                          last_attempted_at=None, args=args, kwargs=kwargs,
                          backend=self.alias, errors=[], worker_ids=[])

    def _enqueued(self, task: DjangoTask[Any, Any], job: Job, args: list[Any],
                  kwargs: dict[str, Any]) -> TaskResult[Any, Any]:
        result = self._result(task, str(job.id), args, kwargs, job.created_at)
        task_enqueued.send(type(self), task_result=result)
        return result

    def _on_commit(self, spec: JobSpec, result: TaskResult[Any, Any]) -> None:
        """Write the job once Django's transaction committed; the result the caller
        holds takes the job's id, and its pending id keeps pointing at the job."""
        job = self.app.enqueue_many([spec])[0]
        with self._lock:
            self._pending[result.id] = job.id
            while len(self._pending) > _PENDING_KEPT:
                self._pending.popitem(last=False)
        object.__setattr__(result, "id", str(job.id))
        object.__setattr__(result, "enqueued_at", job.created_at)
        task_enqueued.send(type(self), task_result=result)

    # -- results --------------------------------------------------------------------------

    def _job_id(self, result_id: str) -> int:
        text = str(result_id)
        if text.startswith(PENDING_PREFIX):
            with self._lock:
                found = self._pending.get(text)
            if found is None:
                raise TaskResultDoesNotExist(
                    f"{text}: its transaction has not committed (or rolled back), or it "
                    "was enqueued by another process")
            return found
        if not text.isascii() or not text.isdigit() or not 0 < int(text) <= MAX_ID:
            raise TaskResultDoesNotExist(text)
        return int(text)

    def task_of(self, task: DjangoTask[Any, Any], job: Job) -> DjangoTask[Any, Any]:
        """``task`` with the options ``job`` was enqueued with (queue, priority,
        run_after, this backend), as far as they are still valid for it."""
        run_after = (job.meta or {}).get("run_after")
        try:
            return task.using(
                queue_name=job.queue, backend=self.alias,
                priority=max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, job.priority)),
                run_after=datetime.fromisoformat(run_after) if isinstance(run_after, str)
                else None)
        except (InvalidTask, ValueError):  # e.g. a queue since removed from QUEUES
            return task

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        job = self.app.get_job(self._job_id(result_id))
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        task = find_task(job.task)
        if task is None:
            raise TaskResultDoesNotExist(f"{result_id}: job {job.id} runs {job.task!r}, "
                                         "which is not a Django task")
        return to_result(self.task_of(task, job), job, self.alias)

    def close(self) -> None:
        """Close the Conveyor app's connections (tests, shutdown)."""
        with self._lock:
            app, self._app = self._app, None
        if app is not None:
            app.close()


def _aware(value: datetime | None) -> datetime | None:
    """Conveyor wants an aware time; with ``USE_TZ = False`` Django's are local."""
    if value is None or timezone.is_aware(value):
        return value
    return timezone.make_aware(value, timezone.get_default_timezone())


def _positive_int(alias: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(f"TASKS[{alias!r}]['OPTIONS'][{name!r}] must be an int >= 1")
    return value
