"""The HTTP API under ``/api/v1/``: enqueue and inspect jobs, act on jobs and queues,
from any language, with bearer tokens (docs/http-api.md).

Served by the dashboard's ASGI app (``conveyor.web.create_app``) when API tokens are
set. One table (``_routes.ENDPOINTS``) names every route with its parameters, body and
answers: the handlers parse with those definitions and ``/api/v1/openapi.json`` is
generated from them. This face imports no Starlette: ``conveyor.web.api._routes`` does.
"""
