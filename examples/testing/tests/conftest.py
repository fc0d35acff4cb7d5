import pytest
from shop import tasks


@pytest.fixture(autouse=True)
def gateway(monkeypatch: pytest.MonkeyPatch) -> tasks.Gateway:
    """Every test gets its own payment provider: up, nothing charged."""
    fresh = tasks.Gateway()
    monkeypatch.setattr(tasks, "gateway", fresh)
    return fresh
