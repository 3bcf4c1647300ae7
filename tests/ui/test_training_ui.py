"""The Training tab in a real browser, on the tiny model (a workbench started with --model tiny): upload a dataset,
fill the settings, preview, a bad setting refused, start, watch the loss plot grow, stop, reload (the run and its
form are shown again), resume to the end; the tab's own buttons compare it in A/B (side B's requests alone: the
status line shows no adapter after the run, the side's stats name it) and measure its perplexity; the adapter is
listed in the Model tab's LoRA panel and attaches there.

600 steps (~15 s at ~40 steps/s on one core) leave room for the page's own latency between Start and Stop."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import (choose, choose_preset, open_page, reload, screenshot, set_number, tab, toast, upload_file,
                            wait_text)

pytestmark = [pytest.mark.browser, pytest.mark.alone]  # Stop must land before 600 steps end
NOTES = ROOT / "tests" / "data" / "training" / "notes.txt"
TRAIN_LINE = "#train-plot g.mark-line path"
SETTINGS = {"max_steps": 600, "cutoff_len": 64, "micro_batch_size": 4, "learning_rate": 0.01, "eval_percent": 25,
            "eval_every": 5}


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir, tiny_model_dir):
    user_data = user_data_with_default_model(tmp_path_factory.mktemp("training") / "data", default_model_dir)
    (user_data / "models").mkdir(exist_ok=True)
    (user_data / "models" / "tiny").symlink_to(tiny_model_dir, target_is_directory=True)
    with running_server(user_data, "--model", "tiny") as srv:
        srv.user_data = user_data
        yield srv


def plotted(page) -> str:
    """The training loss line as drawn (its SVG path; '' before there is one)."""
    return page.evaluate(f"() => {{ const p = document.querySelector('{TRAIN_LINE}'); "
                         "return p ? p.getAttribute('d') : ''; }")


def test_train_watch_the_loss_stop_resume_and_attach(server, browser):
    page = open_page(browser, server.url)
    tab(page, "Training")
    assert page.locator("#train-model input").input_value() == "tiny"  # the model in use is offered first
    upload_file(page, "train-upload", NOTES)
    page.wait_for_function("() => document.querySelector('#train-dataset input').value === 'notes.txt'",
                           timeout=30_000)
    assert (server.user_data / "training" / "datasets" / "notes.txt").read_text() == NOTES.read_text()
    page.locator("#train-name textarea").press_sequentially("notes", delay=30)
    for name, value in SETTINGS.items():
        set_number(page, f"train-{name}", value)
    page.locator("#train-preview-button").click()
    wait_text(page, "#train-preview", "raw dataset notes.txt: 1 training examples, 1 for eval, 0 cut", 30_000)

    set_number(page, "train-rank", 0)
    page.locator("#train-start").click()  # refused before anything runs, with the backend's message
    toast(page, "training setting 'rank' takes an integer from 1 to 1024; got 0")
    assert "No training has run" in page.locator("#train-status").inner_text()
    set_number(page, "train-rank", 8)
    page.locator("#train-start").click()
    wait_text(page, "#train-status", "Training 'notes' on tiny: step", 60_000)
    wait_text(page, "#train-status", "share its cores, so each is slower")  # on the CPU, it says so
    page.wait_for_function(f"() => document.querySelector('{TRAIN_LINE}')", timeout=30_000)
    first = plotted(page)
    page.wait_for_function(f"d => document.querySelector('{TRAIN_LINE}').getAttribute('d') !== d", arg=first,
                           timeout=30_000)  # the plot grows as the steps come
    assert len(plotted(page)) > len(first)
    page.locator("#train-stop").click()
    wait_text(page, "#train-status", "Stopped 'notes' on tiny: stopped at step", 60_000)
    stopped = int(page.locator("#train-steps").inner_text().split("/")[0])
    assert 0 < stopped < 600 and (server.user_data / "training" / "checkpoints" / "notes").is_dir()

    reload(page)  # a reloaded page shows the run as it is, and the form it was started with
    tab(page, "Training")
    wait_text(page, "#train-status", "Stopped 'notes' on tiny: stopped at step", 30_000)
    page.wait_for_function("() => document.querySelector('#train-name textarea').value === 'notes'", timeout=30_000)
    assert page.locator("#train-max_steps input").input_value() == "600"
    page.locator("#train-resume").click()
    wait_text(page, "#train-status", "Done: 'notes' on tiny: step 600/600", 120_000)
    assert page.locator("#train-steps").inner_text() == "600/600"
    assert (server.user_data / "loras" / "notes" / "training.json").is_file()
    screenshot(page, "training-done")

    choose_preset(page, "Deterministic", "0")  # greedy: the sides differ by the adapter alone
    set_number(page, "params-max_new_tokens", 8)
    tab(page, "Training")
    page.locator("#train-compare").click()
    page.wait_for_function("() => document.querySelector('#ab-b-lora input')?.value === 'notes'",
                           timeout=30_000)  # the A/B tab opens: the base model, without and with it
    assert page.locator("#ab-a-lora input").input_value() == "no adapter"
    assert page.locator("#ab-a-model input").input_value() == page.locator("#ab-b-model input").input_value() == "tiny"
    page.locator("#ab-prompt textarea").press_sequentially("Zorbl is", delay=30)
    page.locator("#ab-chat input").uncheck()
    page.locator("#ab-run").click()
    wait_text(page, "#ab-a-stats", "finish:", 60_000)
    wait_text(page, "#ab-b-stats", "finish:", 60_000)
    assert "LoRA: notes ×1" in page.locator("#ab-b-stats").inner_text()  # each side's stats name its adapter
    assert "LoRA: none" in page.locator("#ab-a-stats").inner_text()
    assert page.locator("#ab-a-output textarea").input_value() != page.locator("#ab-b-output textarea").input_value()
    wait_text(page, "#status-line", "idle", 30_000)  # the status line after the run (it refreshes each second):
    assert "LoRA" not in page.locator("#status-line").inner_text()  # the model runs Chat as before, no adapter
    tab(page, "Training")
    page.locator("#train-perplexity").click()
    wait_text(page, "#train-result", "Perplexity on the eval split of notes.txt (1 examples", 60_000)
    assert "without the adapter" in page.locator("#train-result").inner_text()
    assert "LoRA" not in page.locator("#status-line").inner_text()

    tab(page, "Model")
    choose(page, "lora-pick", "notes")  # listed in the LoRA panel; attaching it is what Chat then runs with
    page.locator("#lora-attach").click()
    wait_text(page, "#lora-active", "Attached: notes ×1", 30_000)
    wait_text(page, "#status-line", "LoRA: notes ×1", 30_000)
    page.close()


def test_instruction_records_get_their_format_and_a_refusal_stays_beside_them(server, browser):
    """#46 item 9: an instruction dataset gets the format that reads it, said beside it; with the format set back to
    none, Start is refused on the page (not in a vanishing toast) and the format that reads it is chosen again.
    Item 11: Estimate says how long the run would take, from a few of its steps, before Start."""
    page = open_page(browser, server.url)
    tab(page, "Training")
    upload_file(page, "train-upload", ROOT / "tests" / "data" / "training" / "alpaca.jsonl")
    wait_text(page, "#train-dataset-note", "the format alpaca reads every one (it is chosen for them)", 30_000)
    page.wait_for_function("() => document.querySelector('#train-format input').value === 'alpaca'", timeout=30_000)
    choose(page, "train-format", "none: raw text (.txt) or chat records")
    page.locator("#train-name textarea").fill("")
    page.locator("#train-name textarea").press_sequentially("recipes", delay=30)
    page.locator("#train-start").click()
    wait_text(page, "#train-start-note", "Refused: 'alpaca.jsonl' holds instruction records: name their format",
              30_000)
    wait_text(page, "#train-start-note", "The format alpaca reads this dataset; it is now chosen")
    page.wait_for_function("() => document.querySelector('#train-format input').value === 'alpaca'", timeout=30_000)
    assert "Refused" in page.locator("#train-start-note").inner_text()  # it stays on the page
    assert "recipes" not in page.locator("#train-status").inner_text()
    set_number(page, "train-max_steps", 40)  # item 11: before Start, how long the run would take
    page.locator("#train-estimate-button").click()
    wait_text(page, "#train-estimate", "About", 120_000)
    said = page.locator("#train-estimate").inner_text()
    assert " on cpu: 40 steps × " in said and "(timed over 2 of them just now)" in said
    assert "recipes" not in page.locator("#train-status").inner_text()  # nothing ran
    page.close()
