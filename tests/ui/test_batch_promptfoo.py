"""#32 in the Batch tab: promptfoo's small suite (a chat prompt file, an inline chat, two providers one with a
seed, javascript and levenshtein asserts) uploaded as it is, run, and exported in promptfoo's results shape."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.ui.pages import export_file, open_page, tab, wait_text

pytestmark = [pytest.mark.real_model, pytest.mark.browser]

SUITE = ROOT / "tests" / "data" / "promptfoo" / "chat"


def test_a_promptfoo_suite_uploaded_runs_and_exports_promptfoos_shape(server, browser, tmp_path):
    """Uploaded unchanged, with the chat prompt file its file:// names beside it (both files chosen at once)."""
    page = open_page(browser, server.url)
    tab(page, "Batch")
    with page.expect_file_chooser() as chooser:
        page.locator("#batch-upload").click()
    chooser.value.set_files([str(SUITE / "promptfooconfig.yaml"), str(SUITE / "prompt_chat.json")])
    wait_text(page, "#batch-upload-note", "8 prompts × 2 providers", 30_000)
    page.locator("#batch-check").click()
    wait_text(page, "#batch-plan", "16 cells", 30_000)
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 16/16", 240_000)
    table = page.locator("#batch-results").inner_text()
    assert "greedy" in table and "seeded" in table and "levenshtein" in table
    page.get_by_role("tab", name="Runs").click()
    saved = export_file(page, "batch-export-promptfoo", "batch-export-file", tmp_path / "results.json")
    results = json.loads(saved.read_text())["results"]["results"]
    assert len(results) == 16 and {r["provider"]["label"] for r in results} == {"greedy", "seeded"}
    assert {r["vars"]["country"] for r in results} == {"France", "Japan", "Italy", "Spain"}
    italy = next(r for r in results if r["vars"]["country"] == "Italy")
    assert [c["assertion"]["type"] for c in italy["gradingResult"]["componentResults"]] == ["levenshtein"]
    page.close()


def test_a_refused_upload_says_why_in_its_note_and_it_stays(server, browser, tmp_path):
    """#46 item 9: a suite whose provider is `id: workbench` (no model) is refused in the upload note, which keeps
    saying so (a toast vanishes); an earlier accepted upload is no longer used."""
    suite = tmp_path / "promptfooconfig.yaml"
    suite.write_text("prompts: ['Say {{word}}']\nproviders:\n  - id: workbench\ntests:\n  - vars: {word: hi}\n")
    page = open_page(browser, server.url)
    tab(page, "Batch")
    with page.expect_file_chooser() as chooser:
        page.locator("#batch-upload").click()
    chooser.value.set_files(str(suite))
    wait_text(page, "#batch-upload-note", "Not used: promptfoo config: providers[0]: workbench: needs a model name",
              30_000)
    wait_text(page, "#batch-upload-note", "The prompts in the text box are used until an upload is accepted.")
    page.wait_for_function("() => !document.querySelector('.toast-body')", timeout=30_000)  # no toast, or it went
    assert "workbench: needs a model name" in page.locator("#batch-upload-note").inner_text()
    page.close()
