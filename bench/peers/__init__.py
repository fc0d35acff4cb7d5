"""``python -m bench.peers``: Conveyor and the Python queues of issue 29 in one run.

Each peer runs in a venv of its own (``_venv.py``), through a runner script of its own
(``run_<peer>.py``) that its venv's interpreter executes and that prints one JSON line;
Conveyor runs the same workloads through ``run_conveyor.py`` in the repository's venv.
This package imports nothing outside the standard library at import time: the peers'
interpreters import it too.
"""
