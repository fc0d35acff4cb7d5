"""The Conveyor app of each ConveyorBackend, by its TASKS alias, as an APP_PATH:
``conveyor worker conveyor.contrib.django.worker_apps:default`` (what
``manage.py conveyor_worker`` runs, and what each child of ``--processes`` imports).
Importing this module sets Django up (``DJANGO_SETTINGS_MODULE`` must be set).
"""

from __future__ import annotations

import django
from django.apps import apps

from conveyor import Conveyor

if not apps.ready:
    django.setup()

MODULE = __name__


def app_path(alias: str) -> str:
    return f"{MODULE}:{alias}"


def __getattr__(alias: str) -> Conveyor:
    from django.tasks import task_backends
    from django.tasks.exceptions import InvalidTaskBackend

    from .backend import ConveyorBackend

    if alias.startswith("__"):
        raise AttributeError(alias)
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend:
        raise AttributeError(f"no task backend {alias!r} in TASKS") from None
    if not isinstance(backend, ConveyorBackend):
        raise AttributeError(f"TASKS[{alias!r}] is a {type(backend).__name__}, "
                             "not conveyor.contrib.django.ConveyorBackend")
    return backend.app
