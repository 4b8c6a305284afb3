"""The dashboard in a real browser: Debian's chromium driven through its chromedriver.

Skipped, saying why, where no chromium/chromedriver is installed (``.ci/run`` installs both).
Selenium Manager never runs: the driver's path is given, so nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reports.dashboard_rows import (
    PLANTED,
    TOLERANCE_MESSAGE,
    row,
    small_run,
    synthetic_run,
)
from torch_onnx_conformance.reports.html import build_site
from torch_onnx_conformance.reports.html.browser import chromium_paths

pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
pytestmark = pytest.mark.skipif(
    chromium_paths() is None,
    reason="no chromium and chromedriver on PATH (apt-get install chromium chromium-driver)",
)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from torch_onnx_conformance.reports.html.browser import open_browser

    driver = open_browser(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


def open_site(driver, site: Path) -> None:
    from torch_onnx_conformance.reports.html.browser import open_site as load

    load(driver, site)


def wait_for(driver, condition, timeout=10):
    return WebDriverWait(driver, timeout).until(lambda d: condition())


def console_errors(driver) -> list[str]:
    try:
        logs = driver.get_log("browser")
    except Exception:  # not every driver keeps the console
        return []
    return [entry["message"] for entry in logs if entry["level"] == "SEVERE"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    baseline = [
        row("op::abs::s000::f32::static::opset20::cpu::ours", "fail", stage="compare"),
        row("op::add::s001::f32::static::opset20::cpu::ours", "pass"),
        row("op::gone::s000::f32::static::opset20::cpu::ours", "pass"),
    ]
    build_site(small_run(), out, baseline=baseline)
    return out


def test_matrix_cell_lists_cases_with_numbers_and_repro(browser, site, tmp_path):
    open_site(browser, site)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.subject-row")
    assert [r.get_attribute("data-subject") for r in rows][:2] == ["abs", "add"]
    add = browser.find_element(By.CSS_SELECTOR, "tr.subject-row[data-subject='add']")
    cell = add.find_elements(By.CSS_SELECTOR, "td.cell")[0]
    assert cell.text == "0/2"
    assert "st-unexpected" in cell.get_attribute("class")
    cell.click()
    cases = browser.find_elements(By.CSS_SELECTOR, "#cases-list .case")
    assert len(cases) == 2
    text = browser.find_element(By.ID, "cases-list").text
    assert TOLERANCE_MESSAGE in text  # numbers intact
    assert "alpha other than 1 is not lowered yet" in text
    assert (
        "python -m torch_onnx_conformance repro op::add::s001::f32::static::opset20::cpu::ours"
        in text
    )
    assert browser.get_screenshot_as_file(str(tmp_path / "matrix.png"))
    assert (tmp_path / "matrix.png").stat().st_size > 1000
    assert console_errors(browser) == []


def test_filters(browser, site):
    open_site(browser, site)
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("unexpected")
    subjects = [
        r.get_attribute("data-subject")
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.subject-row")
    ]
    assert subjects == ["add", f"evil{PLANTED}"]
    Select(browser.find_element(By.ID, "filter-status")).select_by_value("")
    Select(browser.find_element(By.ID, "filter-exporter")).select_by_value("torch-dynamo")
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#matrix thead th")]
    assert headers == ["op / model", "torch-dynamo opset18 cpu f32"]
    Select(browser.find_element(By.ID, "filter-exporter")).select_by_value("")
    box = browser.find_element(By.ID, "filter-text")
    box.send_keys("resnet")
    wait_for(
        browser,
        lambda: (
            [
                r.get_attribute("data-subject")
                for r in browser.find_elements(By.CSS_SELECTOR, "tr.subject-row")
            ]
            == ["torchvision/resnet18"]
        ),
    )


def test_diff_view(browser, site):
    open_site(browser, site)
    browser.find_element(By.ID, "tab-diff").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "diff-removed"))
    assert browser.find_element(By.ID, "diff-counts").text == (
        "broken 1 · fixed 1 · changed 0 · new 5 · removed 1"
    )
    broken = browser.find_element(By.ID, "diff-broken").text
    assert (
        "pass → fail" in broken and "op::add::s001" in broken and "max abs error 2.1e-05" in broken
    )
    assert "fail → pass" in browser.find_element(By.ID, "diff-fixed").text
    assert "op::gone::s000" in browser.find_element(By.ID, "diff-removed").text


def test_history_view_carries_status_since(browser, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    rows = small_run()
    build_site(rows, first, runs=[{"run_id": "a", "started": "2026-11-01T00:00:00Z"}])
    rows[0].status = "fail"
    build_site(
        rows,
        second,
        runs=[{"run_id": "b", "started": "2026-11-02T00:00:00Z", "commit": "abc"}],
        history=first / "history.jsonl",
    )
    lines = (second / "history.jsonl").read_text().splitlines()
    assert [json.loads(line)["run"] for line in lines] == [
        "2026-11-01T00:00:00Z",
        "2026-11-02T00:00:00Z abc",
    ]
    since = json.loads((second / "history-cases.json").read_text())["cases"]
    assert since[rows[0].id] == ["fail", "2026-11-02T00:00:00Z abc"]
    assert since[rows[1].id] == ["pass", "2026-11-01T00:00:00Z"]
    open_site(browser, second)
    browser.find_element(By.ID, "tab-history").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "history-table"))
    table = browser.find_element(By.ID, "history-table").text
    assert "ours opset20" in table and "2026-11-02T00:00:00Z abc" in table
    assert len(browser.find_elements(By.CSS_SELECTOR, "svg.trend polyline")) == 2
    # Without --baseline the diff is against the previous run of the history.
    browser.find_element(By.ID, "tab-diff").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "diff-removed"))
    assert browser.find_element(By.ID, "diff-against").text == (
        "Compared with the previous run in the history, 2026-11-01T00:00:00Z."
    )
    assert f"pass → fail{rows[0].id}" in browser.find_element(By.ID, "diff-broken").text
    browser.find_element(By.ID, "tab-history").click()
    browser.find_element(By.ID, "since-id").send_keys(rows[1].id)
    browser.find_element(By.CSS_SELECTOR, "#since-form button").click()
    wait_for(browser, lambda: browser.find_element(By.ID, "since-answer").text)
    assert browser.find_element(By.ID, "since-answer").text == (
        f"{rows[1].id}: pass since 2026-11-01T00:00:00Z"
    )


def test_planted_markup_is_text_and_never_runs(browser, site):
    open_site(browser, site)
    evil = browser.find_element(
        By.CSS_SELECTOR, "tr.subject-row:nth-child(n)[data-subject^='evil']"
    )
    assert evil.find_element(By.CSS_SELECTOR, "th").text == f"evil{PLANTED}"
    evil.find_elements(By.CSS_SELECTOR, "td.cell:not(.empty)")[0].click()
    text = browser.find_element(By.ID, "cases-list").text
    assert f"RuntimeError: {PLANTED}" in text
    assert f"op::evil{PLANTED}::s000" in text
    assert browser.find_elements(By.CSS_SELECTOR, "#cases-list img, #matrix img") == []
    assert browser.find_elements(By.CSS_SELECTOR, "main script") == []
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    browser.find_element(By.ID, "tab-diff").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "diff-removed"))
    assert PLANTED in browser.find_element(By.ID, "diff-new").text
    assert browser.execute_script("return typeof window.__pwned") == "undefined"


def test_fifty_thousand_cases_load_fast(browser, tmp_path):
    from torch_onnx_conformance.reports.html.browser import measure_load

    site = tmp_path / "big"
    build_site(synthetic_run(50_000), site)
    load = measure_load(browser, site)
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.family")) == 40
    assert browser.find_elements(By.CSS_SELECTOR, "tr.subject-row") == []  # folded
    browser.find_element(By.CSS_SELECTOR, "tr.family th").click()
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "tr.subject-row"))
    print(f"\n50,000 cases: {load} (bench/dashboard_load.py measures it on its own)")
    # Generous bounds: the first load is the index alone, whatever the run's size.
    assert load.first_load_bytes < 1_000_000
    assert load.matrix_s < 10


def test_tolerance_view_lists_the_one_table(browser, site):
    open_site(browser, site)
    browser.find_element(By.ID, "tab-tolerances").click()
    table = browser.find_element(By.ID, "tolerance-table").text
    assert "op cases element f32 1e-05 1e-05" in table
    assert "Eager noise (model cases)" in browser.find_element(By.ID, "view-tolerances").text
