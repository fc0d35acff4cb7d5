"""The systems of one run: Conveyor on both backends and the peers of issue 29, each
with the packages its venv gets (pinned: the latest release on PyPI when this was
written) and the services it needs."""

from __future__ import annotations

import dataclasses
from typing import Any

WORKLOADS = ("e2e", "single", "bulk", "latency")


@dataclasses.dataclass(frozen=True)
class System:
    #: Key in the result file, e.g. ``huey-redis``.
    key: str
    #: Name ``--peers`` selects it by (``huey`` selects both of huey's storages).
    peer: str
    #: Table label; ``{version}`` is filled from what the run installed.
    label: str
    #: Module under ``bench.peers`` its venv's interpreter runs.
    runner: str
    #: Requirements of its venv; empty: the repository's own venv (Conveyor).
    packages: tuple[str, ...] = ()
    #: ``postgres`` (a scratch database of its own), ``redis``, ``workdir``.
    needs: tuple[str, ...] = ()
    #: Extra config given to the runner.
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Workloads it has an API for (no bulk API: no bulk figure).
    workloads: tuple[str, ...] = WORKLOADS
    #: The distribution whose version names the label and the venv.
    dist: str = ""
    #: Largest size per workload, for a peer too slow for the run's sizes (its table
    #: cell names the size it ran).
    caps: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def version(self) -> str:
        """The pinned version of ``dist`` (the venv's directory is named after it)."""
        for req in self.packages:
            name, _, version = req.partition("==")
            if name.split("[")[0] == self.dist:
                return version
        return ""


CONVEYOR = (
    System("conveyor-sqlite", "conveyor", "Conveyor {version}, SQLite", "run_conveyor",
           needs=("workdir",), options={"backend": "sqlite"}, dist="conveyor"),
    System("conveyor-postgres", "conveyor", "Conveyor {version}, PostgreSQL", "run_conveyor",
           needs=("postgres",), options={"backend": "postgres"}, dist="conveyor"),
)

PEERS = (
    System("pgqueuer", "pgqueuer", "pgqueuer {version} (PostgreSQL, asyncpg)", "run_pgqueuer",
           ("pgqueuer==1.6.0", "asyncpg==0.32.0"), ("postgres",), dist="pgqueuer"),
    System("procrastinate", "procrastinate", "procrastinate {version} (PostgreSQL)",
           "run_procrastinate", ("procrastinate==3.10.0", "psycopg[binary,pool]"),
           ("postgres",), dist="procrastinate"),
    System("chancy", "chancy", "chancy {version} (PostgreSQL, async executor)", "run_chancy",
           ("chancy==0.26.0", "psycopg[binary,pool]"), ("postgres",), dist="chancy"),
    System("celery", "celery", "celery {version} (Redis, threads pool)", "run_celery",
           ("celery[redis]==5.7.0",), ("redis",), workloads=("e2e", "single", "latency"),
           dist="celery"),
    System("dramatiq", "dramatiq", "dramatiq {version} (Redis)", "run_dramatiq",
           ("dramatiq[redis]==2.2.1",), ("redis",), workloads=("e2e", "single", "latency"),
           dist="dramatiq"),
    # its default worker forks for every job (tens of jobs/s here): 20,000 would take
    # longer than the rest of the run together
    System("rq", "rq", "rq {version} (Redis, a fork per job)", "run_rq", ("rq==3.0.0",),
           ("redis",), dist="rq", caps={"e2e": 2_000}),
    System("huey-redis", "huey", "huey {version} (Redis)", "run_huey",
           ("huey==3.5.4", "redis"), ("redis",), {"storage": "redis"},
           ("e2e", "single", "latency"), dist="huey"),
    System("huey-sqlite", "huey", "huey {version} (SQLite)", "run_huey",
           ("huey==3.5.4", "redis"), ("workdir",), {"storage": "sqlite"},
           ("e2e", "single", "latency"), dist="huey"),
    # saq 0.26.4 imports typing_extensions without requiring it
    System("saq", "saq", "saq {version} (Redis)", "run_saq",
           ("saq[redis]==0.26.4", "typing_extensions"), ("redis",),
           workloads=("e2e", "single", "latency"), dist="saq"),
)

PEER_NAMES = tuple(dict.fromkeys(s.peer for s in PEERS))


def select(peers: list[str], conveyor: list[str]) -> list[System]:
    """Conveyor's backends named in ``conveyor``, then the peers named in ``peers``."""
    unknown = set(peers) - set(PEER_NAMES)
    if unknown:
        raise ValueError(f"unknown peers {sorted(unknown)}; known: {', '.join(PEER_NAMES)}")
    backends = {"conveyor-" + b for b in conveyor}
    unknown = backends - {s.key for s in CONVEYOR}
    if unknown:
        raise ValueError(f"unknown Conveyor backends {sorted(unknown)}: sqlite, postgres")
    return ([s for s in CONVEYOR if s.key in backends]
            + [s for s in PEERS if s.peer in peers])
