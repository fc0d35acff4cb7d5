"""Published figures name the commit they were measured on, and none passes for current
when its measured code differs from HEAD's.

Every report (``bench/results/summary.md``, the README's generated performance table,
``docs/reliability.md``) has tables whose last two columns are ``commit`` and ``status``
and a header ``**N of M rows** measured on older code``. A row may be marked stale
(``**stale**: why``) whatever its commit; a row that is not must name commits whose
measured code (``tests/_evidence.py``) is identical to HEAD's. The header must count the
rows. To fix a failure: rerun the suite (``make bench`` / ``make chaos``) on the current
commit, or re-render the report so that it marks its rows stale
(``python -m bench --summary-only``, ``python -m tests.chaos.report tests/chaos/results
docs/reliability.md``).

Without git history (an exported tarball) nothing can be compared: the test skips with a
loud reason, and fails in a complete run (``tests/_require.py``: CI=true or a
``CONVEYOR_REQUIRE_*`` flag).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence

import pytest

from . import _evidence, _require

ROOT = _evidence.ROOT
REPORTS: dict[str, tuple[str, ...]] = {
    "bench/results/summary.md": _evidence.BENCH_MEASURED,
    "README.md": _evidence.BENCH_MEASURED,
    "docs/reliability.md": _evidence.CHAOS_MEASURED,
}
CELL_SPLIT = re.compile(r"(?<!\\)\|")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in CELL_SPLIT.split(line.strip().strip("|"))]


def evidence_rows(text: str) -> list[tuple[int, str, str]]:
    """(line number, commit cell, status cell) of every row of every table whose last two
    columns are ``commit`` and ``status``."""
    lines, rows, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("|") and _cells(line)[-2:] == ["commit", "status"]:
            i += 2  # the header and the separator
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = _cells(lines[i])
                rows.append((i + 1, cells[-2], cells[-1]))
                i += 1
            continue
        i += 1
    return rows


@functools.cache
def _differs(commit: str, measured: tuple[str, ...]) -> bool | None:
    return _evidence.differs_from_head(commit, measured)


def problems(text: str, measured: Sequence[str]) -> list[str]:
    """What a report claims that git contradicts (empty: the report is honest)."""
    rows = evidence_rows(text)
    if not rows:
        return ["no table with `commit` and `status` columns: its figures name no commit"]
    out = []
    stale = 0
    for number, commit_cell, status in rows:
        if status.startswith("**stale**"):
            stale += 1
            continue
        if status != "current":
            out.append(f"line {number}: status {status!r} is neither 'current' nor "
                       "'**stale**: ...'")
            continue
        commits = _evidence.SHA.findall(commit_cell)
        if not commits or _evidence.SHA.sub("", commit_cell).strip(" /"):
            out.append(f"line {number}: marked current, but its commit cell {commit_cell!r} "
                       "does not name only commits")
        for commit in commits:
            differs = _differs(commit, tuple(measured))
            if differs is None:
                out.append(f"line {number}: marked current, but commit {commit} is not in "
                           "this repository's history")
            elif differs:
                out.append(f"line {number}: marked current, but the measured code of commit "
                           f"{commit} differs from HEAD's")
    headers = _evidence.HEADER.findall(text)
    if len(headers) != 1:
        out.append(f"{len(headers)} headers '**N of M rows** measured on older code' "
                   "(expected exactly one)")
    else:
        claimed = (int(headers[0][0]), int(headers[0][1]))
        if claimed != (stale, len(rows)):
            out.append(f"the header says {claimed[0]} of {claimed[1]} rows are stale; the "
                       f"rows say {stale} of {len(rows)}")
    return out


@pytest.fixture(scope="module")
def history() -> str:
    try:
        return _evidence.head()
    except _evidence.GitUnavailable as exc:
        _require.missing(f"NO GIT HISTORY: the published figures cannot be checked against "
                         f"the code ({exc}); check out with full history")


@pytest.mark.parametrize("report", sorted(REPORTS))
def test_published_figures_name_their_commit(history: str, report: str) -> None:
    text = (ROOT / report).read_text(encoding="utf-8")
    found = problems(text, REPORTS[report])
    assert not found, (
        f"{report} publishes figures as current that do not describe HEAD ({history[:7]}):\n  "
        + "\n  ".join(found)
        + "\nRerun `make bench` / `make chaos` on this commit, or re-render the report so "
        "that it marks those rows stale (`python -m bench --summary-only`, `python -m "
        "tests.chaos.report tests/chaos/results docs/reliability.md`).")


def test_the_check_catches_a_stale_row_passed_off_as_current(history: str) -> None:
    """The check itself can fail: the first commit of the history differs from HEAD in
    its measured code, so a row that names it as current is refused, while the same row
    marked stale passes; a wrong header count is refused too."""
    first = _evidence.git("rev-list", "--max-parents=0", "HEAD").stdout.split()[-1]
    if not _differs(first, _evidence.BENCH_MEASURED):
        pytest.skip("the first commit's measured code equals HEAD's")
    table = ("**{n} of 1 rows** measured on older code\n\n| case | commit | status |\n"
             "|---|---|---|\n| w1 | `{sha}` | {status} |\n")
    honest = table.format(n=1, sha=first[:7], status="**stale**: measured code differs")
    assert problems(honest, _evidence.BENCH_MEASURED) == []
    lying = table.format(n=0, sha=first[:7], status="current")
    assert any("differs from HEAD's" in p for p in problems(lying, _evidence.BENCH_MEASURED))
    miscounted = table.format(n=0, sha=first[:7], status="**stale**: measured code differs")
    assert any("header says" in p for p in problems(miscounted, _evidence.BENCH_MEASURED))
    current = table.format(n=0, sha=history[:7], status="current")
    assert problems(current, _evidence.BENCH_MEASURED) == []


def test_result_files_record_commit_and_clean(history: str) -> None:
    """A stamp names HEAD and judges cleanliness over the measured paths only."""
    head = history
    stamp = _evidence.stamp(_evidence.BENCH_MEASURED)
    assert stamp["commit"] == head and isinstance(stamp["clean"], bool)
    assert _evidence.staleness(None, True, _evidence.BENCH_MEASURED) == "commit not recorded"
    assert _evidence.staleness("0" * 40, True, _evidence.BENCH_MEASURED) is not None
    assert _evidence.staleness(head, False, _evidence.BENCH_MEASURED) is not None
    assert _evidence.staleness(head, True, _evidence.BENCH_MEASURED) is None


def tool_result_problems(results: dict[str, tuple[str, ...]]) -> list[str]:
    """Each standalone tool's result names a commit of this history, on a clean tree, and
    was made by the tool as it is now. The library may have changed since: its figures
    are then published marked stale (the rendering checks below hold that), never held
    back or left unmarked."""
    out = []
    for path, tool in sorted(results.items()):
        doc = json.loads((ROOT / path).read_text(encoding="utf-8"))
        git = doc.get("machine", {}).get("git", {})
        commit, clean = git.get("commit"), git.get("clean")
        reason = ("commit not recorded" if not commit
                  else "commit not in this history" if _evidence.resolve(commit) is None
                  else "measured on modified code" if clean is not True
                  else "its tool changed since" if _differs(commit, tool) else None)
        if reason:
            out.append(f"{path} ({_evidence.short(commit)}): {reason}")
    return out


def test_tool_results_are_their_tools(history: str) -> None:
    """probes.json, capacity.json and read_replica.json are rerun when their tool
    changes; a change to the library only marks their published figures stale."""
    found = tool_result_problems(_evidence.BENCH_TOOLS)
    assert not found, ("results of `make bench`'s tools that their tool no longer makes "
                       "(rerun `make bench`):\n  " + "\n  ".join(found))


# -- every published figure is its result file's ------------------------------------------------
#
# The reports and the documentation's figures are rendered from the result files; the
# published text must be exactly what rendering them gives now (a figure edited by hand,
# or a result file changed without re-rendering, fails), and the documents quote no
# measured figure outside a rendered block (a figure no result file holds fails).

#: A measured figure: a number with a unit of measurement (durations in seconds are
#: left out: they are mostly settings, such as a lease or a timeout).
FIGURE = re.compile(r"(?<![\w.`=-])\d[\d,]*(?:\.\d+)?(?:\s?(?:µs|ms|jobs/s|calls/s|MB/s|MB|GB|TB|"
                    r"kB|KB|bytes|%)|x)(?![\w/])")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)
RENDERED_ON = re.compile(r"Rendered \d{4}-\d{2}-\d{2}")


def _diff(published: str, rendered: str, name: str) -> str:
    import difflib

    lines = difflib.unified_diff(published.splitlines(), rendered.splitlines(),
                                 f"{name} (published)", f"{name} (rendered now)", lineterm="", n=0)
    return "\n".join(list(lines)[:40])


def rendering_problems(name: str, published: str, rendered: str) -> list[str]:
    if published == rendered:
        return []
    return [f"{name} differs from what its result files render (a figure edited by hand, "
            f"or results not re-rendered: `python -m bench --summary-only`):\n"
            + _diff(published, rendered, name)]


def stray_figures(text: str) -> list[str]:
    """Measured figures quoted outside every rendered block (and outside code)."""
    from bench import _docs, _report

    begin, end = text.find(_report.README_BEGIN), text.find(_report.README_END)
    if 0 <= begin < end:
        text = text[:begin] + text[end:]
    return FIGURE.findall(CODE.sub("", _docs.outside_blocks(text)))


def _performance_section(readme: str) -> str:
    start = readme.index("## Performance")
    return readme[start:readme.index("\n## ", start + 1)]


def test_the_summary_is_what_its_result_files_render(history: str) -> None:
    from bench import _report

    published = (ROOT / "bench/results/summary.md").read_text(encoding="utf-8")
    rendered = _report.summary(_report.load(ROOT / "bench/results"))
    found = rendering_problems("bench/results/summary.md", published, rendered)
    assert not found, found[0]


def test_the_readme_table_is_what_its_result_files_render(history: str) -> None:
    from bench import _report

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    begin, end = readme.index(_report.README_BEGIN), readme.index(_report.README_END)
    published = readme[begin:end + len(_report.README_END)]
    rendered = _report.readme_table(_report.load(ROOT / "bench/results"))
    found = rendering_problems("README.md's performance table", published, rendered)
    assert not found, found[0]


def test_reliability_is_what_its_result_files_render(history: str) -> None:
    from tests.chaos import report

    published = (ROOT / "docs/reliability.md").read_text(encoding="utf-8")
    rendered = report.render(report.load(ROOT / "tests/chaos/results"))
    found = rendering_problems("docs/reliability.md", RENDERED_ON.sub("Rendered", published),
                               RENDERED_ON.sub("Rendered", rendered))
    assert not found, found[0] + ("\nRe-render: `python -m tests.chaos.report "
                                  "tests/chaos/results docs/reliability.md`")


def test_document_figures_are_what_their_result_files_render(history: str) -> None:
    from bench import _docs

    found = []
    for name in _docs.DOCS:
        published = (ROOT / name).read_text(encoding="utf-8")
        found += rendering_problems(name, published, _docs.render(published))
    assert not found, "\n".join(found)


def test_no_document_quotes_a_figure_no_result_file_holds() -> None:
    from bench import _docs

    found = {}
    for name in _docs.DOCS:
        text = (ROOT / name).read_text(encoding="utf-8")
        if name == "README.md":
            text = _performance_section(text)
        if figures := stray_figures(text):
            found[name] = figures
    assert not found, ("figures quoted outside a block rendered from a result file "
                       f"(bench/_docs.py renders them; move them there or remove them): {found}")


def test_the_checks_catch_a_figure_edited_by_hand(history: str) -> None:
    """6,342 -> 63,342 in any rendered figure is refused, and so is a new figure added
    by hand outside a block."""
    from bench import _docs, _report

    docs = _report.load(ROOT / "bench/results")
    summary = _report.summary(docs)
    figure = re.search(r"\| (\d[\d,]+\.\d) \|", summary)
    assert figure is not None
    edited = summary.replace(figure[0], f"| 6{figure[1]} |", 1)
    assert rendering_problems("summary.md", edited, summary)
    scaling = (ROOT / "docs/scaling.md").read_text(encoding="utf-8")
    rendered = _docs.render(scaling)
    match = re.search(r"\*\*(\d[\d,.]*) µs", rendered)
    assert match is not None
    assert _docs.render(rendered.replace(match[0], f"**6{match[1]} µs", 1)) == rendered
    assert rendering_problems("scaling", rendered.replace(match[0], f"**6{match[1]} µs", 1),
                              rendered)
    assert stray_figures("On our machine it ran 63,342 jobs/s.\n") == ["63,342 jobs/s"]
    assert stray_figures("`63,342 jobs/s` and 1.25x") == ["1.25x"]
