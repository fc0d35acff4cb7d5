"""The burn-down floor on PostgreSQL: Conveyor's own claim and ack statements driven by
the least Python possible (raw psycopg, no Conveyor runtime, no Job objects), so the
distance between it and workload 3 is what the runtime costs.

* ``sequential``: one connection; claim a batch, ack it, repeat.
* ``overlapped``: a claiming thread and an acking thread on two connections (as
  Conveyor's producer and acker), handing batches over through a queue, so the server
  works on a claim and an ack at the same time.

Each run drains ``rows`` pre-inserted jobs; jobs/s, the client's CPU per job and the
server backends' CPU per job (``/proc``, when the server runs on this machine).

Beside it, the floors of two other targets: bulk enqueue (``copy_batches``: Conveyor's
COPY statements with rows the server encoded) and enqueue-to-start latency
(``enqueue_to_claim``: insert, NOTIFY and claim on plain blocking connections).
Called by ``python -m bench.probes`` (``postgres.claim_ack_floor``, ``copy_floor`` and
``latency_floor`` in probes.json).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import psycopg

from conveyor._storage import load_queries
from conveyor.cli.bench import percentiles

from ._targets import Target
from .w_workers import process_cpu_s

_FILL = ("INSERT INTO conveyor_jobs (task, queue, args, state, scheduled_at, created_at)"
         " SELECT 'noop', 'floor', jsonb_build_array(i), 'available', now(), now()"
         " FROM generate_series(1, %(rows)s) AS i")


class _Statements:
    """The claim narrowed to the two columns an ack needs, or with the columns it ships
    (``rows.CLAIM_COLUMNS``, decoded by psycopg: the cost of building Jobs, less
    Conveyor's part). The claim's RETURNING list is cut off and written again here.

    The ack is the one a worker writes at the default ``archive_after`` of 0,
    ``job_ack_retire`` (the job moves to history at its ack), as the burn-downs held
    against this floor run; ``in_place``: ``job_ack_completed``, the row left in the hot
    table for the archiver (a worker with ``archive_after`` above 0), for the record."""

    def __init__(self, all_columns: bool = False, in_place: bool = False) -> None:
        q = load_queries("postgres")
        claim = q["job_fetch_available"]
        cut = claim.rindex("RETURNING ")
        shipped = claim[cut + len("RETURNING "):].rstrip().rstrip(";")
        self.claim = claim[:cut] + "RETURNING j.id, j.lease_token" + (
            f", {shipped}" if all_columns else "")
        self.ack = q["job_ack_completed" if in_place else "job_ack_retire"]

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
    variants.append((f"overlapped_b{max(batches)}_ack_in_place", _overlapped, max(batches),
                     _Statements(in_place=True)))
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


# -- bulk enqueue: COPY with nothing encoded in Python ---------------------------------------

_COPY_ROWS = ("COPY (SELECT 'noop'::text, 'floor'::text, '{}'::jsonb, 0::smallint, 20::integer,"
              " '[]'::jsonb, '{}'::jsonb, 'available'::text, now(), now(), NULL::text,"
              " nextval(pg_get_serial_sequence('conveyor_jobs', 'id')), jsonb_build_array(i)"
              " FROM generate_series(1, %s) AS i) TO STDOUT (FORMAT BINARY)")


def copy_batches(target: Target, batch: int = 10_000, batches: int = 10) -> dict[str, Any]:
    """The bulk-enqueue floor: Conveyor's two COPY statements (``job_reserve_ids``, then
    ``job_copy_plain``) and the commit, with the binary rows made by the server beforehand
    (``COPY ... TO STDOUT``, ids included), so no Python encodes a row: what a batch
    costs the server and the wire; the distance to workload 1 is Conveyor's own part."""
    q = load_queries("postgres")
    target.reset()
    with _connect(target.url) as conn:
        blobs = []
        for _ in range(batches):
            with conn.cursor().copy(_COPY_ROWS % batch) as source:
                blobs.append(b"".join(bytes(chunk) for chunk in source))
        server0, cpu0, began = _server_cpu([conn]), time.process_time(), time.perf_counter()
        for rows in blobs:
            with conn.transaction():
                conn.execute(q["job_reserve_ids"], {"count": batch, "channel": "floor",
                                                    "queues": ["floor"]}).fetchall()
                with conn.cursor().copy(q["job_copy_plain"]) as copy:
                    copy.write(rows)
        seconds, client = time.perf_counter() - began, time.process_time() - cpu0
        server1 = _server_cpu([conn])
        stored = conn.execute("SELECT count(*) FROM conveyor_jobs").fetchone()
    total = batch * batches
    target.reset()
    return {"batch": batch, "batches": batches, "stored": stored[0] if stored else 0,
            "jobs_per_s": round(total / seconds),
            "client_cpu_us_per_job": round(client * 1e6 / total, 2),
            "db_backend_cpu_us_per_job": None if server0 is None or server1 is None
            else round((server1 - server0) * 1e6 / total, 2)}


# -- latency: enqueue, NOTIFY, claim ------------------------------------------------------------


def enqueue_to_claim(target: Target, count: int = 1000, spacing: float = 0.01) -> dict[str, Any]:
    """The latency floor of workload 5: one connection inserts single jobs ``spacing``
    apart with Conveyor's ``job_insert_one`` (its NOTIFY included, autocommitted); a
    thread blocked on a LISTEN connection claims on a third connection with
    ``job_fetch_available`` the moment a notification arrives. Each phase's time from
    just before the insert, on one clock: what the database and libpq cost, no asyncio,
    no Conveyor runtime."""
    q, st = load_queries("postgres"), _Statements()
    target.reset()
    sent: dict[int, tuple[float, float]] = {}
    claimed: dict[int, tuple[float, float]] = {}
    done, listening = threading.Event(), threading.Event()
    claim = {"queue": "floor", "limit": 10, "owner": "floor", "lease_ttl": 60.0}
    insert = {"task": "noop", "queue": "floor", "args": "[1]", "kwargs": "{}", "priority": 0,
              "max_attempts": 20, "tags": "[]", "meta": "{}", "concurrency_key": None,
              "run_at": None, "delay": None, "channel": "floor_jobs"}
    with _connect(target.url) as listen, _connect(target.url) as claimer, \
            _connect(target.url) as producer:

        def wake_loop() -> None:
            listen.execute("LISTEN floor_jobs")
            listening.set()
            while not done.is_set():
                for _ in listen.notifies(timeout=0.2):
                    woke = time.perf_counter()
                    for row in claimer.execute(st.claim, claim).fetchall():
                        claimed[row[0]] = (woke, time.perf_counter())

        thread = threading.Thread(target=wake_loop, daemon=True)
        thread.start()
        listening.wait(10)
        for _ in range(count + 20):  # the first 20 warm the statements and are not counted
            began = time.perf_counter()
            row = producer.execute(q["job_insert_one"], insert).fetchone()
            if row is not None:
                sent[row[0]] = (began, time.perf_counter())
            time.sleep(spacing)
        deadline = time.monotonic() + 30
        while len(claimed) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.01)
        done.set()
        thread.join(10)
    target.reset()
    ids = sorted(sent)[20:]
    seen = [i for i in ids if i in claimed]
    phases = {"insert_commit": [sent[i][1] - sent[i][0] for i in seen],
              "notified": [claimed[i][0] - sent[i][0] for i in seen],
              "claim": [claimed[i][1] - claimed[i][0] for i in seen],
              "enqueue_to_claimed": [claimed[i][1] - sent[i][0] for i in seen]}
    return {"jobs": len(ids), "claimed": len(seen), "spacing_s": spacing,
            **{name: percentiles(values) for name, values in phases.items() if len(values) > 1}}
