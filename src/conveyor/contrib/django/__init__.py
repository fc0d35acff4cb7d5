"""Conveyor for Django: a backend of Django's Tasks framework (``django.tasks``, Django 6),
the ``conveyor_worker`` management command, the schema applied by ``manage.py migrate``
and the dashboard behind Django's staff login. Needs ``pip install 'conveyor[django]'``.

    INSTALLED_APPS = [..., "conveyor.contrib.django"]
    TASKS = {"default": {"BACKEND": "conveyor.contrib.django.ConveyorBackend"}}

See docs/django.md.
"""

from .backend import ConveyorBackend

__all__ = ["ConveyorBackend"]
