"""The burn-down floor on PostgreSQL: Conveyor's own claim and ack statements driven by
the least Python possible (raw psycopg, no Conveyor runtime, no Job objects), so the
distance between it and workload 3 is what the runtime costs.

* ``sequential``: one connection; claim a batch, ack it, repeat.
* ``overlapped``: a claiming thread and an acking thread on two connections (as
  Conveyor's producer and acker), handing batches over through a queue, so the server
  works on a claim and an ack at the same time.

Each run drains ``rows`` pre-inserted jobs; jobs/s, the client's CPU per job and the
server backends' CPU per job (``/proc``, when the server runs on this machine).
Called by ``python -m bench.probes`` (``postgres.claim_ack_floor`` in probes.json).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import psycopg

from conveyor._storage import load_queries

from ._targets import Target
from .w_workers import process_cpu_s

_FILL = ("INSERT INTO conveyor_jobs (task, queue, args, state, scheduled_at, created_at)"
         " SELECT 'noop', 'floor', jsonb_build_array(i), 'available', now(), now()"
         " FROM generate_series(1, %(rows)s) AS i")


class _Statements:
    """The claim narrowed to the two columns an ack needs, or as shipped (``j.*``, every
    column decoded by psycopg: the cost of building whole Jobs, less Conveyor's part)."""

    def __init__(self, all_columns: bool = False) -> None:
        q = load_queries("postgres")
        self.claim = q["job_fetch_available"]
        if all_columns:
            self.claim = self.claim.replace("RETURNING j.*", "RETURNING j.id, j.lease_token, j.*")
        else:
            self.claim = self.claim.replace("RETURNING j.*", "RETURNING j.id, j.lease_token")
        self.ack = q["job_ack_completed"]

    def claim_batch(self, conn: psycopg.Connection[Any], batch: int) -> list[tuple[Any, ...]]:
        return conn.execute(self.claim, {"queue": "floor", "limit": batch, "owner": "floor",
                                         "lease_ttl": 60.0}).fetchall()

    def ack_batch(self, conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> int:
        n = len(rows)
        done = conn.execute(self.ack, {
            "id": [r[0] for r in rows], "lease_token": [r[1] for r in rows],
            "result": ["null"] * n, "run_time": [0.0] * n, "node": "floor",
            "finished_channel": "conveyor_jobs_finished"}).fetchall()
        return len(done)


def _connect(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, prepare_threshold=1)


def _server_cpu(conns: list[psycopg.Connection[Any]]) -> float | None:
    """CPU seconds the connections' backends have used so far (None: not local)."""
    cpu = [process_cpu_s(c.info.backend_pid) for c in conns]
    return None if None in cpu else sum(c for c in cpu if c is not None)


def _sequential(url: str, batch: int, st: _Statements) -> tuple[int, float | None]:
    with _connect(url) as conn:
        before, acked = _server_cpu([conn]), 0
        while rows := st.claim_batch(conn, batch):
            acked += st.ack_batch(conn, rows)
        after = _server_cpu([conn])
    return acked, None if before is None or after is None else after - before


def _overlapped(url: str, batch: int, st: _Statements) -> tuple[int, float | None]:
    handoff: queue.Queue[list[tuple[Any, ...]] | None] = queue.Queue(maxsize=4)
    acked = [0]

    def ack_loop(conn: psycopg.Connection[Any]) -> None:
        while (rows := handoff.get()) is not None:
            acked[0] += st.ack_batch(conn, rows)

    with _connect(url) as claimer, _connect(url) as acker:
        before = _server_cpu([claimer, acker])
        thread = threading.Thread(target=ack_loop, args=(acker,))
        thread.start()
        try:
            while rows := st.claim_batch(claimer, batch):
                handoff.put(rows)
        finally:
            handoff.put(None)
            thread.join()
        after = _server_cpu([claimer, acker])
    return acked[0], None if before is None or after is None else after - before


def claim_ack_loop(target: Target, rows: int = 100_000,
                   batches: tuple[int, ...] = (100, 1000)) -> dict[str, Any]:
    """jobs/s and CPU per job of each variant and batch size, draining ``rows`` jobs."""
    out: dict[str, Any] = {"rows": rows}
    variants = [(f"{name}_b{batch}", run, batch, _Statements())
                for name, run in (("sequential", _sequential), ("overlapped", _overlapped))
                for batch in batches]
    variants.append((f"overlapped_b{max(batches)}_all_columns", _overlapped, max(batches),
                     _Statements(all_columns=True)))
    for key, run, batch, st in variants:
        target.reset()
        target.query(_FILL, {"rows": rows})
        target.query("VACUUM ANALYZE conveyor_jobs")
        cpu0, began = time.process_time(), time.perf_counter()
        acked, server = run(target.url, batch, st)
        seconds = time.perf_counter() - began
        client = time.process_time() - cpu0
        out[key] = {
            "acked": acked, "jobs_per_s": round(acked / seconds),
            "client_cpu_us_per_job": round(client * 1e6 / rows, 2),
            "db_backend_cpu_us_per_job": None if server is None
            else round(server * 1e6 / rows, 2)}
    target.reset()
    return out
