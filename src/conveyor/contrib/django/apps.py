"""The Django app ``conveyor.contrib.django``: its migration creates Conveyor's schema,
and every ``manage.py migrate`` applies the schema migrations of a newer Conveyor."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def migrate_conveyor(using: str = "default", **kwargs: Any) -> None:
    """Run Conveyor's own migrations for every ConveyorBackend whose ``DATABASE`` is
    the Django database being migrated (``using``)."""
    from django.tasks import task_backends

    from .backend import ConveyorBackend

    for backend in task_backends.all():
        if isinstance(backend, ConveyorBackend) and backend.database == using:
            backend.migrate()


class ConveyorAppConfig(AppConfig):
    name = "conveyor.contrib.django"
    label = "conveyor"
    verbose_name = "Conveyor"

    def ready(self) -> None:
        post_migrate.connect(migrate_conveyor, sender=self,
                             dispatch_uid="conveyor.contrib.django.migrate")
