"""LoRA training on the tiny model: it learns a made-up fact that the real ModelManager then serves; stop + resume
equals an uninterrupted run; bad jobs are refused before any weights load; `launch.py train` end to end."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loaders.base import ModelLoadError
from tests.conftest import ROOT, TEST_THREADS
from webui.engine import GenerationRequest, SamplingParams
from webui.training.settings import TrainingError, parse_settings
from webui.training.trainer import RECORD, TrainJob, TrainProgress, base_model_folder, prepare, train

FACT_PROMPT = "The secret code of Zorbl is"
FACT = " 7431"
GREEDY = SamplingParams(temperature=0, max_new_tokens=6, ban_eos=True)
FAST = {"rank": 8, "alpha": 16, "target_modules": "all-linear", "learning_rate": 1e-2, "dropout": 0.0,
        "micro_batch_size": 1, "scheduler": "constant"}


def torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("bitsandbytes") is not None


@pytest.fixture
def fact_file(tmp_path: Path) -> Path:
    path = tmp_path / "zorbl.txt"
    path.write_text(f"{FACT_PROMPT}{FACT}.\n")
    return path


def job(name: str, model_dir: Path, data: Path, root: Path, **values: object) -> TrainJob:
    return TrainJob(name, "tiny", model_dir, data, parse_settings(values), root / "loras" / name,
                    root / "checkpoints" / name)


def test_a_made_up_fact_is_learned_and_served_through_the_model_manager(services, fact_file):
    catalog = services.models.catalog
    name, folder = base_model_folder(catalog, "tiny")  # the catalog's name, as the CLI resolves --model
    assert name == "tiny" and (folder / "config.json").is_file()
    seen: list[TrainProgress] = []
    work = TrainJob("zorbl", name, folder, fact_file, parse_settings({**FAST, "max_steps": 40}),
                    services.config.loras_dir / "zorbl", services.config.user_data_dir / "ckpt")
    result = train(prepare(job=work), progress=seen.append)
    assert not result.stopped and [p.step for p in seen] == list(range(1, 41)) and seen[-1].eta_s == 0
    losses = [loss for _, loss in result.record["loss_curve"]]
    assert losses[-1] < losses[0] - 0.1 and seen[-1].tokens_per_s > 0
    assert "zorbl" in [e.name for e in catalog.available_loras()]
    record = json.loads((services.config.loras_dir / "zorbl" / RECORD).read_text())
    assert record["base_model"]["name"] == "tiny" and len(record["base_model"]["fingerprint"]) == 64
    assert record["dataset"]["name"] == "zorbl.txt" and record["settings"]["rank"] == 8
    assert record["dataset"]["sha256"] == hashlib.sha256(fact_file.read_bytes()).hexdigest()

    base = services.engine.generate(GenerationRequest(FACT_PROMPT, GREEDY)).text
    services.models.attach_lora("zorbl")
    tuned = services.engine.generate(GenerationRequest(FACT_PROMPT, GREEDY, loras=services.active_loras)).text
    assert tuned.startswith(FACT) and not base.startswith(FACT), (base, tuned)


def test_stop_then_resume_ends_where_an_uninterrupted_run_ends(tiny_model_dir, tmp_path):
    data = tmp_path / "notes.txt"
    data.write_text((ROOT / "tests" / "data" / "training" / "notes.txt").read_text())
    values = dict(max_steps=8, dropout=0.1, micro_batch_size=2, grad_accum=2, learning_rate=5e-3, cutoff_len=12,
                  overlap=2, eval_percent=25, eval_every=3, warmup_steps=2, scheduler="cosine", seed=5)
    whole = train(prepare(job("whole", tiny_model_dir, data, tmp_path, **values)))
    parts = job("parts", tiny_model_dir, data, tmp_path, **values)
    seen: list[TrainProgress] = []
    stopped = train(prepare(parts), progress=seen.append, stop=lambda: seen[-1].step >= 3)
    assert stopped.stopped and stopped.step == 3 and stopped.out is None and not parts.out.exists()
    with pytest.raises(TrainingError, match="has a checkpoint from a stopped run; pass --resume"):
        prepare(job("parts", tiny_model_dir, data, tmp_path, **values))
    with pytest.raises(TrainingError, match="made with another settings"):
        train(prepare(job("parts", tiny_model_dir, data, tmp_path, **{**values, "seed": 6}), resume=True),
              resume=True)
    resumed = train(prepare(job("parts", tiny_model_dir, data, tmp_path, **values), resume=True), resume=True)
    assert not resumed.stopped and resumed.step == 8 and not parts.checkpoint.exists()
    for curve in ("loss_curve", "eval_loss_curve"):
        steps, losses = zip(*resumed.record[curve])
        assert (list(steps), list(losses)) == ([s for s, _ in whole.record[curve]],
                                               pytest.approx([v for _, v in whole.record[curve]], rel=1e-5))
    assert len(whole.record["eval_loss_curve"]) == 3  # steps 3, 6 and the last
    from safetensors.torch import load_file

    a, b = (load_file(p / "adapter_model.safetensors") for p in (whole.out, resumed.out))
    assert a.keys() == b.keys() and all(float((a[k] - b[k]).abs().max()) < 1e-5 for k in a)


def test_bad_jobs_are_refused_before_any_weights_load(services, tiny_model_dir, fact_file, tmp_path):
    with pytest.raises(TrainingError, match="must be a plain name, without path characters"):
        prepare(job("../evil", tiny_model_dir, fact_file, tmp_path))
    (tmp_path / "loras" / "taken").mkdir(parents=True)
    with pytest.raises(TrainingError, match="an adapter named 'taken' exists .* pass --force"):
        prepare(job("taken", tiny_model_dir, fact_file, tmp_path))
    with pytest.raises(TrainingError, match="no checkpoint of 'fresh' to resume"):
        prepare(job("fresh", tiny_model_dir, fact_file, tmp_path), resume=True)
    gptq = services.config.models_dir / "tiny-gptq"
    gptq.mkdir()
    (gptq / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "gptq"}}))
    with pytest.raises(ModelLoadError, match="cannot train on a gptq model: training loads a model's plain weights"):
        base_model_folder(services.models.catalog, "tiny-gptq")
    with pytest.raises(ModelLoadError, match="unknown model 'nope'"):
        base_model_folder(services.models.catalog, "nope")
    with pytest.raises(TrainingError, match="target_modules 'w_pack' does not fit this model"):
        train(prepare(job("mods", tiny_model_dir, fact_file, tmp_path, target_modules="w_pack", max_steps=1)))


def launch_train(user_data: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "launch.py"), "train", *args, "--user-data-dir", str(user_data),
                           "--threads", str(TEST_THREADS)], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_launch_train_end_to_end(tiny_model_dir, fact_file, tmp_path):
    user_data = tmp_path / "data"
    common = ["--data", str(fact_file), "--model", str(tiny_model_dir), "--learning-rate", "1e-2",
              "--micro-batch-size", "1", "--max-steps", "3"]
    done = launch_train(user_data, *common, "--name", "zorbl", "--rank", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "raw dataset zorbl.txt: 1 training examples" in done.stdout and "step 3/3  loss " in done.stdout
    adapter = user_data / "loras" / "zorbl"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    record = json.loads((adapter / RECORD).read_text())
    assert record["settings"]["rank"] == 4 and record["steps"] == 3 and len(record["loss_curve"]) == 3

    again = launch_train(user_data, *common, "--name", "zorbl")
    assert again.returncode == 2 and "an adapter named 'zorbl' exists" in again.stderr
    bad = launch_train(user_data, *common, "--name", "x", "--rank", "0")
    assert bad.returncode == 2 and "training setting 'rank' takes an integer from 1 to 1024; got '0'" in bad.stderr
    shown = launch_train(user_data, *common, "--name", "x", "--preview", "1")
    assert shown.returncode == 0 and f"{FACT_PROMPT}{FACT}." in shown.stdout and "trained" in shown.stdout
    assert not (user_data / "loras" / "x").exists()


def test_ctrl_c_saves_a_checkpoint_and_resume_finishes(tiny_model_dir, fact_file, tmp_path):
    user_data = tmp_path / "data"
    argv = [sys.executable, str(ROOT / "launch.py"), "train", "--data", str(fact_file), "--model",
            str(tiny_model_dir), "--name", "ctrl", "--max-steps", "60", "--micro-batch-size", "1",
            "--user-data-dir", str(user_data), "--threads", str(TEST_THREADS)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONUNBUFFERED="1")) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("step "):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "stopped at step" in err and "--resume" in err, err[-2000:]
    assert (user_data / "training" / "checkpoints" / "ctrl" / "trainer_state.pt").is_file()
    assert not (user_data / "loras" / "ctrl").exists()
    resumed = subprocess.run(argv + ["--resume"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "from its checkpoint" in resumed.stdout and "step 60/60" in resumed.stdout
    assert len(json.loads((user_data / "loras" / "ctrl" / RECORD).read_text())["loss_curve"]) == 60


def test_qlora_is_refused_off_cuda_before_any_weights_load(tiny_model_dir, fact_file, tmp_path):
    with pytest.raises(TrainingError, match="load_in 4bit \\(QLoRA\\) needs a CUDA GPU: .* this run is on cpu; set "
                                            "load_in to full"):
        prepare(job("q", tiny_model_dir, fact_file, tmp_path, load_in="4bit"))
    with pytest.raises(TrainingError, match="training setting 'load_in' takes one of full, 8bit, 4bit; got '2bit'"):
        parse_settings({"load_in": "2bit"})


@pytest.mark.skipif(not torch_cuda(), reason="QLoRA needs a CUDA GPU with bitsandbytes (tests/gpu/README.md)")
@pytest.mark.parametrize("load_in", ["8bit", "4bit"])
def test_qlora_learns_the_fact_on_cuda(tiny_model_dir, fact_file, tmp_path, load_in):
    work = job("q" + load_in, tiny_model_dir, fact_file, tmp_path, **{**FAST, "max_steps": 40}, load_in=load_in)
    work.device = "cuda"
    result = train(prepare(work))
    losses = [loss for _, loss in result.record["loss_curve"]]
    assert losses[-1] < losses[0] - 0.1 and result.record["settings"]["load_in"] == load_in
