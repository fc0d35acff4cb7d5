"""The example project's settings, plus two backends whose Conveyor has a database of
its own (so an enqueue inside a transaction waits for the commit): ``elsewhere`` on
another PostgreSQL database, ``lite`` on SQLite. Their URLs come from the test run."""

import os

from exampleproject.settings import *  # noqa: F403
from exampleproject.settings import TASKS

BACKEND = "conveyor.contrib.django.ConveyorBackend"
TASKS = {
    **TASKS,
    "elsewhere": {"BACKEND": BACKEND, "QUEUES": [],
                  "OPTIONS": {"URL": os.environ["TEST_CONVEYOR_ELSEWHERE_URL"]}},
    "lite": {"BACKEND": BACKEND, "QUEUES": ["default", "reports"],
             "OPTIONS": {"URL": os.environ["TEST_CONVEYOR_LITE_URL"], "MAX_ATTEMPTS": 2}},
}
