"""The vacuumer: VACUUMs Conveyor's tables on PostgreSQL once their dead rows pass a
bound, on the leader only.

Every job leaves dead row versions in the hot table: its claim and its finish replace
its row, its move to history deletes it. Autovacuum visits a database at most once per
``autovacuum_naptime`` (a minute by default), so at thousands of jobs a second a million
dead rows pile up between visits, every claim walks past them, and throughput
saw-tooths with the naptime (``bench/analysis.md``). Reading the statistics every few
seconds and vacuuming a table past ``dead_rows`` keeps it small. SQLite keeps no dead
rows (``table_dead_rows`` lists none), so there this service never acts."""

from __future__ import annotations

import dataclasses
import logging
import time

from .._storage import Storage, TableDeadRows
from .service import Leadership, Service

log = logging.getLogger("conveyor.cluster")

#: A table is vacuumed only once its dead rows are also this share of its live ones, so
#: that a large backlog is not rescanned for a few dead rows.
LIVE_SHARE = 0.05
#: A VACUUM that left this share of a table's dead rows removed too few: an open
#: transaction older than them still sees them, and another VACUUM would not do better.
STUCK_SHARE = 0.8
#: The longest wait before a stuck table is tried again (the wait doubles up to it).
MAX_HOLD = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class VacuumConfig:
    """The worker's ``vacuum_interval`` and ``vacuum_dead_rows`` (defaults there)."""

    #: Seconds between reads of the statistics.
    interval: float
    #: Dead rows that make a table worth a VACUUM; 0 turns the service off.
    dead_rows: int


class Vacuumer(Service):
    """One pass reads every Conveyor table's dead rows, VACUUMs those past the bound
    (one at a time, largest first), then reads again to notice a VACUUM that an old
    transaction kept from removing them, and holds that table back for a while."""

    name = "vacuumer"

    def __init__(self, storage: Storage, leader: Leadership | None, config: VacuumConfig) -> None:
        self._storage, self._leader, self._config = storage, leader, config
        self.interval = config.interval
        self._refused: set[str] = set()
        #: Stuck tables: name -> (monotonic time to try again, hold in seconds).
        self._held: dict[str, tuple[float, float]] = {}

    async def run_once(self) -> list[str]:
        """The tables vacuumed."""
        if self._config.dead_rows <= 0 or (self._leader is not None
                                           and not self._leader.is_leader):
            return []
        before = {t.name: t for t in await self._storage.table_dead_rows() if self._due(t)}
        for name, table in before.items():
            started = time.monotonic()
            await self._storage.table_vacuum(name)
            log.debug("vacuumed %s: %d dead rows, %.3f s", name, table.dead,
                      time.monotonic() - started)
        if before:
            after = {t.name: t.dead for t in await self._storage.table_dead_rows()}
            for name, table in before.items():
                self._note_result(name, table.dead, after.get(name, 0))
        return list(before)

    def _due(self, table: TableDeadRows) -> bool:
        if table.dead < max(self._config.dead_rows, LIVE_SHARE * table.live):
            return False
        if not table.owned:
            if table.name not in self._refused:
                self._refused.add(table.name)
                log.warning("cannot VACUUM %s (%d dead rows): this role does not own it; "
                            "autovacuum alone keeps it (vacuum_dead_rows=0 silences this)",
                            table.name, table.dead)
            return False
        held = self._held.get(table.name)
        return held is None or time.monotonic() >= held[0]

    def _note_result(self, name: str, before: int, after: int) -> None:
        if after < STUCK_SHARE * before:
            if self._held.pop(name, None) is not None:
                log.info("VACUUM of %s removes its dead rows again", name)
            return
        first = name not in self._held
        hold = self.interval if first else min(MAX_HOLD, 2 * self._held[name][1])
        self._held[name] = (time.monotonic() + hold, hold)
        if first:
            log.info("VACUUM of %s left %d of %d dead rows: a transaction older than them is "
                     "still open (see pg_stat_activity.xact_start); trying again less "
                     "often, up to every %.0f s", name, after, before, MAX_HOLD)
