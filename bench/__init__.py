"""Conveyor's benchmark suite: workloads 1-8 of issue 5 on SQLite and PostgreSQL.

Run ``make bench`` (or ``python -m bench --help``); results go to ``bench/results``.
"""
