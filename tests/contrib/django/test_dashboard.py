"""The dashboard in Django's URLs: staff only, static files, and actions that pass the
dashboard's own CSRF and Origin checks (Django's CSRF middleware is on, and enforced)."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest

pytest.importorskip("django", reason="Django 6 needs Python >= 3.12: tests/contrib/django "
                    "run in .venv-django (make test-django)")

from typing import Any

from django.test import Client

from .conftest import Project

QUEUE = "dashboard-test"


def user(name: str, *, staff: bool) -> Any:
    from django.contrib.auth.models import User

    found, _ = User.objects.get_or_create(username=name, defaults={"is_staff": staff})
    return found


def staff_client() -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user("ops", staff=True))
    return client


def csrf_of(client: Client) -> str:
    page = client.get("/ops/jobs/queues")
    assert page.status_code == 200
    found = re.search(r'name="csrf_token" (?:value|content)="([0-9a-f]{64})"', page.content.decode())
    assert found is not None
    return found.group(1)


def post_form(client: Client, url: str, form: dict[str, str], **headers: Any) -> Any:
    """POST as a browser posts the dashboard's forms (urlencoded)."""
    return client.post(url, urlencode(form), content_type="application/x-www-form-urlencoded",
                       **headers)


def paused(backends: Any) -> bool:
    return any(q.name == QUEUE and q.paused for q in backends["default"].app.list_queues())


def test_anonymous_visitors_are_sent_to_the_login(project: Project) -> None:
    response = Client().get("/ops/jobs/")
    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/ops/jobs/"


def test_signed_in_users_who_are_not_staff_are_refused(project: Project) -> None:
    client = Client()
    client.force_login(user("customer", staff=False))
    assert client.get("/ops/jobs/").status_code == 403
    assert client.get("/ops/jobs/static/app.css").status_code == 403


def test_staff_see_the_dashboard_and_its_static_files(project: Project) -> None:
    client = staff_client()
    page = client.get("/ops/jobs/")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    assert b'href="/ops/jobs/static/app.css"' in page.content  # links under the mount
    assert "frame-ancestors 'none'" in page["Content-Security-Policy"]
    cookie = client.cookies["conveyor_csrf"]
    assert cookie["path"] == "/ops/jobs" and cookie["httponly"] and cookie["samesite"] == "Strict"
    css = client.get("/ops/jobs/static/app.css")
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")
    assert client.get("/ops/jobs/jobs?state=completed").status_code == 200


def test_an_action_with_the_dashboards_csrf_token_works(project: Project, backends: Any) -> None:
    client = staff_client()
    token = csrf_of(client)
    try:
        done = post_form(client, f"/ops/jobs/queues/{QUEUE}/pause", {"csrf_token": token})
        assert done.status_code == 303 and done["Location"].startswith("/ops/jobs/queues")
        assert paused(backends)
    finally:
        backends["default"].app.resume_queue(QUEUE)


@pytest.mark.parametrize("headers", [
    {},  # no token at all
    {"HTTP_ORIGIN": "https://evil.example"},
    {"HTTP_SEC_FETCH_SITE": "cross-site"},
])
def test_actions_without_the_token_or_from_another_site_are_refused(
        project: Project, backends: Any, headers: dict[str, str]) -> None:
    client = staff_client()
    token = csrf_of(client)
    form = {"confirm": "1"} if not headers else {"csrf_token": token}
    refused = post_form(client, f"/ops/jobs/queues/{QUEUE}/pause", form, **headers)
    assert refused.status_code == 403
    assert not paused(backends)


def test_hosts_not_allowed_by_django_are_refused(project: Project) -> None:
    client = staff_client()
    assert client.get("/ops/jobs/", HTTP_HOST="evil.example").status_code == 400


def test_a_read_role_cannot_act(project: Project, backends: Any) -> None:
    from asgiref.sync import async_to_sync
    from django.test import RequestFactory

    from conveyor.contrib.django.dashboard import dashboard_urls

    view = dashboard_urls(role=lambda u: "read")[0].callback
    request = RequestFactory().post(f"/ro/queues/{QUEUE}/pause", "csrf_token=x",
                                    content_type="application/x-www-form-urlencoded")
    staff = user("ops", staff=True)

    async def auser() -> Any:
        return staff

    request.auser = auser
    response = async_to_sync(view)(request, path=f"queues/{QUEUE}/pause")
    assert response.status_code == 403 and b"read-only" in response.content
    assert not paused(backends)


def test_served_over_asgi_too(project: Project, backends: Any) -> None:
    """Django's ASGI handler (AsyncClient) runs the view on the caller's loop; the
    dashboard still answers from its own loop, actions included."""
    import asyncio

    from django.test import AsyncClient

    async def main() -> tuple[int, int, int]:
        client = AsyncClient(enforce_csrf_checks=True)
        await client.aforce_login(await asyncio.to_thread(user, "ops", staff=True))
        page = await client.get("/ops/jobs/queues")
        found = re.search(r'name="csrf_token" (?:value|content)="([0-9a-f]{64})"',
                          page.content.decode())
        assert found is not None
        done = await client.post(f"/ops/jobs/queues/{QUEUE}/pause",
                                 urlencode({"csrf_token": found.group(1)}),
                                 content_type="application/x-www-form-urlencoded")
        css = await client.get("/ops/jobs/static/app.js")
        return page.status_code, done.status_code, css.status_code

    try:
        assert asyncio.run(main()) == (200, 303, 200)
        assert paused(backends)
    finally:
        backends["default"].app.resume_queue(QUEUE)


def test_an_action_through_django_names_django_in_its_event(project: Project,
                                                            backends: Any) -> None:
    """The mounted dashboard acts as ``"django"`` (``create_app(source=...)``), so a
    listener tells its actions from the standalone dashboard's and the CLI's."""
    from shop.tasks import whoami

    app = backends["default"].app
    seen: list[Any] = []
    app.on_state_change(seen.append)
    try:
        job_id = int(whoami.enqueue("cancel me").id)
        seen.clear()
        client = staff_client()
        done = post_form(client, f"/ops/jobs/jobs/{job_id}/cancel",
                         {"csrf_token": csrf_of(client)})
        assert done.status_code == 303
        assert [(c.job_id, c.state.value, c.source) for c in seen] == [
            (job_id, "cancelled", "django")]
    finally:
        app.hooks.listeners.remove(seen.append)
