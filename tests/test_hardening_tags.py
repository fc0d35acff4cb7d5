"""Issue 28, defect 5: tags no longer escape the payload cap (``tags=["x" * 100] *
100000`` stored 10 MB in one row). A job carries at most MAX_TAGS tags of at most
MAX_TAG_CHARS characters, and its tags count toward ``max_payload_bytes`` with its
meta; each refusal names its limit and stores nothing. Both backends."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor, ConveyorConfig, PayloadTooLargeError
from conveyor._payload import MAX_TAG_CHARS, MAX_TAGS


def _stored(app: Conveyor) -> int:
    return sum(app.count_jobs().values())


def test_ten_megabytes_of_tags_are_refused_with_the_limit_named(app: Conveyor) -> None:
    noop = app.task(name="noop")(lambda: None)
    with pytest.raises(ValueError, match=f"100000 tags, over the limit of {MAX_TAGS}") as caught:
        noop.options(tags=["x" * 100] * 100_000).enqueue()
    assert len(str(caught.value)) < 200
    with pytest.raises(ValueError, match=f"over the limit of {MAX_TAGS}"):
        app.enqueue_many([noop.options(tags=["x"] * (MAX_TAGS + 1)).job()])
    with pytest.raises(ValueError, match=f"over the limit of {MAX_TAGS}"):
        app.task(name="tagged", tags=["t"] * (MAX_TAGS + 1))(lambda: None)
    assert _stored(app) == 0


def test_a_job_takes_up_to_the_limits(app: Conveyor) -> None:
    noop = app.task(name="noop")(lambda: None)
    tags = [f"{i:03d}" + "y" * (MAX_TAG_CHARS - 3) for i in range(MAX_TAGS)]
    job = noop.options(tags=tags).enqueue()
    stored = app.get_job(job.id)
    assert stored is not None and stored.tags == tags


def test_a_tag_over_the_length_limit_is_refused(app: Conveyor) -> None:
    noop = app.task(name="noop")(lambda: None)
    with pytest.raises(ValueError, match=f"1 to {MAX_TAG_CHARS} printable") as caught:
        noop.options(tags=["z" * 1_000_000]).enqueue()
    assert len(str(caught.value)) < 300
    assert _stored(app) == 0


def test_the_task_and_the_enqueue_tags_count_together(app: Conveyor) -> None:
    half = MAX_TAGS // 2 + 1
    tagged = app.task(name="tagged", tags=[f"t{i}" for i in range(half)])(lambda: None)
    with pytest.raises(ValueError, match=f"{2 * half} tags, over the limit of {MAX_TAGS}"):
        tagged.options(tags=[f"e{i}" for i in range(half)]).enqueue()
    assert _stored(app) == 0
    assert len(_some_tags(app, tagged.options(tags=["e"]).enqueue().id)) == half + 1


def _some_tags(app: Conveyor, job_id: int) -> list[str]:
    job = app.get_job(job_id)
    assert job is not None
    return job.tags


def test_tags_count_toward_max_payload_bytes(db_url: str) -> None:
    app = Conveyor(db_url, config=ConveyorConfig(max_payload_bytes=1024))
    try:
        noop = app.task(name="noop")(lambda: None)
        tags = ["t" * 60] * 20  # about 1.3 KB of JSON: within the count and length limits
        with pytest.raises(PayloadTooLargeError, match="max_payload_bytes") as caught:
            noop.options(tags=tags).enqueue()
        assert "tags and meta of task 'noop'" in str(caught.value)
        # tags and meta together: each under the cap, both over it
        with pytest.raises(PayloadTooLargeError, match="over the cap of 1024 bytes"):
            noop.options(tags=["t" * 60] * 8, meta={"note": "m" * 600}).enqueue()
        assert _stored(app) == 0
        noop.options(tags=["t" * 60] * 8, meta={"note": "m" * 100}).enqueue()
        assert _stored(app) == 1
    finally:
        app.close()


def test_the_documented_limits_are_the_enforced_ones() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "arguments.md").read_text()
    section = doc.split("## Tags and meta", 1)[1].split("\n## ", 1)[0]
    assert f"| {MAX_TAGS} (`MAX_TAGS`) |" in section
    assert f"| 1 to {MAX_TAG_CHARS} (`MAX_TAG_CHARS`) |" in section
    assert "`ConveyorConfig.max_payload_bytes`" in section
