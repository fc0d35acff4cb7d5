"""Database rows of the flow-control tables as typed records, for both backends."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ._flow_types import LeaderRow, NodeRow, QueueRow, ScheduleRow
from ._rows import _ts


def _when(value: Any) -> datetime:
    ts = _ts(value)
    assert ts is not None
    return ts


def _json(value: Any, json_text: bool) -> Any:
    return json.loads(value) if json_text and value is not None else value


def queue_row(r: Any) -> QueueRow:
    return QueueRow(
        name=r["name"], paused=bool(r["paused"]), concurrency=r["concurrency"],
        scope=r["scope"], rate_limit=r["rate_limit"], updated_at=_when(r["updated_at"]),
    )


def node_row(r: Any, json_text: bool) -> NodeRow:
    return NodeRow(
        id=r["id"], hostname=r["hostname"], pid=int(r["pid"]),
        queues=_json(r["queues"], json_text), tasks=_json(r["tasks"], json_text),
        started_at=_when(r["started_at"]), heartbeat_at=_when(r["heartbeat_at"]),
        alive=bool(r["alive"]),
    )


def leader_row(r: Any) -> LeaderRow:
    return LeaderRow(
        name=r["name"], node_id=r["node_id"], term=int(r["term"]),
        elected_at=_when(r["elected_at"]), expires_at=_when(r["expires_at"]),
    )


def schedule_row(r: Any, json_text: bool) -> ScheduleRow:
    return ScheduleRow(
        name=r["name"], task=r["task"], cron=r["cron"], timezone=r["timezone"],
        args=_json(r["args"], json_text), kwargs=_json(r["kwargs"], json_text),
        queue=r["queue"], priority=r["priority"], misfire=r["misfire"],
        backfill=int(r["backfill"]), paused=bool(r["paused"]),
        last_tick=_ts(r["last_tick"]), last_job_id=r["last_job_id"],
        created_at=_when(r["created_at"]),
    )
