"""promptfoo's classifier assert: a tiny random text-classification model from the models dir scores each output."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from webui.batch.run.grid import GridSpec
from webui.batch.run.prompts import parse_lines
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts.classify import folder_names
from webui.batch.promptfoo.reader import read_config
from webui.batch.run.runner import BatchJob

PROVIDER = "huggingface:text-classification:acme/tiny-toxic"


def tiny_classifier(default_model_dir: Path, out: Path, multi_label: bool = False) -> Path:
    """A tiny random Llama sequence classifier (labels toxic, ok) with the default model's real tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2, num_labels=2,
                         id2label={0: "toxic", 1: "ok"}, label2id={"toxic": 0, "ok": 1},
                         problem_type="multi_label_classification" if multi_label else None)
    torch.manual_seed(7)
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():
        model.score.weight.mul_(40)  # logits far from 0, so the two labels' probabilities differ clearly
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def classifier_dir(default_model_dir: Path, tmp_path_factory) -> Path:
    return tiny_classifier(default_model_dir, tmp_path_factory.mktemp("cls") / "tiny-toxic")


def expected(folder: Path, text: str, multi_label: bool = False) -> dict[str, float]:
    """transformers' own probabilities of the folder's model for ``text``."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        logits = model(**tokenizer(text, return_tensors="pt")).logits[0]
    probabilities = torch.sigmoid(logits) if multi_label else torch.softmax(logits, -1)
    return {model.config.id2label[i]: float(p) for i, p in enumerate(probabilities)}


def install(services, folder: Path, name: str) -> None:
    target = services.config.models_dir / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(folder, target_is_directory=True)


def run_rows(services, rows) -> list:
    handle = services.batch_runner.start(BatchJob("classify", rows, GridSpec([], {"max_new_tokens": [6]}), raw=True))
    assert handle.wait(120) and handle.status == "done"
    return handle.rows()


def cls(**given) -> dict:
    return {"type": "classifier", "provider": PROVIDER, **given}


def test_scores_are_the_models_probabilities_as_promptfoo_reads_them(services, classifier_dir):
    install(services, classifier_dir, "acme--tiny-toxic")
    asserts = [cls(value="toxic", threshold=0), cls(), cls(value="ok"), cls(type="not-classifier", value="ok",
                                                                           threshold=0.5),
               cls(value="spam", threshold=0), cls(value="toxic", transform="output.toUpperCase()", threshold=0)]
    rows = run_rows(services, [replace(parse_lines("Hello")[0], asserts=[parse_assert(a) for a in asserts])])
    row = rows[0]
    probabilities = expected(classifier_dir, row.output)
    upper = expected(classifier_dir, row.output.upper())
    toxic, top, ok, not_ok, spam, shouted = row.asserts
    assert toxic.passed and toxic.score == pytest.approx(probabilities["toxic"], abs=1e-6)
    assert top.score == pytest.approx(max(probabilities.values()), abs=1e-6)
    assert top.passed is (top.score >= 1) and not ok.passed  # the default threshold is 1
    assert ok.score == pytest.approx(probabilities["ok"], abs=1e-6)
    assert not_ok.score == pytest.approx(1 - probabilities["ok"], abs=1e-6)
    assert not_ok.passed is (probabilities["ok"] < 0.5)
    assert spam.score == 0 and spam.passed and "the model has no label 'spam'" in spam.detail
    assert shouted.score == pytest.approx(upper["toxic"], abs=1e-6)
    assert toxic.detail.startswith("classification toxic has score")
    assert "labels by acme--tiny-toxic: toxic" in toxic.detail
    assert toxic.label == "classifier:toxic by acme/tiny-toxic" and top.label == "classifier:by acme/tiny-toxic"
    assert parse_assert(top.label) == parse_assert(cls()) and parse_assert(
        f"classifier:toxic by {PROVIDER}").options["provider"] == PROVIDER


def test_a_multi_label_model_scores_each_label_by_its_sigmoid(default_model_dir, tmp_path):
    from loaders.text_classifier import load_text_classifier

    folder = tiny_classifier(default_model_dir, tmp_path / "multi", multi_label=True)
    got = load_text_classifier(folder).classify("You are lovely")
    want = expected(folder, "You are lovely", multi_label=True)
    assert got == pytest.approx(want, abs=1e-6) and not math.isclose(sum(got.values()), 1.0)


def test_a_missing_model_is_refused_before_the_run_naming_the_folders_tried(services):
    rows = [replace(parse_lines("Hello")[0], asserts=[parse_assert(cls(value="toxic"))])]
    with pytest.raises(BatchInputError) as info:
        services.batch_runner.start(BatchJob("classify", rows, GridSpec([], {"max_new_tokens": [2]}), raw=True))
    assert str(info.value) == (
        f"classifier: no model folder for acme/tiny-toxic in {services.config.models_dir} (tried acme/tiny-toxic, "
        "acme--tiny-toxic, acme_tiny-toxic, tiny-toxic); put the text-classification model's folder (config.json, "
        "its weights and tokenizer files) there under one of those names")
    assert folder_names("tiny-toxic") == ["tiny-toxic"]


def test_a_folder_that_does_not_classify_fails_the_assert_negated_or_not(services, tiny_model_dir):
    install(services, tiny_model_dir, "acme/tiny-toxic")  # the full relative path: a causal LM, no classifier
    asserts = [parse_assert(cls(value="toxic", threshold=0)), parse_assert(cls(type="not-classifier"))]
    row = run_rows(services, [replace(parse_lines("Hello")[0], asserts=asserts)])[0]
    assert [a.passed for a in row.asserts] == [False, False]
    assert "is no text-classification model (its architectures: LlamaForCausalLM)" in row.asserts[1].detail


@pytest.mark.parametrize("spec, message", [
    ("classifier:toxic", "classifier needs its model: write classifier:LABEL by ORG/MODEL (or classifier:by "
                         "ORG/MODEL for the top label), or the object form: {\"type\": \"classifier\""),
    ({"type": "classifier", "value": "toxic"}, "classifier needs the model that classifies, as its provider"),
    ({"type": "classifier", "provider": "openai:chat:gpt-4o-mini"},
     "classifier: the provider 'openai:chat:gpt-4o-mini' is not supported here; a classifier runs a local "
     "text-classification model named huggingface:text-classification:ORG/MODEL"),
    ({"type": "classifier", "provider": "huggingface:text-classification:../secret"},
     "classifier: '../secret' is no model name"),
    ({"type": "classifier", "provider": {"id": PROVIDER, "config": {"apiKey": "x"}}},
     "classifier: the provider's config is not read here"),
    ({"type": "classifier", "value": 3, "provider": PROVIDER}, "classifier: the value is a label of the model"),
    ({"type": "llm-rubric", "value": "kind", "provider": PROVIDER},
     "llm-rubric: an assert's own grading provider is not used here"),
])
def test_what_a_classifier_cannot_be_is_refused_by_name(spec, message):
    with pytest.raises(BatchInputError, match=re.escape(message)):
        parse_assert(spec)


def test_a_promptfoo_suite_with_classifier_asserts_runs(services, classifier_dir, tmp_path):
    install(services, classifier_dir, "tiny-toxic")  # found by the model's last part
    config = ("prompts: ['Say {{word}}']\n"
              "tests:\n"
              "  - vars: {word: hello}\n"
              "    assert:\n"
              f"      - {{type: classifier, provider: '{PROVIDER}', value: toxic, threshold: 0}}\n"
              f"      - {{type: not-classifier, provider: {{id: '{PROVIDER}'}}, value: '{{{{word}}}}',"
              " threshold: 0.9}\n"
              "      - {type: contains, value: zzz, provider: whatever}\n")
    _, rows, _ = read_config(config, tmp_path)
    first, second, _ = rows[0].asserts
    assert parse_assert(first.to_dict()) == first and second.options["provider"] == PROVIDER
    with pytest.raises(BatchInputError, match="llm-rubric: an assert's own grading provider is not used here"):
        read_config("prompts: [hi]\ntests:\n  - assert:\n      - {type: llm-rubric, value: x, provider: "
                    f"'{PROVIDER}'}}\n", tmp_path)
    result = run_rows(services, rows)[0]
    probabilities = expected(classifier_dir, result.output)
    toxic, hello, contains = result.asserts
    assert toxic.passed and toxic.score == pytest.approx(probabilities["toxic"], abs=1e-6)
    assert hello.score == 1.0 and hello.passed  # no label 'hello': 0, negated 1
    assert not contains.passed


def test_a_tests_options_provider_is_the_model_of_its_classifier_asserts_without_their_own(tmp_path):
    from webui.batch.promptfoo.reader import read_suite

    suite = read_suite("prompts: [hi]\n"
                       "defaultTest:\n  options: {provider: 'huggingface:text-classification:org/a'}\n"
                       "tests:\n"
                       "  - assert: [{type: classifier, value: ok}]\n"
                       "  - options: {provider: {id: 'huggingface:text-classification:org/b'}}\n"
                       "    assert: [{type: classifier}, {type: classifier, provider: "
                       "'huggingface:text-classification:org/c'}]\n", tmp_path)
    assert [[a.options["provider"].rsplit(":", 1)[1] for a in row.asserts] for row in suite.rows] == [
        ["org/a"], ["org/b", "org/c"]]
    assert suite.options.judge_model == ""  # a classifier's model is not the judge
    with pytest.raises(BatchInputError, match=r"tests\[0\]\.options\.provider: not supported here \(the judge is "
                                              r"the run's"):
        read_suite("prompts: [hi]\ntests:\n  - options: {provider: 'openai:chat:gpt-4o'}\n    assert: "
                   "[{type: classifier, value: ok}]\n", tmp_path)


def test_the_batch_tabs_jsonl_takes_a_classifier_and_the_export_writes_it_as_promptfoo(tmp_path):
    from webui.batch.promptfoo.export import promptfoo_assertion
    from webui.batch.run.prompts import load_prompts_text

    given = cls(value="toxic", threshold=0.5)
    rows = load_prompts_text("suite.jsonl", '{"prompt": "hi", "asserts": [%s]}' % json.dumps(given))
    assert promptfoo_assertion(rows[0].asserts[0]) == given
