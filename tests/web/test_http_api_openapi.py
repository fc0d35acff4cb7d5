"""``/api/v1/openapi.json``: a valid OpenAPI 3.1 document (checked by
openapi-spec-validator, in the dev extra for this test), generated from the routes the
API serves: every route served is in it and every operation in it is served; and what
the handlers answer matches the schemas it gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.routing import Mount, Route

from conveyor import Conveyor
from conveyor.web import create_app

from ._api import auth, client_for, make_app

openapi_spec_validator = pytest.importorskip(
    "openapi_spec_validator", reason="pip install -e '.[dev]' (openapi-spec-validator)")


@pytest.fixture
def api(tmp_path: Any) -> Iterator[Any]:
    app, _ = make_app(f"sqlite:///{tmp_path / 'jobs.db'}")
    app.migrate()
    try:
        with client_for(app) as client:
            yield client
    finally:
        app.close()


def document(client: Any) -> dict[str, Any]:
    response = client.get("/api/v1/openapi.json", headers=auth())
    assert response.status_code == 200
    doc: dict[str, Any] = response.json()
    return doc


def test_the_document_is_valid_openapi_3_1(api: Any) -> None:
    doc = document(api)
    assert doc["openapi"].startswith("3.1")
    openapi_spec_validator.validate(doc)
    assert doc["servers"] == [{"url": "/api/v1"}]
    ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) and "post_jobs" in ids


def test_every_route_served_is_documented_and_every_operation_served(tmp_path: Any) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    asgi = create_app(app, api_tokens=["t" * 16])
    mounts = [r for r in asgi.routes if isinstance(r, Mount) and r.path == "/api/v1"]
    assert len(mounts) == 1
    served = {(route.path, method.lower()) for route in mounts[0].routes
              if isinstance(route, Route) for method in route.methods or ()
              if method != "HEAD"}
    with client_for(app) as client:
        doc = document(client)
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served == documented
    assert ("/jobs", "post") in served and ("/jobs/{job_id}/wait", "get") in served
    app.close()


def test_answers_match_the_documented_schemas(api: Any) -> None:
    """The job, page, queue and error answers validate against the document's own
    schemas (so the generated schemas describe what the handlers send)."""
    from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
    from referencing import Registry, Resource

    doc = document(api)
    registry = Registry().with_resource("urn:api", Resource.from_contents(
        {**doc, "$schema": "https://json-schema.org/draft/2020-12/schema"}))

    def check(instance: Any, pointer: str) -> None:
        validator = Draft202012Validator({"$ref": f"urn:api#{pointer}"}, registry=registry)
        errors = [e.message for e in validator.iter_errors(instance)]
        assert not errors, (pointer, errors[:3])

    def answer(path: str, method: str, status: str) -> str:
        return (f"/paths/{path.replace('/', '~1')}/{method}/responses/{status}/content/"
                "application~1json/schema")

    made = api.post("/api/v1/jobs", json={"task": "resize", "args": ["/a"]}, headers=auth())
    check(made.json(), answer("/jobs", "post", "201"))
    check(made.json(), "/components/schemas/Job")
    bulk = api.post("/api/v1/jobs", json=[{"task": "resize", "args": ["/b"]}], headers=auth())
    check(bulk.json(), answer("/jobs", "post", "201"))
    check(api.get("/api/v1/jobs?limit=1", headers=auth()).json(), answer("/jobs", "get", "200"))
    check(api.get("/api/v1/queues", headers=auth()).json(), answer("/queues", "get", "200"))
    check(api.post("/api/v1/queues/q/pause", headers=auth()).json(),
          answer("/queues/{name}/pause", "post", "200"))
    bad = api.post("/api/v1/jobs", json={"task": 1}, headers=auth())
    check(bad.json(), "/components/schemas/Error")
    check({"task": "resize", "args": ["/a"], "priority": 3},
          "/components/schemas/JobRequest")
    with pytest.raises(AssertionError):
        check({"task": "resize", "fair_key": "x"}, "/components/schemas/JobRequest")


def test_the_document_follows_a_mount_prefix(tmp_path: Any) -> None:
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    host = Starlette(routes=[Mount("/ops", create_app(app, api_tokens=["t" * 16]))])
    with TestClient(host, base_url="http://localhost") as client:
        response = client.get("/ops/api/v1/openapi.json", headers=auth("t" * 16))
        assert response.status_code == 200
        assert response.json()["servers"] == [{"url": "/ops/api/v1"}]
    app.close()


def test_the_guide_shows_every_endpoint_with_curl() -> None:
    """docs/http-api.md names every route of the table, and the examples it runs exist."""
    from pathlib import Path

    from conveyor.web.api._routes import ENDPOINTS

    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "http-api.md").read_text()
    for ep in ENDPOINTS:
        path = ep.path.replace("{job_id}", "{id}")
        if path.endswith(("/pause", "/resume")):
            path = path.rsplit("/", 1)[0]
        assert f"`{ep.method} {path}" in guide or f"{ep.method} {path}" in guide, ep.path
    assert guide.count("curl -s") >= 8
    assert (root / "examples" / "http-api" / "enqueue.mjs").exists()
    for page in ("README.md", "docs/dashboard.md", "docs/security.md"):
        assert "http-api.md" in (root / page).read_text(), page


def test_conveyor_dashboard_refuses_a_short_api_token(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from conveyor.cli import cli

    result = CliRunner(env={"CONVEYOR_API_TOKEN": "short", "CONVEYOR_URL": None,
                            "CONVEYOR_APP": None}).invoke(
        cli, ["dashboard", "--port", "0", "--url", f"sqlite:///{tmp_path / 'jobs.db'}"])
    assert result.exit_code == 2, result.output
    assert "16 characters" in result.output
