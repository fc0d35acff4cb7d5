"""``python -m bench.profile``: where the CPU goes, as evidence for the gaps in the summary.

* Burn-down (workload 3, concurrency 100 and 1,000): ``py-spy record --subprocesses``
  over the real ``conveyor worker`` process; the samples of that process are folded into
  a few buckets (database statements, the event loop, task handles, decoding rows, ...)
  and the heaviest frames are listed.
* Bulk and single enqueue (workloads 1 and 2): the same, over a process that enqueues
  200,000 jobs in batches of 1,000, and one that enqueues 20,000 one at a time.

Writes ``bench/results/profiles/<backend>_<case>.txt``. Needs py-spy
(``pip install py-spy``; ``make bench`` installs it).
Example: ``python -m bench.profile --backends sqlite``
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _env
from .__main__ import DEFAULT_OUT, postgres_url
from ._targets import Target

#: (bucket, a substring of a frame): the first frame of a stack, leaf upwards, that
#: matches decides the bucket of that sample.
BUCKETS: list[tuple[str, str]] = [
    ("idle: waiting for work (select / queue get)", "SQLiteStorage._serve ("),
    ("idle: waiting for work (select / queue get)", "concurrent/futures/thread.py"),
    ("database: SQLite statements", "_sqlite_fast.py"),
    ("database: SQLite statements", "SQLiteStorage._write"),
    ("database: SQLite statements", "SQLiteStorage._begin_immediate"),
    ("database: waiting on PostgreSQL / socket I/O", "psycopg/connection"),
    ("database: waiting on PostgreSQL / socket I/O", "psycopg/generators"),
    ("driver: psycopg encode/decode", "psycopg/"),
    ("driver: psycopg encode/decode", "psycopg_pool/"),
    ("decode rows into Jobs", "_fast.py"),
    ("decode rows into Jobs", "_rows.py"),
    ("decode rows into Jobs", "_storage/rows.py"),
    ("the handler itself", "bench/apps.py"),
    ("conveyor runtime (producer, executor, acker, metrics)", "conveyor/_runtime/"),
    ("conveyor enqueue (validate, encode)", "conveyor/_task.py"),
    ("conveyor enqueue (validate, encode)", "conveyor/_payload.py"),
    ("conveyor enqueue (validate, encode)", "conveyor/_app.py"),
    ("conveyor storage layer", "conveyor/_storage/"),
    ("asyncio event loop and tasks", "asyncio/"),
    ("idle: waiting for work (select / queue get)", "selectors.py"),
    ("idle: waiting for work (select / queue get)", "threading.py"),
    ("idle: waiting for work (select / queue get)", "queue.py"),
    ("startup (imports, CLI)", "importlib"),
    ("startup (imports, CLI)", "click/"),
]

ENQUEUE_SCRIPT = """
import sys, time
from conveyor import Conveyor
app = Conveyor(sys.argv[1])

@app.task(queue="bench")
async def noop(i: int) -> None: ...

app.enqueue_many([noop.job(i) for i in range(1000)])
began = time.perf_counter()
if sys.argv[2] == "bulk":
    for b in range(200):
        app.enqueue_many([noop.job(b * 1000 + i) for i in range(1000)])
    n = 200_000
else:
    for i in range(20_000):
        noop.enqueue(i)
    n = 20_000
print(f"{sys.argv[2]}: {n / (time.perf_counter() - began):.0f} jobs/s (under the profiler)")
app.close()
"""


def fold(raw: Path, process: str) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    """Samples of the processes whose command line contains ``process`` (all samples for
    ""): (total, buckets, leaf frames)."""
    buckets: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        procs = [i for i, f in enumerate(frames[:3]) if f.startswith("process ")]
        owner = frames[procs[-1]] if procs else ""
        if not count.isdigit() or process not in owner:
            continue
        frames = frames[procs[-1]:]
        n = int(count)
        total += n
        leaves[frames[-1]] += n
        bucket = "other"
        for frame in reversed(frames[1:]):
            hit = next((name for name, key in BUCKETS if key in frame), None)
            if hit is not None:
                bucket = hit
                break
        buckets[bucket] += n
    return total, buckets, leaves


def report(title: str, command: str, raw: Path, process: str, extra: str = "") -> str:
    total, buckets, leaves = fold(raw, process)
    git = _env.git_stamp()
    lines = [f"# {title}", "", f"command: {command}", f"samples: {total} (py-spy, 250 Hz)",
             f"commit: {git['commit']} (measured code clean: {git['clean']})"]
    if extra:
        lines += ["", extra.strip()]
    lines += ["", "## Where the samples are (bucket of the innermost matching frame)", ""]
    for name, n in buckets.most_common():
        lines.append(f"{100 * n / max(total, 1):5.1f}%  {name}")
    lines += ["", "## Heaviest frames (self time)", ""]
    for frame, n in leaves.most_common(25):
        lines.append(f"{100 * n / max(total, 1):5.1f}%  {frame}")
    return "\n".join(lines) + "\n"


def record(argv: list[str], raw: Path) -> str:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    done = subprocess.run([spy, "record", "--subprocesses", "-r", "250", "-f", "raw", "-o",
                           str(raw), "--", *argv], capture_output=True, text=True, check=True)
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-url", default=None,
                        help="as for python -m bench (default: a private default cluster)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT / "profiles")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="conveyor-profile-") as tmp, \
            postgres_url(args.pg_url) as pg_url:
        args.pg_url = pg_url
        for backend in [b for b in args.backends.split(",") if b]:
            raw = Path(tmp) / f"{backend}.txt"
            bench = [sys.executable, "-m", "bench", "--backends", backend, "--cases",
                     "w3_burndown_c100,w3_burndown_c1000", "--repeat", "1", "--out",
                     str(Path(tmp) / "results"), "--workdir", str(Path(tmp) / "work"),
                     "--pg-url", args.pg_url]
            printed = record(bench, raw)
            for c in (100, 1000):
                text = report(f"{backend}: burn-down of 100,000 no-op jobs, concurrency {c}",
                              " ".join(["py-spy record --subprocesses --", "python",
                                        *bench[1:]]),
                              raw, f"-c {c} ", "\n".join(
                                  line for line in printed.splitlines() if f"_c{c} " in line))
                (args.out / f"{backend}_w3_burndown_c{c}.txt").write_text(text)
            url = (f"sqlite:///{tmp}/enqueue.db" if backend == "sqlite" else args.pg_url)
            script = Path(tmp) / "enqueue.py"
            script.write_text(ENQUEUE_SCRIPT)
            for mode, case, title in (("bulk", "w1_bulk_b1000", "200,000 jobs in batches of 1,000"),
                                      ("single", "w2_single_t1", "20,000 task.enqueue() calls")):
                if backend == "postgres":
                    Target.postgres(url, Path(tmp)).reset()
                else:
                    Path(f"{tmp}/enqueue.db").unlink(missing_ok=True)
                raw = Path(tmp) / f"{backend}-{mode}.txt"
                printed = record([sys.executable, str(script), url, mode], raw)
                text = report(f"{backend}: {title}",
                              f"py-spy record -- python enqueue.py URL {mode} "
                              "(ENQUEUE_SCRIPT in bench/profile.py)", raw, "",
                              "\n".join(ln for ln in printed.splitlines() if "jobs/s" in ln))
                (args.out / f"{backend}_{case}.txt").write_text(text)
            print(f"wrote {args.out}/{backend}_*.txt", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
