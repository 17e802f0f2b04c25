"""The report in a real browser: Debian's Chromium driven by Playwright (pointed at the system browser, nothing
downloaded; scripts/setup-tests installs both). Also keeps docs/images/report-*.png, the README's screenshots."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from polar_cli.report import build_report, iter_sessions
from tests.support.synth_run import write_run

DOCS = Path(__file__).resolve().parents[3] / "docs" / "images"


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium is missing: run scripts/setup-tests (apt-get install -y chromium)"
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = write_run(tmp_path_factory.mktemp("run") / "run", 48, seed=11, size=48)
    build_report(run)
    return run


def open_page(browser: Browser, path: Path) -> tuple[Page, list[str]]:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.goto(path.as_uri())
    return page, errors


def figure(page: Page, name: str) -> int:
    return int(page.locator(f'[data-figure="{name}"] .v').inner_text().replace(",", ""))


def test_the_index_shows_summary_json_s_numbers_and_filters_the_table(browser: Browser, run: Path) -> None:
    summary = orjson.loads((run / "summary.json").read_bytes())
    page, errors = open_page(browser, run / "report" / "index.html")
    assert figure(page, "attempts") == summary["attempts"]
    assert figure(page, "accepted") == summary["accepted"]
    assert figure(page, "rejected") == summary["rejected"]
    assert figure(page, "errors") == summary["errors_last_segment"]
    assert figure(page, "sampled") == summary["tokens"]["completion"]
    assert figure(page, "trainable") == summary["tokens"]["trainable"]
    assert figure(page, "tamper") == summary["reject_reasons"].get("tamper", 0)
    total = len(list(iter_sessions(run)))
    assert page.locator("#rows tr").count() == total
    assert page.locator("[data-stage]").count() == 6  # init, ready_wait, run, postrun, eval, total
    page.screenshot(path=str(DOCS / "report-index.png"))
    page.select_option('[data-filter="harness"]', "pi")
    pi = sum(1 for s in iter_sessions(run) if s.head["harness"] == "pi")
    assert 0 < page.locator("#rows tr").count() == pi < total
    assert page.locator("#count").inner_text() == f"{pi} of {total} sessions"
    page.select_option('[data-filter="kind"]', "accepted")
    assert all(k == "accepted" for k in page.locator("#rows tr").evaluate_all("rs => rs.map(r => r.dataset.kind)"))
    assert errors == []


def test_the_viewer_shows_the_trained_tokens_lineage_and_verdict(browser: Browser, run: Path) -> None:
    session = next(s for s in iter_sessions(run) if s.kind == "accepted" and len(s.rows) == 3)
    trained = sum(sum(r["trace"]["loss_mask"]) for r in session.rows)
    index, errors = open_page(browser, run / "report" / "index.html")
    index.locator(f'#rows a[href="sessions/{session.page}"]').click()
    index.wait_for_selector("#trained")
    assert index.locator("#trained").inner_text() == f"trained tokens: {trained}"
    assert index.locator("#lineage [data-trace]").count() == 3
    assert index.locator("#tests tbody tr").count() == 2
    assert "FAIL_TO_PASS" in index.locator("#tests").inner_text()
    first = session.rows[0]["trace"]
    assert index.locator(".toks .t1").count() == sum(first["loss_mask"])
    assert index.locator(".toks .t0").count() == len(first["loss_mask"]) - sum(first["loss_mask"])
    assert "logprob" in (index.locator(".toks .t1").first.get_attribute("title") or "")
    assert index.locator(".cut").count() == 1  # the root is cut by its compaction
    index.locator("#lineage [data-trace='1']").click()
    assert "compaction" in index.locator("#trace .kv").first.inner_text()
    index.locator("#testlog summary").click()
    assert "PASSED" in index.locator("#testlog pre").inner_text()
    index.locator("[data-tab='0']").click()
    index.screenshot(path=str(DOCS / "report-viewer.png"), full_page=False)
    assert errors == []
