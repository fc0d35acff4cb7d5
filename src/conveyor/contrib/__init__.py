"""Integrations with other tools, each behind its own extra and imported on its own:
``conveyor.contrib.sentry`` (``conveyor[sentry]``) and ``conveyor.contrib.prometheus``
(``conveyor[prometheus]``). Nothing is imported here, so ``import conveyor`` never
needs them."""
