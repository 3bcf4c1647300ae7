"""Training on the real default model (SmolLM2-135M-Instruct): a few steps on a small text, and the perplexity of
that text is lower with the adapter than without (#34). About 4.5 s a step on one core: three steps."""

from __future__ import annotations

import pytest

from webui.insight import perplexity
from webui.training.settings import parse_settings
from webui.training.trainer import TrainJob, prepare, train

pytestmark = pytest.mark.real_model

TEXT = ("The lighthouse keeper of Varnholm island counts the ships every evening. Last winter he counted "
        "forty-three grey trawlers, nine ferries and one red sailing boat called the Moth.\n")


def test_a_few_steps_lower_the_perplexity_of_the_text(default_model_dir, real_engine, real_model, tmp_path):
    data = tmp_path / "varnholm.txt"
    data.write_text(TEXT)
    settings = parse_settings({"max_steps": 3, "cutoff_len": 64, "micro_batch_size": 1, "learning_rate": 2e-3,
                               "scheduler": "constant", "dropout": 0.0, "rank": 8, "alpha": 16})
    job = TrainJob("varnholm", "SmolLM2-135M-Instruct", default_model_dir, data, settings, tmp_path / "loras" /
                   "varnholm", tmp_path / "checkpoint", device="cpu")
    result = train(prepare(job))
    losses = [loss for _, loss in result.record["loss_curve"]]
    assert result.out is not None and len(losses) == 3 and losses[-1] < losses[0], losses
    real_engine.call_between_steps(lambda: real_model.add_lora("varnholm", result.out))
    try:
        base = perplexity(real_engine, TEXT, window=64)
        tuned = perplexity(real_engine, TEXT, window=64, loras=(("varnholm", 1.0),))
    finally:
        real_engine.call_between_steps(lambda: real_model.remove_lora("varnholm"))
    assert tuned.tokens == base.tokens and tuned.ppl < 0.9 * base.ppl, (base.ppl, tuned.ppl)
