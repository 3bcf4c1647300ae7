"""Names with path characters for everything a user or API client names (#43): presets, chat templates, characters,
LoRA adapters, models, and the Training tab's datasets, eval files, format files, base model and adapter name. Each
hostile name is refused with a message naming the kind of name and what to do, before any file is opened or
written, on a real user data dir; and a name that is a link in our folder to a file outside it is not read."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import ROOT
from webui.controllers import UserError
from webui.controllers.training import AUTO_FORMAT, TrainingController, TrainingForm
from webui.engine import SamplingParams
from webui.names import MAX_NAME_BYTES

SURFACE = "names"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(32)
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
NAMES = [
    pytest.param("../../etc/passwd", id="dot-dot-etc-passwd"),
    pytest.param("/etc/passwd", id="absolute-path"),
    pytest.param("a/b", id="slash"),
    pytest.param("..", id="dot-dot"),
    pytest.param(".", id="dot"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param("x\x00y", id="nul"),
    pytest.param("C:\\x", id="windows-drive"),
    pytest.param("x" * 10_000, id="10000-characters"),
    pytest.param("名" * 100, id=f"100-characters-over-{MAX_NAME_BYTES}-bytes-of-utf-8"),
    pytest.param("a\ud800b", id="lone-surrogate"),
]
REFUSED = (r"(name '.*' must be a plain name, without path characters|name is too long \(|name '.*' is not valid "
           r"text).*choose (another|a shorter one)")


def form(dataset: str = "keep.txt", fmt: str = AUTO_FORMAT, name: str = "adapter", model: str = "tiny",
         **values: object) -> TrainingForm:
    return TrainingForm(model, dataset, fmt, name, {"cutoff_len": 32, **values}, "cpu")


# (what names it, the kind of name its message says, how): each tried with every hostile name.
Act = Callable[[Any, TrainingController, str], object]
OPERATIONS: list[tuple[str, str, Act]] = [
    ("preset-save", "preset", lambda s, t, n: s.presets.save(n, SamplingParams(temperature=0.5))),
    ("preset-get", "preset", lambda s, t, n: s.presets.get(n)),
    ("preset-delete", "preset", lambda s, t, n: s.presets.delete(n)),
    ("template-save", "template", lambda s, t, n: s.templates.save(n, TEMPLATE)),
    ("template-source", "template", lambda s, t, n: s.templates.source(n)),
    ("template-delete", "template", lambda s, t, n: s.templates.delete(n)),
    ("character-get", "character", lambda s, t, n: s.characters.get(n)),
    ("character-delete", "character", lambda s, t, n: s.characters.delete(n)),
    ("character-set-picture", "character", lambda s, t, n: s.characters.set_picture(n, PNG)),
    ("character-export", "character", lambda s, t, n: s.characters.export_card(n)),
    ("lora-attach", "LoRA adapter", lambda s, t, n: s.models.attach_lora(n, 1.0)),
    ("lora-detach", "LoRA adapter", lambda s, t, n: s.models.detach_lora(n)),
    ("model-resolve", "model", lambda s, t, n: s.models.catalog.resolve(n)),
    ("model-load", "model", lambda s, t, n: s.models.load(n)),
    ("training-dataset", "dataset", lambda s, t, n: t.start(form(n))),
    ("training-eval-file", "eval dataset", lambda s, t, n: t.start(form(eval_file=n))),
    ("training-format-file", "format file", lambda s, t, n: t.start(form("qa.jsonl", fmt=n))),
    ("training-base-model", "model", lambda s, t, n: t.start(form(model=n))),
    ("training-adapter-name", "LoRA adapter", lambda s, t, n: t.start(form(name=n))),
]


@pytest.fixture
def training(services) -> TrainingController:
    made = TrainingController(services)
    made.datasets_dir.mkdir(parents=True)
    (made.datasets_dir / "keep.txt").write_text("Some notes to train on.\n")
    (made.datasets_dir / "qa.jsonl").write_text((ROOT / "tests" / "data" / "training" / "alpaca.jsonl").read_text())
    return made


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the user data dir: what a link in our folders could point at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.yaml").write_text("temperature: 0.5\n")
    (folder / "secret.jinja").write_text("SECRET {{ messages[0]['content'] }}")
    (folder / "secret-character.yaml").write_text("name: Secret\ncontext: SECRET\n")
    (folder / "secret.txt").write_text("SECRET notes\n")
    (folder / "secret.json").write_text('{"instruction,output": "SECRET %instruction% %output%"}')
    return folder


def listing(root: Path) -> list[str]:
    """Every path under ``root`` (links not followed), with each file's size: what a refusal must not change."""
    return sorted(f"{p.relative_to(root)} {p.lstat().st_size if p.is_file() or p.is_symlink() else ''}"
                  for p in root.rglob("*") if not p.name.startswith("workbench.sqlite3"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("what", "kind", "act"), [pytest.param(*op, id=op[0]) for op in OPERATIONS])
def test_a_hostile_name_is_refused_before_any_file_is_touched(services, training, tmp_path, outside, what, kind,
                                                              act, name):
    before = listing(tmp_path)
    started = time.monotonic()
    with pytest.raises((ValueError, UserError)) as caught:
        act(services, training, name)
    message = str(caught.value)
    assert f"{kind} name" in message and re.search(REFUSED, message), message
    assert len(message) < 400, "a long name is shown shortened"
    assert time.monotonic() - started < 10 and listing(tmp_path) == before
    assert services.presets.get("Deterministic").params.temperature == 0  # the app goes on
    assert training.view().state.phase == "idle"


def link(folder: Path, name: str, target: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(target)


# (the link made in our folder, what reads it by name, what the message says): not read, the secret not shown.
LINKS: list[Any] = [
    pytest.param(lambda s, t, o: link(s.config.presets_dir, "linked.yaml", o / "secret.yaml"),
                 lambda s, t: s.presets.get("linked"), "the preset 'linked.yaml' in .* is a link to a file outside "
                 "that folder, which is not read; put the file itself in the folder", id="preset"),
    pytest.param(lambda s, t, o: link(s.config.templates_dir, "linked.jinja", o / "secret.jinja"),
                 lambda s, t: s.templates.source("linked"), "the template 'linked.jinja' in .* is a link to a file "
                 "outside", id="template"),
    pytest.param(lambda s, t, o: link(s.config.characters_dir, "Linked.yaml", o / "secret-character.yaml"),
                 lambda s, t: s.characters.get("Linked"), "the character file 'Linked.yaml' in .* is a link to a "
                 "file outside", id="character"),
    pytest.param(lambda s, t, o: link(t.datasets_dir, "linked.txt", o / "secret.txt"),
                 lambda s, t: t.start(form("linked.txt")), "the dataset 'linked.txt' in .* is a link to a file "
                 "outside", id="dataset"),
    pytest.param(lambda s, t, o: link(t.datasets_dir, "linked.txt", o / "secret.txt"),
                 lambda s, t: t.start(form(eval_file="linked.txt")), "the eval dataset 'linked.txt' in .* is a link "
                 "to a file outside", id="eval-dataset"),
    pytest.param(lambda s, t, o: link(t.formats_dir, "linked.json", o / "secret.json"),
                 lambda s, t: t.start(form("qa.jsonl", fmt="linked.json")), "the format file 'linked.json' in .* is "
                 "a link to a file outside", id="format-file"),
    pytest.param(lambda s, t, o: link(t.datasets_dir, "up.txt", Path("..") / ".." / ".." / "outside" / "secret.txt"),
                 lambda s, t: t.start(form("up.txt")), "the dataset 'up.txt' in .* is a link to a file outside",
                 id="dataset-relative-link-climbing-out"),
    pytest.param(lambda s, t, o: link(t.datasets_dir, "chain.txt", t.datasets_dir / "keep-link.txt")
                 or link(t.datasets_dir, "keep-link.txt", o / "secret.txt"),
                 lambda s, t: t.start(form("chain.txt")), "the dataset 'chain.txt' in .* is a link to a file outside",
                 id="dataset-link-to-a-link-that-leaves"),
]


@pytest.mark.parametrize(("make", "read", "message"), LINKS)
def test_a_name_that_is_a_link_out_of_our_folder_is_not_read(services, training, outside, make, read, message):
    make(services, training, outside)
    with pytest.raises((ValueError, UserError)) as caught:
        read(services, training)
    assert re.search(message, str(caught.value)), str(caught.value)
    assert "SECRET" not in str(caught.value) and training.view().state.phase == "idle"


@pytest.mark.parametrize(("save", "path"), [
    pytest.param(lambda s: s.presets.save("linked", SamplingParams(temperature=0.9)),
                 lambda s: s.config.presets_dir / "linked.yaml", id="preset-save"),
    pytest.param(lambda s: s.templates.save("linked", TEMPLATE),
                 lambda s: s.config.templates_dir / "linked.jinja", id="template-save"),
])
def test_saving_under_a_name_that_is_a_link_replaces_the_link_not_what_it_points_at(services, outside, save, path):
    target = path(services)
    link(target.parent, target.name, outside / "kept")
    (outside / "kept").write_text("kept as it was")
    save(services)
    assert (outside / "kept").read_text() == "kept as it was"
    assert not target.is_symlink() and target.is_file()


def test_links_inside_our_folder_and_a_folder_that_is_itself_a_link_are_read(services, training, tmp_path):
    """Not hostile: the rule is where a file lies once links are followed, not whether there is a link."""
    elsewhere = tmp_path / "presets-on-another-disk"
    elsewhere.mkdir()
    (elsewhere / "warm.yaml").write_text("temperature: 0.7\n")
    services.config.presets_dir.rmdir()
    services.config.presets_dir.symlink_to(elsewhere, target_is_directory=True)
    assert services.presets.get("warm").params.temperature == 0.7
    os.symlink("keep.txt", training.datasets_dir / "alias.txt")
    job = training.job(form("alias.txt"))
    assert job.dataset is not None and job.dataset.kind == "raw"
