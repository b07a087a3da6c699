"""The scoreboard page in a real browser (Chromium through Playwright), opened from file://.

The page is built from the checked-in tables in docs/support/, one run's summary whose test names
and messages carry markup, a malformed summary, and two earlier runs as history. Each test fails on
a console error or an uncaught exception of the page. Run by `make scoreboard-test`, never by
`make test` (tests/browser/ is outside its collection).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page, expect

from conformance.reporting.scoreboard import page as scoreboard_page, sources

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "support"
#: What `make scoreboard` built from this checkout's reports (make scoreboard-test builds it first).
BUILT_HERE = ROOT / "reports" / "scoreboard" / "index.html"
#: Markup in report text: shown as text, it neither runs nor adds an element.
PAYLOAD = '<script>window.injected = 1</script><img src="x" onerror="window.injected = 2">'
IMPLS = ["reference", "inductor", "aot_eager"]


def _summary(started: str, failed_message: str = "") -> dict:
    tests = [
        {"id": "test_backend_contract.py::test_compiles", "outcome": "passed", "duration": 0.1, "message": "",
         "spec": ["001.param.model"]},
        {"id": f"test_backend_contract.py::test_named[{PAYLOAD}]", "outcome": "failed", "duration": 0.2,
         "message": failed_message, "spec": ["001.param.fullgraph-true-raises"]},
        {"id": "test_cache_key.py::test_fallback", "outcome": "fell back", "duration": 0.1, "message": "fell back: eager ran"},
        {"id": "test_cache_key.py::test_skip", "outcome": "skipped", "duration": 0.0, "message": "not supported"},
    ]
    totals = dict.fromkeys(("passed", "failed", "fell back", "error", "skipped", "xfailed", "xpassed"), 0)
    contracts: dict = {}
    for t in tests:
        totals[t["outcome"]] += 1
        c = contracts.setdefault(t["id"].split(".py")[0].removeprefix("test_"), dict.fromkeys(totals, 0))
        c[t["outcome"]] += 1
    return {"schema_version": 3, "implementation": "reference", "lane": "default", "started": started, "wall_s": 2.0,
            "totals": totals, "contracts": contracts, "tests": tests, "support": []}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("scoreboard")
    run = root / "reports" / "reference" / "default"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(_summary("2026-12-06T09:00:00+00:00", f"AssertionError: {PAYLOAD}")))
    broken = root / "reports" / "inductor" / "default"
    broken.mkdir(parents=True)
    (broken / "summary.json").write_text("{not json")
    for i, day in enumerate(("2026-12-01", "2026-12-03")):
        (root / "history" / str(i)).mkdir(parents=True)
        (root / "history" / str(i) / "summary.json").write_text(json.dumps(_summary(f"{day}T09:00:00+00:00")))
    inputs = sources.read(DOCS, root / "reports", root / "history")
    data = scoreboard_page.shape(inputs)
    index = scoreboard_page.write(root / "out", data)
    return {"url": index.as_uri(), "data": data, "broken": str(broken / "summary.json")}


def _watch(page: Page) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(f"uncaught: {exc}"))
    page.on("dialog", lambda d: (problems.append(f"a {d.type} dialog opened: {d.message}"), d.dismiss()))
    return problems


@pytest.fixture
def opened(page: Page, built: dict):
    problems = _watch(page)
    page.goto(built["url"])
    expect(page.locator("#ops-status")).to_contain_text("Showing")
    yield page
    assert page.evaluate("window.injected") is None, "report text ran as markup"
    assert problems == []


@pytest.mark.skipif(not BUILT_HERE.is_file(), reason=f"{BUILT_HERE} not built (make scoreboard-test builds it first)")
def test_the_page_built_from_this_checkout_opens_without_errors(page: Page):
    problems = _watch(page)
    page.goto(BUILT_HERE.as_uri())
    expect(page.locator("#ops-status")).to_contain_text("Showing")
    assert page.locator("#overview thead th.impl").all_inner_texts()[:3] == IMPLS
    page.locator("#ops-table tbody tr").first.click()
    expect(page.locator("#op-detail")).to_be_visible()
    assert problems == []


def test_the_three_implementations_stand_side_by_side(opened: Page, built: dict):
    overview = opened.locator("#overview thead th.impl")
    assert overview.all_inner_texts()[:3] == IMPLS
    assert opened.locator("#ops-table thead th[data-impl]").all_inner_texts() == IMPLS
    entries = len(built["data"]["ops"]["entries"])
    expect(opened.locator("#ops-status")).to_have_text(f"Showing {entries} of {entries} entries.")
    expect(opened.locator("#ops-table tbody tr")).to_have_count(entries)
    for name in IMPLS:
        rows = len(built["data"]["ops"]["impls"][name]["cells"])
        assert opened.locator(f'#ops-table td.cell[data-impl="{name}"]').count() == rows


def test_filtering_to_one_verdict_leaves_the_rows_that_have_it(opened: Page, built: dict):
    ops = built["data"]["ops"]
    wrong = ops["verdicts"].index("wrong")
    expected = {ops["entries"][c[0]] for t in ops["impls"].values() for c in t["cells"] if c[2] == wrong}
    opened.select_option("#f-verdict", "wrong")
    rows = opened.locator("#ops-table tbody tr")
    expect(rows).to_have_count(len(expected))
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.entry)")) == expected
    for i in range(rows.count()):
        assert rows.nth(i).locator('td[data-verdict="wrong"]').count() >= 1
    # every other cell stays, greyed: the verdict's cells are the only coloured ones
    assert opened.locator("#ops-table td.v-wrong").count() == opened.locator('#ops-table td[data-verdict="wrong"]').count()

    opened.select_option("#f-impl", "inductor")
    opened.select_option("#f-dtype", "float16")
    assert opened.locator("#ops-table thead th[data-impl]").all_inner_texts() == ["inductor"]
    inductor = {ops["entries"][c[0]] for c in ops["impls"]["inductor"]["cells"]
                if c[2] == wrong and ops["dtypes"][c[1]] == "float16"}
    expect(rows).to_have_count(len(inductor))
    expect(opened.locator("#ops-status")).to_contain_text("with a wrong cell for inductor in float16")


def test_a_rows_detail_opens_on_click(opened: Page, built: dict):
    ops = built["data"]["ops"]
    # a wrong cell (the reference's table has no error rows since its lowering probe), with its cause
    wrong = ops["verdicts"].index("wrong")
    cell = next(c for c in ops["impls"]["reference"]["cells"] if c[2] == wrong and ops["strings"][c[3]])
    entry, message = ops["entries"][cell[0]], ops["strings"][cell[3]]
    opened.fill("#f-text", entry)
    row = opened.locator(f'#ops-table tbody tr[data-entry="{entry}"]')
    expect(row).to_have_count(1)
    dtype = ops["dtypes"][cell[1]]
    row.locator(f'td.cell[data-impl="reference"][title="reference, {dtype}: wrong"]').click()
    dialog = opened.locator("#op-detail")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#op-detail-title")).to_have_text(entry)
    expect(dialog.locator("h4")).to_have_text(IMPLS)
    chosen = dialog.locator("tr.chosen")  # the clicked cell's row: its verdict, its cause, its sample
    expect(chosen).to_have_count(1)
    expect(chosen.locator("th")).to_have_text(dtype)
    expect(chosen.locator("td").nth(0)).to_have_text("wrong")
    expect(chosen.locator("td").nth(1)).to_have_text(message)
    expect(chosen.locator("td").nth(2)).to_have_text(ops["strings"][cell[4]])
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_be_hidden()


def test_a_contracts_failure_links_to_its_message_shown_as_text(opened: Page, built: dict):
    contracts = opened.locator("#contracts table")
    expect(contracts.locator("thead th.impl")).to_have_count(1)
    opened.locator("#run0").evaluate("d => d.open = false")
    contracts.get_by_role("link", name="1 failed").click()
    failure = opened.locator("#run0-backend-contract + ul.problems li")
    expect(failure).to_be_visible()
    expect(failure.locator("code")).to_have_text(f"test_backend_contract.py::test_named[{PAYLOAD}]")
    expect(failure.locator("pre")).to_have_text(f"AssertionError: {PAYLOAD}")
    expect(opened.locator(".warning")).to_contain_text(built["broken"])
    expect(opened.locator("#history svg[role=img]")).to_have_count(1)


def test_no_serious_accessibility_violations(opened: Page):
    opened.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
    opened.select_option("#f-verdict", "wrong")
    # no preload: axe would fetch the style sheet with an XMLHttpRequest, which file:// refuses
    options = {"resultTypes": ["violations"], "preload": False}
    results = Axe().run(opened, options=options)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == [], results.generate_report()
    opened.locator("#ops-table tbody tr td.cell").first.click()  # and with a row's detail open
    expect(opened.locator("#op-detail")).to_be_visible()
    results = Axe().run(opened, options=options)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == [], results.generate_report()
