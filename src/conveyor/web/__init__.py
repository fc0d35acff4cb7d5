"""Mission Control: Conveyor's web dashboard, ``/healthz`` and Prometheus ``/metrics``.

Needs the ``web`` extra (``pip install 'conveyor[web]'``): Starlette, Jinja2, uvicorn.
This package face imports neither (``conveyor dashboard`` reads its settings and
environment names here without them); ``create_app`` does. Run it with
``conveyor dashboard``, or mount it in your own ASGI app::

    from conveyor.web import BasicAuth, create_app

    dashboard = create_app(app, auth=BasicAuth("ops", os.environ["OPS_PASSWORD"]))
    fastapi_app.mount("/jobs", dashboard)

or let your own users decide, with an access hook::

    def access(request) -> Role:      # "write", "read" or "deny"
        user = request.scope.get("user")
        return "write" if user and user.is_admin else "deny"

    fastapi_app.mount("/jobs", create_app(app, access=access))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from .._redact import Redactor, redact_secrets, show_everything
from ._settings import (
    DEFAULT_SETTINGS,
    ENV_ALLOWED_HOSTS,
    ENV_API_READONLY_TOKEN,
    ENV_API_TOKEN,
    ENV_PASSWORD,
    ENV_SECRET,
    ENV_TOKEN,
    ENV_TRUSTED_ORIGINS,
    ENV_USER,
    LOOPBACK_HOSTS,
    AccessHook,
    ApiToken,
    Auth,
    BasicAuth,
    Role,
    Settings,
    TokenAuth,
    allowed_hosts_from_env,
    api_tokens_from_env,
    as_api_tokens,
    auth_from_env,
    is_loopback,
    secret_from_env,
    split_names,
    trusted_origins_from_env,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from .._app import Conveyor


_D = DEFAULT_SETTINGS


def create_app(
    app: Conveyor,
    *,
    auth: Auth | None = _D.auth,
    read_only: bool = _D.read_only,
    access: AccessHook | None = _D.access,
    redact: Redactor = _D.redact,
    poll_interval: float = _D.poll_interval,
    bulk_cap: int = _D.bulk_cap,
    count_cap: int = _D.count_cap,
    secret: bytes | None = None,
    title: str = _D.title,
    allowed_hosts: Iterable[str] | None = None,
    trusted_origins: Iterable[str] | None = None,
    timeout: float = _D.timeout,
    auth_failure_delay: float = _D.auth_failure_delay,
    source: str = _D.source,
    api_tokens: str | ApiToken | Iterable[str | ApiToken] | None = None,
) -> Starlette:
    """The dashboard of ``app`` as an ASGI app (Starlette).

    ``auth``: ``BasicAuth`` or ``TokenAuth`` (``auth_from_env()`` reads them from the
    environment); without it, protect the mount yourself or use ``access``.
    ``read_only``: no actions at all. ``access(request)``: "write", "read" or "deny" per
    request. ``redact(job)``: the job as it may be shown (secrets masked by default).
    ``bulk_cap``: most jobs one bulk action changes; ``count_cap``: where counts of
    matching jobs stop ("10,000+"), so a filter never counts a whole table. ``secret``: signs CSRF tokens
    (give the same one to every replica behind a load balancer).
    ``allowed_hosts``: the ``Host`` names served besides localhost, 127.0.0.1 and
    [::1] (any port; ``"*.example.com"`` for subdomains, ``"*"`` for any): other Hosts
    get 421, against DNS rebinding. Default: ``CONVEYOR_DASHBOARD_ALLOWED_HOSTS``
    (comma-separated), else none. ``trusted_origins``: origins such as
    ``"https://ops.example.com"`` whose actions are accepted although the Host the
    dashboard sees differs (a reverse proxy rewriting it); default
    ``CONVEYOR_DASHBOARD_TRUSTED_ORIGINS``. ``timeout``: seconds a request may wait on
    the database before it gets a "database unreachable" page (503).
    ``auth_failure_delay``: seconds a wrong password waits before its 401.
    ``source``: who acts, as the state-change events of its actions name it.
    ``api_tokens``: bearer tokens of the HTTP API under ``/api/v1/`` (a string, or
    ``ApiToken(token, read_only=True)``s); default ``CONVEYOR_API_TOKEN`` and
    ``CONVEYOR_API_READONLY_TOKEN``; none: the API answers 404 (docs/http-api.md).
    See docs/security.md.

    Example: ``uvicorn.run(create_app(app, read_only=True), host="127.0.0.1")``
    """
    from ._asgi import build

    settings = Settings(auth=auth, read_only=read_only, access=access, redact=redact,
                        poll_interval=poll_interval, bulk_cap=bulk_cap, count_cap=count_cap,
                        title=title,
                        allowed_hosts=tuple(allowed_hosts_from_env() if allowed_hosts is None
                                            else allowed_hosts),
                        trusted_origins=tuple(trusted_origins_from_env() if trusted_origins is None
                                              else trusted_origins),
                        timeout=timeout, auth_failure_delay=auth_failure_delay,
                        source=source,
                        api_tokens=(api_tokens_from_env() if api_tokens is None
                                    else as_api_tokens(api_tokens)))
    if secret:
        settings = dataclasses.replace(settings, secret=secret)
    return build(app, settings)


def route_path(scope: MutableMapping[str, Any]) -> str:
    """The path of an ASGI request inside the dashboard, without the prefix it is
    mounted at: what its public paths (``/healthz``) are matched against, also by a
    host app's own gate (``conveyor.contrib.asgi``)."""
    from ._security import route_path as inside

    return inside(scope)


__all__ = [
    "DEFAULT_SETTINGS",
    "ENV_ALLOWED_HOSTS",
    "ENV_API_READONLY_TOKEN",
    "ENV_API_TOKEN",
    "ENV_PASSWORD",
    "ENV_SECRET",
    "ENV_TOKEN",
    "ENV_TRUSTED_ORIGINS",
    "ENV_USER",
    "LOOPBACK_HOSTS",
    "AccessHook",
    "ApiToken",
    "Auth",
    "BasicAuth",
    "Redactor",
    "Role",
    "TokenAuth",
    "allowed_hosts_from_env",
    "api_tokens_from_env",
    "auth_from_env",
    "create_app",
    "is_loopback",
    "redact_secrets",
    "route_path",
    "secret_from_env",
    "show_everything",
    "split_names",
    "trusted_origins_from_env",
]
