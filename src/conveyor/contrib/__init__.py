"""Integrations with other frameworks, each in its own module and optional extra.

``conveyor.contrib.asgi`` (``conveyor[asgi]`` / ``conveyor[fastapi]``): a Starlette/FastAPI
lifespan with an optional in-process worker, and the dashboard mounted behind the host
app's authentication. SQLAlchemy sessions and connections need no module: pass them as
``connection=`` (``conveyor[sqlalchemy]``; see docs/sqlalchemy.md).
"""
