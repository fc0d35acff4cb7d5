"""Running the runners: one process per run, in the system's own venv, on services
reset before every run; medians and spread of the runs that passed their check."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _runner, _services, _venv
from ._systems import System

ROOT = Path(__file__).resolve().parents[2]
#: What each workload's median is taken of.
FIGURES = {"e2e": ("jobs_per_s",), "single": ("jobs_per_s",), "bulk": ("jobs_per_s",),
           "latency": ("p50_ms", "p99_ms")}


@dataclasses.dataclass
class Context:
    """Where the services are and how big each workload is."""

    pg_admin: str
    redis: dict[str, Any] | None
    workdir: Path
    sizes: dict[str, int]
    spacing_s: float = 0.01
    log: Callable[[str], None] = print


def database_name(system: System) -> str:
    return "conveyor_peer_" + system.key.replace("-", "_")


def _reset(system: System, ctx: Context) -> dict[str, Any]:
    """Fresh services for one run; the config entries that point at them."""
    config: dict[str, Any] = {}
    if "postgres" in system.needs:
        config["pg_url"] = _services.fresh_database(ctx.pg_admin, database_name(system))
    if "redis" in system.needs:
        if ctx.redis is None:
            raise RuntimeError("no Redis for this run")
        _services.flush_redis(ctx.redis["url"])
        config["redis_url"] = ctx.redis["url"]
    workdir = ctx.workdir / system.key
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    config["workdir"] = str(workdir)
    return config


def timeout_for(jobs: int) -> float:
    """Generous: the slowest peer (a fork per job) at 50 jobs/s, plus start-up."""
    return 120 + jobs / 50


def _parse(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(_runner.MARK):
            parsed: dict[str, Any] = json.loads(line[len(_runner.MARK):])
            return parsed
    return None


def _execute(argv: list[str], env: dict[str, str], timeout: float) -> tuple[str, str, str | None]:
    """stdout, stderr and a failure reason (None: it exited in time). Its own process
    group, so a timeout also ends the worker processes a peer forked."""
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        return out, err, f"timed out after {timeout:.0f} s"
    except BaseException:  # interrupted: no runner (nor a worker it forked) outlives us
        _kill(proc)
        raise
    _kill(proc)  # what the runner left behind
    return out, err, None


def _kill(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_once(system: System, python: Path, workload: str, ctx: Context) -> dict[str, Any]:
    """One run of ``workload``: its runner's result, or ``ok: False`` and the reason."""
    jobs = min(ctx.sizes[workload], system.caps.get(workload, ctx.sizes[workload]))
    config = {"workload": workload, "jobs": jobs, "spacing_s": ctx.spacing_s,
              **system.options, **_reset(system, ctx)}
    path = f"{ROOT / 'src'}{os.pathsep}{ROOT}" if not system.packages else str(ROOT)
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("VIRTUAL_ENV", None)
    argv = [str(python), "-m", f"bench.peers.{system.runner}", json.dumps(config)]
    began = time.monotonic()
    out, err, failed = _execute(argv, env, timeout_for(config["jobs"]))
    result = _parse(out) or {"workload": workload, "ok": False}
    if failed or ("reason" not in result and not result.get("ok")):
        tail = " | ".join(err.strip().splitlines()[-3:])
        result.update(ok=False, reason=f"{failed or 'no result line'}: {tail}"[:600])
    result["wall_s"] = round(time.monotonic() - began, 2)
    return result


def aggregate(workload: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and [min, max] of the runs that passed; the failed ones only counted."""
    good = [r for r in runs if r.get("ok")]
    out: dict[str, Any] = {"runs": runs, "ok_runs": len(good), "failed_runs": len(runs) - len(good)}
    for key in FIGURES[workload]:
        values = [float(r[key]) for r in good if key in r]
        if values:
            out.setdefault("median", {})[key] = round(statistics.median(values), 3)
            out.setdefault("spread", {})[key] = [min(values), max(values)]
    return out


def summary_line(result: dict[str, Any]) -> str:
    if not result.get("ok"):
        return f"FAILED: {result.get('reason')}"
    keys = ("jobs_per_s", "p50_ms", "p99_ms", "seconds", "handler_calls", "stored")
    return " ".join(f"{k}={result[k]}" for k in keys if k in result)


def measure(systems: list[System], ctx: Context, repeat: int) -> dict[str, Any]:
    """Every system's workloads ``repeat`` times, the systems interleaved round by
    round (a slow minute of the shared machine falls on all of them)."""
    entries: dict[str, Any] = {}
    pythons: dict[str, Path] = {}
    for system in systems:
        entries[system.key] = {"label": system.label, "peer": system.peer,
                               "packages": list(system.packages), "caps": system.caps,
                               "workloads": {}}
        try:
            began = time.monotonic()
            pythons[system.key] = _venv.ensure(system)
            ctx.log(f"{system.key}: venv {pythons[system.key].parent.parent} "
                    f"({time.monotonic() - began:.1f}s)")
        except _venv.VenvError as exc:
            entries[system.key]["failed"] = f"no venv: {exc}"
            ctx.log(f"{system.key}: FAILED, no venv: {exc}")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for round_ in range(repeat):
            for system in [s for s in systems if s.key in pythons]:
                for workload in system.workloads:
                    result = run_once(system, pythons[system.key], workload, ctx)
                    runs.setdefault((system.key, workload), []).append(result)
                    ctx.log(f"{system.key} {workload} run {round_ + 1}/{repeat}: "
                            f"{summary_line(result)} ({result['wall_s']}s)")
    finally:
        for system in [s for s in systems if "postgres" in s.needs]:
            with contextlib.suppress(Exception):
                _services.drop_database(ctx.pg_admin, database_name(system))
    for system in systems:
        entry = entries[system.key]
        for workload in system.workloads:
            if (system.key, workload) in runs:
                entry["workloads"][workload] = aggregate(workload, runs[system.key, workload])
        first: dict[str, Any] = next((r for w in entry["workloads"].values() for r in w["runs"]
                      if r.get("versions")), {})
        entry["versions"], entry["settings"] = first.get("versions", {}), first.get("settings", {})
    return entries


def failures(entries: dict[str, Any]) -> list[dict[str, Any]]:
    """Every failed run and every system that could not run, with its reason."""
    out: list[dict[str, Any]] = []
    for key, entry in entries.items():
        if entry.get("failed"):
            out.append({"system": key, "workload": None, "reason": entry["failed"]})
        for workload, agg in entry.get("workloads", {}).items():
            for i, run in enumerate(agg["runs"]):
                if not run.get("ok"):
                    out.append({"system": key, "workload": workload, "run": i + 1,
                                "reason": run.get("reason", "unknown")})
    return out
