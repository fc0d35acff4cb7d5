"""Workloads 1 and 2: bulk enqueue and single enqueue, through the public sync API."""

from __future__ import annotations

from typing import Any

from conveyor.cli.bench import BenchApp, run_bulk, run_single

from ._targets import Target
from .apps import register


def bulk(target: Target, total: int, batch: int) -> dict[str, Any]:
    """Workload 1: ``total`` jobs through ``app.enqueue_many`` in batches of ``batch``."""
    target.reset()
    app = BenchApp(target.url)
    try:
        return run_bulk(app, register(app)["noop"], total, batch)
    finally:
        app.close()


def single(target: Target, total: int, threads: int) -> dict[str, Any]:
    """Workload 2: ``task.enqueue(i)`` from ``threads`` threads, one transaction each."""
    target.reset()
    app = BenchApp(target.url)
    try:
        return run_single(app, register(app)["noop"], total, threads)
    finally:
        app.close()
