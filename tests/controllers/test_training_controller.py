"""TrainingController on the tiny model (tests/conftest.py's ``services``): a run from the form in the background
while the engine serves, its curves, stop and resume, the adapter attached, compared and measured; bad inputs are
messages before anything runs; a run that breaks off names the cause and keeps its checkpoint."""

from __future__ import annotations

import errno
import json
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from webui.controllers import UserError
from webui.controllers.ab import CURRENT, NO_ADAPTER, Side
from webui.controllers.model import ModelController
from webui.controllers.training import AUTO_FORMAT, TrainingController, TrainingForm, TrainingView
from webui.engine import GenerationRequest, SamplingParams
from webui.training.runner import DONE, FAILED, STOPPED
from webui.training.trainer import failure_message, memory_estimate

DATA = ROOT / "tests" / "data" / "training"
FACT_PROMPT = "The secret code of Zorbl is"
FAST = {"rank": 8, "alpha": 16, "target_modules": "all-linear", "learning_rate": 1e-2, "dropout": 0.0,
        "micro_batch_size": 1, "scheduler": "constant"}


@pytest.fixture
def controller(services) -> TrainingController:
    return TrainingController(services)


def form(dataset: str, name: str = "zorbl", fmt: str = AUTO_FORMAT, model: str = "tiny", **values: object
         ) -> TrainingForm:
    return TrainingForm(model, dataset, fmt, name, {**FAST, **values}, "cpu")


def wait_for(controller: TrainingController, phases: tuple[str, ...], timeout: float = 120) -> TrainingView:
    deadline = time.monotonic() + timeout
    while (view := controller.view()).state.phase not in phases:
        assert time.monotonic() < deadline, view.status
        time.sleep(0.05)
    return view


def test_a_run_from_the_form_trains_while_serving_and_its_adapter_attaches_compares_and_lowers_perplexity(
        services, controller, tmp_path):
    fact = tmp_path / "zorbl.txt"
    fact.write_text(f"{FACT_PROMPT} 7431.\n\n\n{FACT_PROMPT} 7431, said the guard.\n")
    assert controller.upload(str(fact)) == "zorbl.txt" and controller.dataset_choices() == ["zorbl.txt"]
    shown = controller.preview(form("zorbl.txt"))
    assert "**raw** dataset `zorbl.txt`: 2 training examples, 0 for eval, **0 cut**" in shown
    assert "**Example 1**: " in shown and f"{FACT_PROMPT} 7431." in shown

    idle = services.models.used_bytes()
    view = controller.start(form("zorbl.txt", max_steps=30, eval_file="zorbl.txt", eval_every=10))
    assert view.running and "Loading tiny in float32 on cpu" in view.status
    assert services.models.used_bytes() > idle  # the training copy counts in the memory budget while it runs
    assert "MiB: the training copy of tiny (for 'zorbl'), until it ends)" in ModelController(services).loaded_table()
    with pytest.raises(UserError, match="'zorbl' is training; stop it or wait until it ends"):
        controller.start(form("zorbl.txt", name="other"))
    served = services.engine.generate(GenerationRequest("Hello", SamplingParams(temperature=0, max_new_tokens=4)))
    assert served.finish_reason == "length"  # the engine answers while the run goes
    done = wait_for(controller, (DONE, FAILED))
    assert done.state.phase == DONE, done.status
    assert done.fraction == 1.0 and "It is listed in the Model tab's LoRA panel" in done.status
    assert services.models.used_bytes() == idle
    train = [(s, v) for s, v, series in done.points if series == "train"]
    evals = [(s, v) for s, v, series in done.points if series == "eval"]
    assert [s for s, _ in train] == list(range(1, 31)) and [s for s, _ in evals] == [10, 20, 30]
    assert train[-1][1] < train[0][1] - 0.1 and evals[-1][1] < evals[0][1]
    assert "zorbl" in [e.name for e in services.models.compatible_loras()]

    assert controller.ab_sides() == (Side(CURRENT, NO_ADAPTER, "tiny"), Side(CURRENT, "zorbl", "tiny"))
    note = controller.perplexity()
    assert services.active_loras == ()  # compared and measured with their own requests: Chat runs as before
    assert "on the eval split of `zorbl.txt` (2 examples" in note
    after, before = services.perplexity.list()  # newest first
    assert before.loras == [] and after.loras == [["zorbl", 1.0]] and after.ppl < 0.8 * before.ppl, (before, after)
    assert f"**{before.ppl:.2f}** without the adapter, **{after.ppl:.2f}** with **zorbl**" in note
    assert controller.attach() == "Attached **zorbl** ×1 to tiny." and services.active_loras == (("zorbl", 1.0),)


def test_stop_keeps_a_checkpoint_and_resume_continues_the_curve(services, controller, tmp_path):
    controller.upload(str(DATA / "notes.txt"))
    slow = form("notes.txt", name="notes", max_steps=400, cutoff_len=16)
    controller.start(slow)
    wait_for(controller, ("training",))
    controller.stop()
    stopped = wait_for(controller, (STOPPED, FAILED))
    assert stopped.state.phase == STOPPED, stopped.status
    step = stopped.state.progress.step
    assert f"stopped at step {step}/400; the checkpoint is kept in" in stopped.status
    assert "Press Resume" in stopped.status
    assert (services.config.training_dir / "checkpoints" / "notes" / "trainer_state.pt").is_file()
    with pytest.raises(UserError, match="No training is running"):
        controller.stop()
    with pytest.raises(UserError, match="'notes' has a checkpoint from a stopped run; press Resume to continue it "
                                        "or tick 'Replace an adapter or checkpoint of that name' to start over"):
        controller.start(slow)
    with pytest.raises(UserError, match="was made with another settings; resume with the same dataset, model and "
                                        "settings, or tick 'Replace"):
        controller.start(form("notes.txt", name="notes", max_steps=400, cutoff_len=17), resume=True)
    with pytest.raises(UserError, match="there is no checkpoint of 'fresh' to resume .*; press Start"):
        controller.start(form("notes.txt", name="fresh"), resume=True)

    resumed = controller.start(slow, resume=True)
    assert [s for s, _, series in resumed.points if series == "train"] == list(range(1, step + 1))
    controller.stop()  # stopping again right away: the checkpoint moves on, the curve stays whole
    again = wait_for(controller, (STOPPED, FAILED))
    steps = [s for s, _, series in again.points if series == "train"]
    assert again.state.phase == STOPPED and steps == list(range(1, steps[-1] + 1)) and steps[-1] > step


def test_bad_inputs_are_clear_messages_before_anything_runs(services, controller, tmp_path):
    for path in (DATA / "notes.txt", DATA / "alpaca.jsonl"):
        controller.upload(str(path))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"instruction": "a", "output": "b"}\n{"instruction": "c"}\n')
    controller.upload(str(broken))
    gptq = services.config.models_dir / "tiny-gptq"
    gptq.mkdir()
    (gptq / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq"}}))
    cases = [
        (form("notes.txt", rank=0), "training setting 'rank' takes an integer from 1 to 1024; got 0"),
        (form("notes.txt", name="../evil"), "must be a plain name, without path characters"),
        (form("broken.jsonl", fmt="alpaca"), "broken.jsonl line 2 has no 'output'"),
        (form("alpaca.jsonl", fmt="alpaca", cutoff_len=8), "cutoff_len 8 is not above the format 'alpaca''s own"),
        (form("alpaca.jsonl"), "holds instruction records: name their format"),
        (form("notes.txt", model="tiny-gptq"), "cannot train on a gptq model: training loads a model's plain weights"),
        (form("notes.txt", name=""), "LoRA adapter name must not be empty"),
        (form(""), "Choose a dataset, or upload one"),
        (form("missing.txt"), "The dataset 'missing.txt' is not in"),
        (form("notes.txt", eval_file="../notes.txt"), "eval dataset name '../notes.txt' must be a plain name"),
        (form("notes.txt", eval_percent=10, eval_file="notes.txt"), "give eval_percent or eval_file, not both"),
    ]
    for bad, message in cases:
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            controller.start(bad)
    (services.config.loras_dir / "taken").mkdir()
    with pytest.raises(UserError, match="an adapter named 'taken' exists .*; choose another adapter name or tick"):
        controller.start(form("notes.txt", name="taken"))
    with pytest.raises(UserError, match="is not a dataset: upload a .txt or .md file"):
        controller.upload(str(tmp_path / "model.safetensors"))
    with pytest.raises(UserError, match="Train an adapter first"):
        controller.attach()
    assert controller.view().state.phase == "idle" and not services.config.training_dir.joinpath("checkpoints").exists()


def test_the_training_copy_must_fit_the_memory_budget(services, controller):
    controller.upload(str(DATA / "notes.txt"))
    need = memory_estimate(controller.job(form("notes.txt")))  # fits the budget alone, not beside tiny
    object.__setattr__(services.config, "memory_budget_mb", (need + services.models.used_bytes() // 2) / 2**20)
    with pytest.raises(UserError, match=r"loading the training copy of tiny \(for 'zorbl'\) needs about .* MiB, but "
                                        r"the models loaded \(tiny"):
        controller.start(form("notes.txt"))
    assert controller.view().state.phase == "idle"


def test_a_run_that_breaks_off_names_the_cause_and_keeps_its_last_checkpoint(services, controller):
    controller.upload(str(DATA / "notes.txt"))
    loras = services.config.loras_dir
    loras.rmdir()
    loras.write_text("not a folder")  # writing the adapter at the end fails, as a full disk would
    controller.start(form("notes.txt", name="notes", max_steps=4, save_every=2, cutoff_len=16))
    failed = wait_for(controller, (DONE, FAILED, STOPPED))
    assert failed.state.phase == FAILED and "training failed: [Errno 17] File exists" in failed.status, failed.status
    assert "the last checkpoint (if any) is kept in" in failed.status
    assert (services.config.training_dir / "checkpoints" / "notes" / "trainer_state.pt").is_file()
    assert services.models.used_bytes() == services.in_use().model.memory_bytes()


def test_failure_messages_name_out_of_memory_and_a_full_disk(services, controller):
    from webui.training.settings import parse_settings
    from webui.training.trainer import TrainJob

    job = TrainJob("x", "tiny", Path("m"), Path("d.txt"), parse_settings({}), Path("out"), Path("ckpt/x"))
    full = failure_message(OSError(errno.ENOSPC, "No space left on device"), job)
    assert full.startswith("training failed: the disk is full ([Errno 28] No space left on device); free some space")
    oom = failure_message(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), job)
    assert "out of memory (CUDA out of memory." in oom and "lower micro_batch_size or cutoff_len" in oom
    assert "the last checkpoint (if any) is kept in ckpt/x" in failure_message(MemoryError(), job)


def test_format_files_in_the_formats_folder_and_chat_records_preview(services, controller):
    for path in (DATA / "alpaca.jsonl", DATA / "chat.jsonl"):
        controller.upload(str(path))
    controller.formats_dir.mkdir(parents=True)
    shipped = ROOT / "webui" / "data" / "training_formats" / "alpaca.json"
    (controller.formats_dir / "alpaca-format.json").write_text(shipped.read_text())  # as text-generation-webui names it
    assert controller.format_choices() == [AUTO_FORMAT, "alpaca", "vicuna", "alpaca-format.json"]
    shown = controller.preview(form("alpaca.jsonl", fmt="alpaca-format.json"), count=1)
    assert shown.startswith("**format:alpaca** dataset `alpaca.jsonl`: 3 training examples")
    assert "Name the capital of France." in shown and "**Example 2**" not in shown
    chat = controller.preview(form("chat.jsonl"))
    assert chat.startswith("**chat** dataset `chat.jsonl`: 2 training examples") and "<|im_start|>assistant" in chat
    with pytest.raises(UserError, match="The format file 'nope.json' is not in"):
        controller.preview(form("alpaca.jsonl", fmt="nope.json"))


def test_closing_the_workbench_stops_a_run_and_keeps_its_checkpoint(services, controller):
    controller.upload(str(DATA / "notes.txt"))
    controller.start(form("notes.txt", name="notes", max_steps=5000, cutoff_len=16))
    wait_for(controller, ("training",))
    services.close()
    assert controller.view().state.phase == STOPPED
    assert (services.config.training_dir / "checkpoints" / "notes" / "trainer_state.pt").is_file()


def test_a_dataset_gets_the_format_that_reads_it_and_says_so(services, controller, tmp_path):
    """#46 item 9: instruction records get the format that reads every record (the refusal at Start named it but
    left the choice to the user); raw text and chat records take none; records no format reads say what to do."""
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"question": "a", "answer": "b"}\n')
    for path in (DATA / "alpaca.jsonl", DATA / "chat.jsonl", DATA / "notes.txt", odd):
        controller.upload(str(path))
    chosen, note = controller.dataset_format("alpaca.jsonl", AUTO_FORMAT)
    assert chosen == "alpaca" and "holds instruction records (keys category, input, instruction, output)" in note
    assert "format **alpaca** reads every one (it is chosen for them)" in note
    assert controller.dataset_format("alpaca.jsonl", "alpaca")[0] == "alpaca"  # a fitting choice is kept
    assert controller.dataset_format("chat.jsonl", "alpaca")[0] == AUTO_FORMAT
    assert controller.dataset_format("notes.txt", "vicuna") == (AUTO_FORMAT, "**notes.txt** is raw text: it takes "
                                                                             "no format.")
    chosen, note = controller.dataset_format("odd.jsonl", AUTO_FORMAT)
    assert chosen == AUTO_FORMAT and note.startswith("⚠ **odd.jsonl** holds instruction records (keys answer, "
                                                     "question) that no format here reads: add a format file")
    assert controller.dataset_format("missing.jsonl", AUTO_FORMAT)[1].startswith("⚠ The dataset 'missing.jsonl' is")


def test_the_time_a_run_would_take_is_estimated_from_a_few_steps(services, controller):
    """#46 item 11: Estimate runs a few of the run's steps on a copy of the model (nothing is saved, no run starts)
    and says steps × the measured time per step; the steps come from the dataset, epochs and batch sizes."""
    controller.upload(str(DATA / "alpaca.jsonl"))
    said = controller.estimate(form("alpaca.jsonl", fmt="alpaca", epochs=4, micro_batch_size=1, grad_accum=1))
    assert said.startswith("About **") and " on cpu: 12 steps × " in said  # 3 examples × 4 epochs
    assert "(timed over 2 of them just now)" in said and "to load the model copy" in said
    assert controller.view().state.phase == "idle" and not (services.config.loras_dir / "zorbl").exists()
    assert services.models.reserved() == {}  # its copy's memory is given back
    with pytest.raises(UserError, match="holds instruction records: name their format"):
        controller.estimate(form("alpaca.jsonl"))
