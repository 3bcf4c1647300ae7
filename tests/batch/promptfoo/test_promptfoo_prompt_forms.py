"""promptfoo's other prompt forms (#32): {path: label} mappings, {id: file://..., label} objects, content blocks
and Anthropic's {system, messages} chats; prompt functions refused by name."""

from __future__ import annotations

import re

import pytest

from webui.batch.asserts.errors import BatchInputError
from webui.batch.promptfoo.reader import read_suite


def test_a_mapping_of_files_to_labels_and_file_objects_with_labels(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.txt").write_text("A {{q}}")
    (tmp_path / "p" / "b.txt").write_text("B1 {{q}}\n---\nB2 {{q}}")
    mapped = read_suite("prompts:\n  p/a.txt: first\n  'Say {{q}}': inline\n"
                        "providers:\n  - {id: x, prompts: [first]}\ntests: [{vars: {q: hi}}]\n", tmp_path)
    assert [(r.origin["prompt"], r.text, r.settings) for r in mapped.rows] == [
        ("first", "A hi", None), ("inline", "Say hi", ())]
    listed = read_suite("prompts:\n  - file://p/a.txt: one\n  - {id: file://p/b.txt, label: two, config: "
                        "{temperature: 0.3}}\ntests: [{vars: {q: hi}}]\n", tmp_path)
    assert [(r.origin["prompt"], r.text) for r in listed.rows] == [("one", "A hi"), ("two #1", "B1 hi"),
                                                                   ("two #2", "B2 hi")]
    assert listed.rows[0].params is None and listed.rows[1].params == {"temperature": 0.3}


def test_content_blocks_and_anthropic_chats_are_read_as_text(tmp_path):
    (tmp_path / "chat.yaml").write_text(
        "system: Be brief\nmessages:\n  - role: user\n    content:\n      - {type: text, text: 'Riddle: '}\n"
        "      - {type: text, text: '{{r}}', cache_control: {type: ephemeral}}\n")
    suite = read_suite("prompts: [file://chat.yaml, [{role: user, content: [{type: text, text: 'Hi {{r}}'}]}]]\n"
                       "tests: [{vars: {r: fire}}]\n", tmp_path)
    assert [r.messages for r in suite.rows] == [
        ({"role": "system", "content": "Be brief"}, {"role": "user", "content": "Riddle: fire"}),
        ({"role": "user", "content": "Hi fire"},)]


@pytest.mark.parametrize("prompts, said", [
    ("[[{role: user, content: [{type: image_url, image_url: {url: 'http://x/a.png'}}]}]]",
     'message 0: content block 0 is "image_url"; the workbench\'s models read text'),
    ("['file://make_prompt.py:build']", "make_prompt.py:build is a Python prompt function, which the workbench does "
                                        "not run"),
    ("['file://prompt.js']", "prompt.js is a JavaScript prompt function"),
    ("[{id: file://chat.yaml, raw: x, function: f}]", "function not supported here"),
    ("[{id: file://missing.txt, label: m}]", "cannot read"),
])
def test_what_a_prompt_cannot_be_is_named(prompts, said, tmp_path):
    with pytest.raises(BatchInputError, match=re.escape(said)):
        read_suite(f"prompts: {prompts}\n", tmp_path)
