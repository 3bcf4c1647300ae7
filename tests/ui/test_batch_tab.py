"""The Batch tab in a real browser: upload prompts, pick two presets, run, read the table and pass rates, export."""

from __future__ import annotations

import csv
import io

import pytest

from tests.ui.pages import export_file, open_page, screenshot, tab, toast, upload_file, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


def test_upload_two_presets_run_table_pass_rates_export(server, browser, tmp_path):
    prompts = tmp_path / "capitals.csv"
    prompts.write_text("prompt,assert\nWhat is the capital of France?,contains:Paris\n"
                       "What is the capital of Italy?,contains:Rome\n")
    page = open_page(browser, server.url)
    tab(page, "Batch")
    upload_file(page, "batch-upload", prompts)
    wait_text(page, "#batch-upload-note", "2 prompts", 30_000)
    page.locator("#batch-presets").get_by_label("Deterministic").check()
    page.locator("#batch-presets").get_by_label("Precise").check()
    page.locator("#batch-axes textarea").fill("max_new_tokens=10")
    page.locator("#batch-check").click()
    wait_text(page, "#batch-plan", "2 prompts × 2 settings × 1 samples = 4 cells", 30_000)
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 4/4", 180_000)
    table = page.locator("#batch-results").inner_text()
    assert "Deterministic · max_new_tokens=10" in table and "Precise · max_new_tokens=10" in table
    assert "Paris" in table
    page.locator("#batch-results [role='row'][aria-rowindex='2'] [role='gridcell']").first.click()  # review it
    page.locator("#batch-review").get_by_text("bad", exact=True).click()
    page.locator("#batch-review-note textarea, #batch-review-note input").first.fill("too terse")
    page.locator("#batch-review-save").click()
    wait_text(page, "#batch-results", "bad: too terse", 30_000)
    screenshot(page, "batch")
    page.get_by_role("tab", name="Summary").click()
    summary = page.locator("#batch-summary").inner_text()
    assert "pass rate %" in summary and "Deterministic" in summary and "marked bad" in summary
    page.get_by_role("tab", name="Runs").click()
    saved = export_file(page, "batch-export-csv", "batch-export-file", tmp_path / "out.csv")
    rows = list(csv.DictReader(io.StringIO(saved.read_text())))
    assert len(rows) == 4 and {r["setting"] for r in rows} == {"Deterministic · max_new_tokens=10",
                                                                "Precise · max_new_tokens=10"}
    assert any("Paris" in r["output"] for r in rows)
    assert [(r["review"], r["review_note"]) for r in rows if r["review"]] == [("bad", "too terse")]
    assert {(r["model"], r["loader"]) for r in rows} == {("SmolLM2-135M-Instruct", "transformers")}
    page.locator("#batch-rerun").click()  # on what it ran on, which is loaded: every cell from the cache
    wait_text(page, "#batch-progress", "Re-run Finished: 4/4", 60_000)
    page.close()


def test_bad_grid_is_refused_before_running(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Batch")
    page.locator("#batch-prompts textarea").fill("Hello")
    page.locator("#batch-axes textarea").fill("top_p=1.5")
    page.locator("#batch-run").click()
    toast(page, "top_p must be in (0, 1]")
    page.locator("#batch-axes textarea").fill("")
    page.locator("#batch-asserts textarea").fill("regex:([unclosed")
    page.locator("#batch-run").click()
    toast(page, "regex")
    page.close()
