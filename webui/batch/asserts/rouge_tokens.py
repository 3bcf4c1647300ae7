"""js-rouge's tokens, as promptfoo's rouge-n assert reads a text: rule-based sentences, then Penn Treebank words.

A port of js-rouge 3.2.1 (the version promptfoo 0.115 installs; src/utils.ts:
``sentenceSegment`` with case-sensitive rules, and ``treeBankTokenize``), rule
for rule, so :func:`webui.batch.asserts.text_metrics.rouge_n` counts the same tokens.
Sentence boundaries matter to ROUGE only through full stops: the last one of a
sentence is a token of its own, others stay on their word. Known differences:
JavaScript walks UTF-16 units and its ``\\s`` and upper-case tests are
Unicode's; here Python's (they differ only on characters outside the Basic
Multilingual Plane and on rare spaces and title-case letters).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HONORIFICS = ("jr mr mrs ms dr prof sr sen corp rep gov atty supt det rev col gen lt cmdr adm capt sgt cpl maj miss "
              "misses mister sir esq mstr phd adj adv asst bldg brig comdr hon messrs mlle mme op ord pvt reps res "
              "sens sfc surg").split()
_ABBREVIATIONS = [
    *("arc al exp rd st dist mt fy pd pl plz tce llb md bl ma ba lit ex e.g i.e circa ca cca v.s etc esp ft b.c "
      "a.d").split(),
    *"jan feb mar apr jun jul aug sep sept oct nov dec".split(),
    *"co corp yahoo joomla jeopardy dept univ assn bros inc ltd".split(),
    *("ala ariz ark cal calif col colo conn del fed fla fl ga ida ind ia la kan kans ken ky la md mich minn mont neb "
      "nebr nev okla penna penn pa dak tenn tex ut vt va wash wis wisc wy wyo usafa alta ont que sask yuk ave blvd "
      "cl ct cres hwy U.S U.S.A E.U N°").split(),
    "a.m", "p.m", *HONORIFICS]
_EXCEPTIONS = ["ex", "e.g", "i.e", "circa", "ca", "cca", "v.s", "esp", "ft", "st", "mt", *HONORIFICS]
_ABBREVIATION = re.compile(rf"\b({'|'.join(map(re.escape, _ABBREVIATIONS))})[.!?] ?$", re.IGNORECASE | re.ASCII)
_EXCEPTION = re.compile(rf"\b({'|'.join(map(re.escape, _EXCEPTIONS))})[.!?] ?$", re.IGNORECASE | re.ASCII)
_ACRONYM = re.compile(r"[ |.][A-Za-z].?$")
_BREAK = re.compile(r"[\r\n]+")
_ELLIPSIS = re.compile(r"\.{2,10}$")
_SUFFIX = max(10, *(len(word) + 2 for word in _ABBREVIATIONS))
_CLOSING, _OPENING_BRACKETS, _CLOSING_BRACKETS = "])}>\"'", "([{<", "])}>"


def _upper(char: str) -> bool:
    return bool(char) and (char.isupper() or char.istitle())


def _title_case(text: str) -> bool:
    text = text.strip()
    return bool(text) and _upper(text[0])


def _opens_quote(text: str, index: int, inside: bool) -> bool:
    return not inside and (index == 0 or re.match(r"[\s(\[{<]", text[index - 1]) is not None)


@dataclass
class _Word:
    title_case: bool
    lower_case: bool


@dataclass
class _Sentence:
    """js-rouge's SentenceBuffer (case-sensitive): the fragments of a sentence being gathered and the casing of
    its last two words."""

    parts: list[str] = field(default_factory=list)
    words: list[_Word] = field(default_factory=list)
    line_breaks: bool = False
    starts_title_case: bool = False
    normalized: int = 0

    def suffix(self) -> str:
        out = ""
        for part in reversed(self.parts):
            if len(out) >= _SUFFIX:
                break
            out = part[-(_SUFFIX - len(out)):] + out
        return out

    def append(self, text: str) -> None:
        if not text:
            return
        previous = self.words[-1] if self.words else None
        for match in re.finditer(r"\S+", text):
            word = match.group()
            lower = word == word.lower()
            if match.start() == 0 and previous and not (self.parts and self.parts[-1][-1:].isspace()):
                previous.lower_case = previous.lower_case and lower
                continue
            if not self.words:
                self.starts_title_case = _title_case(word)
            self.words = [*self.words, _Word(_title_case(word), lower)][-2:]
        self.line_breaks = self.line_breaks or bool(_BREAK.search(text))
        self.parts.append(text)

    def trim_end(self) -> None:
        while self.parts:
            trimmed = self.parts[-1].rstrip(" ")
            if trimmed:
                self.parts[-1] = trimmed
                break
            self.parts.pop()
        self.normalized = min(self.normalized, len(self.parts))

    def normalize_whitespace(self) -> None:
        write = self.normalized
        for read in range(write, len(self.parts)):
            part = re.sub(r"\s+", " ", self.parts[read])
            if (write == 0 or self.parts[write - 1].endswith(" ")) and part.startswith(" "):
                part = part[1:]
            if part:
                self.parts[write] = part
                write += 1
        del self.parts[write:]
        self.trim_end()
        self.normalized, self.line_breaks = len(self.parts), False

    def text(self) -> str:
        return "".join(self.parts)


def _closing_end(text: str, index: int, inside: bool) -> int:
    end, quote_pending = index + 1, inside
    while end < len(text):
        if text[end] in _CLOSING:
            quote_pending = quote_pending and text[end] != '"'
            end += 1
            continue
        following = end
        while following < len(text) and text[following].isspace():
            following += 1
        if following > end and following < len(text) and (
                text[following] in _CLOSING_BRACKETS or (quote_pending and text[following] == '"')):
            end = following
            continue
        break
    return end


def _sentence_end(text: str, index: int, inside: bool, depth: int, standalone: bool) -> int:
    """Where the sentence whose terminal is at ``index`` ends (with its closing delimiters); -1: it goes on."""
    end = _closing_end(text, index, inside)
    if end < len(text) and not text[end].isspace():
        return -1
    if end == index + 1:
        return end
    closed = sum(ch in _CLOSING_BRACKETS for ch in text[index + 1:end])
    if closed and (closed < depth or not (standalone or (inside and text[end - 1] == '"'))):
        return -1
    following = end
    while following < len(text) and re.match(r"[\s\"'(\[{<]", text[following]):
        following += 1
    if following == len(text):
        return end
    if not _upper(text[following]):
        return -1
    suffix = text[max(0, index + 1 - _SUFFIX):index + 1]
    if _ELLIPSIS.search(suffix) and closed:
        return -1
    return -1 if _ABBREVIATION.search(suffix) and _EXCEPTION.search(suffix) else end


def _chunks(text: str) -> list[str]:
    """The text between sentences and the candidate sentences, alternating, and the rest."""
    chunks: list[str] = []
    last_end, start, inside, depth, standalone = 0, -1, False, 0, False
    for index, char in enumerate(text):
        if char == '"':
            inside = _opens_quote(text, index, inside)
        if char in _OPENING_BRACKETS:
            if depth == 0:
                standalone = start == -1
            depth += 1
        elif char in _CLOSING_BRACKETS:
            depth = max(0, depth - 1)
        if index < last_end or char in "\r\n":
            start = -1
            continue
        if start == -1:
            if not char.isspace():
                start = index
            continue
        if char in ".?!":
            end = _sentence_end(text, index, inside, depth, standalone)
            if end == -1:
                continue
            chunks += [text[last_end:start], re.sub(r"[\r\n]+", " ", text[start:end])]
            last_end, start = end, -1
    return chunks + [text[last_end:]]


def sentences(text: str) -> list[str]:
    """js-rouge's sentenceSegment (case-sensitive): the sentences of a text."""
    if not text:
        return []
    chunks, out, pending, idx = _chunks(text), [], None, 0
    while idx < len(chunks):
        following = chunks[idx + 1] if idx + 1 < len(chunks) else ""
        if pending is None and not chunks[idx]:
            idx += 1
            continue
        chunk = pending
        if chunk is None:
            chunk = _Sentence()
            chunk.append(chunks[idx].strip(" "))
        pending = None
        chunk.trim_end()
        if not chunk.words:
            idx += 1
            continue
        suffix = chunk.suffix()
        if chunk.line_breaks:
            if following and chunk.starts_title_case:
                chunk.append(f" {following}")
                chunk.normalize_whitespace()
                pending = chunk
            else:
                out += [line.strip() for line in _BREAK.split(chunk.text()) if line.strip()]
        elif following and _ABBREVIATION.search(suffix):
            if _title_case(following) and not _EXCEPTION.search(suffix):
                out.append(chunk.text())
            else:
                chunk.append(" " + re.sub(" +", " ", following).strip(" "))
                pending = chunk
        elif following and _ACRONYM.search(suffix):
            after = chunks[idx + 2] if idx + 2 < len(chunks) else ""
            if chunk.words[-1].lower_case:
                chunk.append(" " + re.sub(" +", " ", following))
                pending = chunk
            elif after and len(chunk.words) > 1 and chunk.words[-2].title_case and _title_case(after):
                chunk.append(re.sub(r"\s+", " ", following) + after)
                pending, idx = chunk, idx + 1
            else:
                out.append(chunk.text())
        elif following and _ELLIPSIS.search(suffix):
            chunk.append(re.sub(" +", " ", following))
            after = chunks[idx + 2] if idx + 2 < len(chunks) else ""
            if not (following.strip() or _BREAK.search(following)) and after:
                chunk.append(re.sub(" +", " ", after))
                idx += 1
            pending = chunk
        else:
            out.append(chunk.text())
        idx += 1
    return out or [text]


_CONTRACTIONS = [re.compile(p, re.IGNORECASE) for p in (
    r"\b(can)(not)\b", r"\b(d)('ye)\b", r"\b(gim)(me)\b", r"\b(gon)(na)\b", r"\b(got)(ta)\b", r"\b(lem)(me)\b",
    r"\b(more)('n)\b", r"\b(wan)(na) ", r" ('t)(is)\b", r" ('t)(was)\b")]


def treebank_tokens(sentence: str) -> list[str]:
    """js-rouge's treeBankTokenize: one sentence split into Penn Treebank word tokens."""
    text = re.sub(r"\s+", " ", sentence.strip())
    if not text:
        return []
    inside, parts = False, []
    for i, ch in enumerate(text):
        if ch == '"':
            inside = _opens_quote(text, i, inside)
            parts.append(" `` " if inside else " '' ")
        else:
            parts.append(ch)
    parse = "".join(parts)
    parse = re.sub(r"\.\.\.*", " ... ", parse)
    parse = re.sub(r"[:,](?!\d)", r" \g<0> ", parse)
    parse = re.sub(r"[;@#$%&]", r" \g<0> ", parse)
    parse = re.sub(r"([^.])(?<!\b[A-Za-z]\.[A-Za-z])(\.)([\])}>'\s]*)$", r"\1 \2\3 ", parse)
    parse = re.sub(r"[?!]", r" \g<0> ", parse)
    parse = re.sub(r"[\][(){}<>]", r" \g<0> ", parse)
    parse = re.sub(r"---*", " -- ", parse)
    parse = f" {parse} "
    parse = re.sub(r"([^'])' ", r"\1 ' ", parse)
    parse = re.sub(r"'([sSmMdD]) ", r" '\1 ", parse)
    parse = re.sub(r"('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r" \1 ", parse)
    for contraction in _CONTRACTIONS:
        parse = contraction.sub(r" \1 \2 ", parse)
    parse = re.sub(r" {2,}", " ", parse)
    parse = re.sub(r"^ | $", "", parse)
    return parse.split(" ")
