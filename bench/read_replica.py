"""``python -m bench.read_replica``: can the dashboard and the read API run on a read
replica? A simulation: the app connects with ``default_transaction_read_only=on``, so
every write fails as it would on a hot standby (SQLSTATE 25006), and each dashboard page
and read call is tried once against a database with jobs in several states.

Writes ``bench/results/read_replica.json``: per page or call, the HTTP status or "ok",
and the error of any that failed. Example: ``python -m bench.read_replica``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from conveyor import Conveyor

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target
from .apps import register

PAGES = ("/", "/jobs", "/jobs/{id}", "/queues", "/failures", "/workers", "/schedules",
         "/healthz", "/metrics", "/jobs?state=completed")


def read_only_url(url: str) -> str:
    """``url`` whose sessions refuse writes, as a hot standby's do."""
    return f"{url}{'&' if '?' in url else '?'}options=-c%20default_transaction_read_only%3Don"


def _seed(url: str) -> int:
    """Jobs available and completed in the primary; returns one job's id."""
    app = Conveyor(url)
    try:
        task = register(app)["noop"]
        jobs = app.enqueue_many([task.job(i) for i in range(20)])
        return jobs[0].id
    finally:
        app.close()


def check(url: str) -> dict[str, Any]:
    """Each page's status and each read call's outcome on a read-only connection."""
    from starlette.testclient import TestClient

    from conveyor.web import create_app

    job_id = _seed(url)
    out: dict[str, Any] = {"pages": {}, "calls": {}}
    app = Conveyor(read_only_url(url))
    register(app)
    try:
        for name, call in (("get_job", lambda: app.get_job(job_id)),
                           ("list_jobs", lambda: app.list_jobs(limit=10))):
            try:
                call()
                out["calls"][name] = "ok"
            except Exception as exc:  # the finding is which ones fail, and how
                out["calls"][name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        try:  # the simulation holds only if a write really fails on this connection
            app.tasks["noop"].enqueue(0)
            out["writes_refused"] = False
        except Exception as exc:
            out["writes_refused"] = "read-only transaction" in str(exc)
        with TestClient(create_app(app, read_only=True), base_url="http://localhost") as client:
            for page in PAGES:
                response = client.get(page.format(id=job_id))
                out["pages"][page] = response.status_code
    finally:
        app.close()
    out["all_ok"] = (out["writes_refused"] is True
                     and all(v == "ok" for v in out["calls"].values())
                     and all(v == 200 for v in out["pages"].values()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.read_replica", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "read_replica.json")
    args = parser.parse_args(argv)
    with postgres_url(args.pg_url) as url:
        target = Target.postgres(url, Path(tempfile.gettempdir()))
        try:
            target.reset()
            doc = {"machine": _env.machine(), **check(url)}
            target.reset()
        finally:
            target.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str))
    print(json.dumps({k: v for k, v in doc.items() if k != "machine"}, indent=2))
    return 0 if doc["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
