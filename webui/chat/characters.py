"""Characters for chats: who the model plays (name, greeting, context, picture) and who the user is (name, bio).

A character is a YAML file ``<user data>/characters/<name>.yaml`` in text-generation-webui's shape (``name``,
``greeting``, ``context``; ours adds ``user_name`` and ``user_bio``, which text-generation-webui ignores), its
picture ``<name>.png`` (or .jpg/.jpeg/.webp) beside it. Imports read text-generation-webui's YAML (and its older
Pygmalion-style keys ``char_name``/``char_persona``/``world_scenario``/``example_dialogue``), TavernAI/SillyTavern
cards as JSON (v1, v2 ``chara_card_v2``, v3) and PNG cards (the card's JSON base64-encoded in a ``tEXt`` chunk named
``chara``, or ``ccv3``). Exports write the YAML and a v2 card. ``{{char}}``/``{{user}}`` (any case) and
``<BOT>``/``<USER>`` are kept as written and filled when a prompt or greeting is made, as those formats do.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from webui.fsutil import atomic_write_text
from webui.names import InvalidName, check_name

SUFFIX = ".yaml"
PICTURES = (".png", ".jpg", ".jpeg", ".webp")
DEFAULT_USER = "You"
CARD_SPEC = "chara_card_v2"
OURS = "llm-workbench"
"""The key of our card extension: the exact fields, so an exported card imports back unchanged."""
_PNG = b"\x89PNG\r\n\x1a\n"
_PLACEHOLDERS = re.compile(r"\{\{(char|user)\}\}", re.IGNORECASE)
_FIELDS = ("name", "greeting", "context", "user_name", "user_bio")


class CharacterError(ValueError):
    """A character that cannot be read, saved or found; the message says what is wrong and what to do."""


class CharacterNotFound(CharacterError):
    """No character of that name in the folder (the message names the folder and the characters there)."""


@dataclass(frozen=True)
class Character:
    """Who the model plays in a chat, and who the user is there."""

    name: str
    greeting: str = ""
    """The first message of a new chat (the character's)."""
    context: str = ""
    """Its description and example dialogue: where a template puts the system message."""
    user_name: str = DEFAULT_USER
    """What the user is called ({{user}}; the user's turns in a transcript)."""
    user_bio: str = ""
    """The user's persona, written after the context."""

    def fill(self, text: str, user_name: str | None = None) -> str:
        """``text`` with {{char}}/{{user}} (any case) and <BOT>/<USER> replaced by the names."""
        return fill_names(text, user_name or self.user_name, self.name)

    def to_record(self) -> dict[str, str]:
        """The character by content (a reproduce record keeps this, so an edit later does not change it)."""
        return asdict(self)

    @classmethod
    def from_record(cls, data: Any) -> Character:
        """A record's character back (CharacterError says which field is wrong)."""
        if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"].strip():
            raise CharacterError('a character must be an object with at least "name" (text)')
        for key in _FIELDS:
            if key in data and not isinstance(data[key], str):
                raise CharacterError(f"character field '{key}' must be text, got {type(data[key]).__name__}")
        return cls(**{k: data[k] for k in _FIELDS if k in data})

    def to_yaml(self) -> str:
        """text-generation-webui's character YAML (with our user_name and user_bio, which it ignores)."""
        return yaml.safe_dump({"name": self.name, "greeting": self.greeting, "context": self.context,
                               "user_name": self.user_name, "user_bio": self.user_bio},
                              allow_unicode=True, sort_keys=False, width=120)

    def to_card(self) -> dict[str, Any]:
        """A TavernAI/SillyTavern v2 card: context as the description, greeting as first_mes."""
        return {"spec": CARD_SPEC, "spec_version": "2.0", "data": {
            "name": self.name, "description": self.context, "personality": "", "scenario": "",
            "first_mes": self.greeting, "mes_example": "", "creator_notes": "", "system_prompt": "",
            "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "",
            "character_version": "", "extensions": {OURS: {"context": self.context, "user_name": self.user_name,
                                                           "user_bio": self.user_bio}}}}


def fill_names(text: str, user_name: str, char_name: str) -> str:
    """{{user}}/{{char}} (any case, as SillyTavern reads them) and tgwui's <USER>/<BOT> filled with the names."""
    text = _PLACEHOLDERS.sub(lambda m: user_name if m.group(1).lower() == "user" else char_name, text)
    return text.replace("<USER>", user_name).replace("<BOT>", char_name)


# -- reading the formats -----------------------------------------------------------------------------------------
def from_tgwui(data: Any, source: str = "the file") -> Character:
    """A text-generation-webui character (YAML or JSON already parsed): ``name``/``greeting``/``context``, or the
    older Pygmalion-style keys, built into a context as text-generation-webui builds it."""
    if not isinstance(data, dict):
        raise CharacterError(f"{source} is not a character: expected keys such as name, greeting, context")
    name = next((data[k] for k in ("name", "bot", "char_name") if data.get(k)), None)  # as tgwui looks for it
    if not isinstance(name, str) or not name.strip():
        raise CharacterError(f"{source} has no character name: it needs a 'name' (or 'char_name') text field")
    texts = {k: v for k, v in data.items() if isinstance(v, str)}
    for key in ("greeting", "char_greeting", "context", "char_persona", "world_scenario", "example_dialogue",
                "user_name", "user_bio"):
        if data.get(key) is not None and key not in texts:
            raise CharacterError(f"{source}: '{key}' must be text, got {type(data[key]).__name__}")
    if "context" in texts:
        context = texts["context"].strip()
    else:
        parts = [f"{name}'s Persona: {texts['char_persona']}" if texts.get("char_persona") else "",
                 f"Scenario: {texts['world_scenario']}" if texts.get("world_scenario") else ""]
        context = "\n".join(p for p in parts if p)
    if texts.get("example_dialogue", "").strip():
        context = f"{context}\n{texts['example_dialogue'].strip()}".strip()
    greeting = texts.get("greeting", texts.get("char_greeting", ""))
    user = next((texts[k] for k in ("user_name", "your_name", "user") if texts.get(k, "").strip()), DEFAULT_USER)
    return Character(name.strip(), greeting, context, user.strip(), texts.get("user_bio", ""))


def from_card(card: Any, source: str = "the card") -> Character:
    """A TavernAI/SillyTavern card (v1: the fields at the top; v2/v3: under ``data``). The context is written as
    text-generation-webui imports a card: "<name>'s Persona: <description>", the personality, "Scenario: ...",
    then the example dialogue; a card we exported carries its exact fields in its extension."""
    if not isinstance(card, dict):
        raise CharacterError(f"{source} is not a character card (expected a JSON object)")
    spec = card.get("spec")
    if spec is not None and spec not in (CARD_SPEC, "chara_card_v3"):
        raise CharacterError(f"{source} is a '{spec}' card; this reads chara_card_v2 and chara_card_v3 cards")
    data = card.get("data") if spec is not None else card
    if not isinstance(data, dict):
        raise CharacterError(f"{source}: a {spec} card keeps its fields under 'data', an object")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CharacterError(f"{source} has no character name: it needs data.name (text)")
    for key in ("description", "personality", "scenario", "first_mes", "mes_example"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise CharacterError(f"{source}: '{key}' must be text, got {type(data[key]).__name__}")
    extensions = data.get("extensions")
    ours = extensions.get(OURS) if isinstance(extensions, dict) else None
    if isinstance(ours, dict) and isinstance(ours.get("context"), str):
        return Character.from_record({**{k: v for k, v in ours.items() if isinstance(v, str)}, "name": name.strip(),
                                      "greeting": data.get("first_mes") or ""})
    name = name.strip()
    parts = [f"{name}'s Persona: {data['description'].strip()}" if (data.get("description") or "").strip() else "",
             f"{name}'s Personality: {data['personality'].strip()}" if (data.get("personality") or "").strip()
             else "",
             f"Scenario: {data['scenario'].strip()}" if (data.get("scenario") or "").strip() else "",
             (data.get("mes_example") or "").strip()]
    return Character(name, data.get("first_mes") or "", "\n".join(p for p in parts if p))


def png_text_chunks(blob: bytes, source: str = "the picture") -> dict[str, str]:
    """A PNG's tEXt (and zTXt/uncompressed iTXt) chunks, keyword -> text; CharacterError for a file that is not
    a PNG or ends inside a chunk."""
    if not blob.startswith(_PNG):
        raise CharacterError(f"{source} is not a PNG file (a card is a PNG with the character in a 'chara' chunk)")
    out: dict[str, str] = {}
    at = len(_PNG)
    while at + 8 <= len(blob):
        size, kind = struct.unpack(">I4s", blob[at:at + 8])
        body = blob[at + 8:at + 8 + size]
        if len(body) < size:
            raise CharacterError(f"{source} is cut short: its '{kind.decode('latin-1')}' chunk ends early")
        key, _, rest = body.partition(b"\0")
        try:
            if kind == b"tEXt":
                out.setdefault(key.decode("latin-1"), rest.decode("latin-1"))
            elif kind == b"zTXt":
                out.setdefault(key.decode("latin-1"), zlib.decompress(rest[1:]).decode("latin-1"))
            elif kind == b"iTXt" and rest[:1] == b"\0":  # flag 0: not compressed; then method, language, keyword
                text = rest[2:].split(b"\0", 2)
                if len(text) == 3:
                    out.setdefault(key.decode("latin-1"), text[2].decode("utf-8"))
        except (zlib.error, UnicodeDecodeError):
            raise CharacterError(f"{source}: its '{key.decode('latin-1')}' text chunk cannot be read") from None
        if kind == b"IEND":
            break
        at += 12 + size
    return out


def card_from_png(blob: bytes, source: str = "the picture") -> dict[str, Any]:
    """The card JSON inside a PNG card (its ``ccv3`` chunk where there is one, else ``chara``)."""
    chunks = png_text_chunks(blob, source)
    text = chunks.get("ccv3") or chunks.get("chara")
    if text is None:
        raise CharacterError(f"{source} is a PNG without a character card in it (no 'chara' text chunk); "
                             "import the card's PNG as downloaded, or its JSON")
    try:
        card = json.loads(base64.b64decode(text, validate=False).decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CharacterError(f"{source}: its 'chara' chunk is not base64-encoded JSON") from None
    return card


def parse_character(blob: bytes, filename: str) -> Character:
    """A character from an uploaded file, by its suffix: .yaml/.yml (text-generation-webui), .json (a card, or a
    text-generation-webui JSON character) or .png (a card)."""
    suffix = Path(filename).suffix.lower()
    source = f"'{Path(filename).name}'"
    if suffix == ".png":
        return from_card(card_from_png(blob, source), source)
    try:
        text = blob.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CharacterError(f"{source} is not UTF-8 text") from None
    if suffix in (".yaml", ".yml"):
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise CharacterError(f"{source} is not valid YAML: {exc}") from None
        return from_tgwui(data, source)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise CharacterError(f"{source} is not valid JSON: {exc}") from None
        if isinstance(data, dict) and ("char_name" in data or "context" in data):
            return from_tgwui(data, source)
        return from_card(data, source)
    raise CharacterError(f"{source}: import a character as .yaml (text-generation-webui), .json or .png (a "
                         "TavernAI/SillyTavern card)")


# -- the folder ----------------------------------------------------------------------------------------------------
class CharacterStore:
    """The characters in ``<dir>/<name>.yaml`` with their pictures beside them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def names(self) -> list[str]:
        return sorted((p.stem for p in self.directory.glob(f"*{SUFFIX}")), key=str.lower) \
            if self.directory.is_dir() else []

    def get(self, name: str) -> Character:
        path = self._path(name)
        if not path.is_file():
            listed = ", ".join(self.names()) or "none yet"
            raise CharacterNotFound(f"there is no character '{name}' in {self.directory} (characters: {listed})")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise CharacterError(f"the character file {path} cannot be read ({exc}); fix or delete it") from None
        character = from_tgwui(data, f"the character file {path}")
        return character if character.name == path.stem else replace(character, name=path.stem)

    def picture(self, name: str) -> Path | None:
        """The character's picture file, if it has one."""
        stem = self._path(name).with_suffix("")
        return next((p for p in (stem.with_name(stem.name + s) for s in PICTURES) if p.is_file()), None)

    def create(self, character: Character) -> Character:
        """Save a new character (CharacterError when the name is taken)."""
        character = self._checked(character)
        if self._path(character.name).exists():
            raise CharacterError(f"a character named '{character.name}' exists; choose another name or edit it")
        atomic_write_text(self._path(character.name), character.to_yaml())
        return character

    def update(self, name: str, character: Character) -> Character:
        """Save ``character`` over the one named ``name`` (renamed, with its picture, when the name changed)."""
        self.get(name)
        character = self._checked(character)
        if character.name != name and self._path(character.name).exists():
            raise CharacterError(f"a character named '{character.name}' exists; choose another name")
        atomic_write_text(self._path(character.name), character.to_yaml())
        if character.name != name:
            if (old := self.picture(name)) is not None:
                old.replace(self._path(character.name).with_suffix(old.suffix))
            self._path(name).unlink()
        return character

    def delete(self, name: str) -> None:
        self.get(name)
        if (picture := self.picture(name)) is not None:
            picture.unlink()
        self._path(name).unlink()

    def duplicate(self, name: str, new_name: str = "") -> Character:
        """A copy of ``name`` (and its picture) as ``new_name`` ("" : "<name> (copy)", numbered when taken)."""
        original = self.get(name)
        copy = self.create(replace(original, name=new_name or self.free_name(f"{name} (copy)")))
        if (picture := self.picture(name)) is not None:
            self._path(copy.name).with_suffix(picture.suffix).write_bytes(picture.read_bytes())
        return copy

    def set_picture(self, name: str, blob: bytes, suffix: str = ".png") -> Path:
        """Give character ``name`` the picture ``blob`` (PNG, JPEG or WebP), replacing the one it had."""
        self.get(name)
        suffix = suffix.lower()
        if suffix not in PICTURES or not _is_picture(blob):
            raise CharacterError("a character's picture must be a PNG, JPEG or WebP image")
        if (old := self.picture(name)) is not None:
            old.unlink()
        path = self._path(name).with_suffix(suffix)
        path.write_bytes(blob)
        return path

    def import_file(self, blob: bytes, filename: str) -> Character:
        """Import a character file (see parse_character); under a free name ("Name (2)" when "Name" exists, so
        nothing saved is overwritten). A PNG card's image becomes the character's picture."""
        character = parse_character(blob, filename)
        character = self.create(replace(character, name=self.free_name(character.name)))
        if Path(filename).suffix.lower() == ".png":
            self.set_picture(character.name, blob, ".png")
        return character

    def export_yaml(self, name: str) -> str:
        return self.get(name).to_yaml()

    def export_card(self, name: str) -> str:
        return json.dumps(self.get(name).to_card(), ensure_ascii=False, indent=2)

    def free_name(self, name: str) -> str:
        """``name``, or ``name (2)``, ``name (3)``... where it is taken."""
        name = _checked_name(name)
        candidate, n = name, 1
        while self._path(candidate).exists():
            n += 1
            candidate = f"{name} ({n})"
        return candidate

    def _checked(self, character: Character) -> Character:
        name = _checked_name(character.name)
        if not character.user_name.strip():
            raise CharacterError("the user's name must not be empty (it is how your turns are written)")
        return character if name == character.name else replace(character, name=name)

    def _path(self, name: str) -> Path:
        return self.directory / f"{_checked_name(name)}{SUFFIX}"


def _checked_name(name: Any) -> str:
    try:
        return check_name("character", name)
    except InvalidName as exc:
        raise CharacterError(str(exc)) from None


def _is_picture(blob: bytes) -> bool:
    return blob.startswith(_PNG) or blob.startswith(b"\xff\xd8\xff") or (blob[:4] == b"RIFF" and blob[8:12] == b"WEBP")
