"""What the runtime knows of an app: its tasks, schedules, hooks and settings.

The worker and its services take a ``Registry``, never the ``Conveyor`` app, so the
runtime does not depend on the layer above it. The app owns an ``AppRegistry`` and
hands it down; the app itself also has these four attributes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from ._config import ConveyorConfig
from ._cron import Schedule
from ._hooks import Hooks
from ._task import Task


class Registry(Protocol):
    """Read-only view of an app's definitions, as the runtime uses them."""

    @property
    def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    @property
    def schedules(self) -> Mapping[str, Schedule]: ...

    @property
    def hooks(self) -> Hooks: ...

    @property
    def config(self) -> ConveyorConfig: ...


@dataclasses.dataclass(slots=True)
class AppRegistry:
    """The app's definitions; registration is for start-up, before workers run."""

    config: ConveyorConfig = dataclasses.field(default_factory=ConveyorConfig)
    tasks: dict[str, Task[Any, Any]] = dataclasses.field(default_factory=dict)
    schedules: dict[str, Schedule] = dataclasses.field(default_factory=dict)
    hooks: Hooks = dataclasses.field(default_factory=Hooks)
