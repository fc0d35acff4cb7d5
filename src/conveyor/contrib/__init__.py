"""Integrations with other tools and frameworks, each in its own module behind its own
extra. Nothing is imported here, so ``import conveyor`` never needs them.

* ``conveyor.contrib.asgi`` (``conveyor[asgi]`` / ``conveyor[fastapi]``): a Starlette/FastAPI
  lifespan with an optional in-process worker, and the dashboard mounted behind the host
  app's authentication.
* ``conveyor.contrib.sentry`` (``conveyor[sentry]``): failures as Sentry events, Crons
  check-ins for periodic jobs.
* ``conveyor.contrib.prometheus`` (``conveyor[prometheus]``): a collector for the host
  application's own registry.
* ``conveyor.contrib.django`` (``conveyor[django]``, Python >= 3.12): Django 6's Tasks
  backend, ``manage.py conveyor_worker``, the dashboard behind Django's staff login.
* SQLAlchemy sessions and connections need no module: pass them as ``connection=``
  (``conveyor[sqlalchemy]``; see docs/sqlalchemy.md).
"""
