"""Integrations with other frameworks and tools, each behind its own extra
(``conveyor[django]``, ...). Nothing is imported here, so ``import conveyor`` never
needs any of them."""
