"""Characters for chats: who the model plays (name, greeting, context, picture) and who the user is (name, bio).

A character is a YAML file ``<user data>/characters/<name>.yaml`` in text-generation-webui's shape (``name``,
``greeting``, ``context``; ours adds ``user_name`` and ``user_bio``, which text-generation-webui ignores), its
picture ``<name>.png`` (or .jpg/.jpeg/.webp) beside it. Imports read text-generation-webui's YAML (and its older
Pygmalion-style keys ``char_name``/``char_persona``/``world_scenario``/``example_dialogue``), TavernAI/SillyTavern
cards as JSON (v1, v2 ``chara_card_v2``, v3) and PNG cards (the card's JSON base64-encoded in a ``tEXt`` chunk named
``chara``, or ``ccv3``). Exports write the YAML and a v2 card. ``{{char}}``/``{{user}}`` (any case) and
``<BOT>``/``<USER>`` are kept as written and filled when a prompt or greeting is made, as those formats do.

Imports are files from anywhere, so each is read with limits: its size (MAX_FILE_BYTES, a YAML file MAX_YAML_BYTES)
before it is parsed, what a PNG's compressed text may unpack to, and how deeply its JSON or YAML may nest; a card's
name becomes a file name here only without path characters. Nothing is saved until the whole file has been read.
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

from webui.fsutil import atomic_write_bytes, atomic_write_text
from webui.names import MAX_NAME_LENGTH, InvalidName, check_name, inside, plain_name
from webui.safeload import DataTooLarge, load_json, load_yaml

SUFFIX = ".yaml"
PICTURES = (".png", ".jpg", ".jpeg", ".webp")
DEFAULT_USER = "You"
CARD_SPEC = "chara_card_v2"
OURS = "llm-workbench"
"""The key of our card extension: the exact fields, so an exported card imports back unchanged."""
MAX_FILE_BYTES = 8 * 2**20
"""The largest character file an import reads (a PNG card is its picture too) and the largest picture."""
MAX_YAML_BYTES = 2**20
"""The largest YAML character an import reads: a character is a few KB, and YAML parses slowly."""
MAX_TEXT_BYTES = 8 * 2**20
"""What a PNG's compressed text chunks may unpack to, together (a zip bomb in a chunk stops here)."""
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
    """A PNG's tEXt, zTXt and iTXt chunks, keyword -> text; CharacterError for a file that is not a PNG, ends
    inside a chunk, or whose compressed text unpacks to more than MAX_TEXT_BYTES."""
    if not blob.startswith(_PNG):
        raise CharacterError(f"{source} is not a PNG file (a card is a PNG with the character in a 'chara' chunk)")
    out: dict[str, str] = {}
    budget = MAX_TEXT_BYTES
    at = len(_PNG)
    while at + 8 <= len(blob):
        size, kind = struct.unpack(">I4s", blob[at:at + 8])
        if at + 8 + size > len(blob):
            raise CharacterError(f"{source} is cut short: its '{kind.decode('latin-1')}' chunk says it holds "
                                 f"{size:,} bytes, more than the file has left; use the card as first saved")
        body = blob[at + 8:at + 8 + size]
        key, _, rest = body.partition(b"\0")
        try:
            text = _chunk_text(kind, rest, budget, source, key.decode("latin-1"))
        except (zlib.error, UnicodeDecodeError):
            raise CharacterError(f"{source}: its '{key.decode('latin-1')}' text chunk cannot be read") from None
        if text is not None:
            budget -= len(text)
            out.setdefault(key.decode("latin-1"), text)
        if kind == b"IEND":
            break
        at += 12 + size
    return out


def _chunk_text(kind: bytes, rest: bytes, budget: int, source: str, key: str) -> str | None:
    """The text of a tEXt/zTXt/iTXt chunk (``rest``: what follows its keyword); None for any other chunk."""
    if kind == b"tEXt":
        return rest.decode("latin-1")
    if kind == b"zTXt":  # compression method, then the compressed text
        return _inflate(rest[1:], budget, source, key).decode("latin-1")
    if kind == b"iTXt":  # compressed or not, compression method, language, translated keyword, then the text
        parts = rest[2:].split(b"\0", 2)
        if len(parts) == 3:
            return (_inflate(parts[2], budget, source, key) if rest[:1] == b"\1" else parts[2]).decode("utf-8")
    return None


def _inflate(data: bytes, budget: int, source: str, key: str) -> bytes:
    """``data`` decompressed, at most ``budget`` bytes of it (never more is unpacked)."""
    unpacker = zlib.decompressobj()
    text = unpacker.decompress(data, max(budget, 0) + 1)  # (a max_length of 0 would be no limit at all)
    if len(text) > budget:
        raise CharacterError(f"{source}: its '{key}' text chunk unpacks to more than "
                             f"{MAX_TEXT_BYTES // 2**20} MB of text, more than any character card holds; it is not "
                             "read (import the card as its JSON instead)")
    if not unpacker.eof:
        raise CharacterError(f"{source}: its '{key}' text chunk is cut short; use the card as first saved")
    return text


def card_from_png(blob: bytes, source: str = "the picture") -> dict[str, Any]:
    """The card JSON inside a PNG card (its ``ccv3`` chunk where there is one, else ``chara``)."""
    chunks = png_text_chunks(blob, source)
    text = chunks.get("ccv3") or chunks.get("chara")
    if text is None:
        raise CharacterError(f"{source} is a PNG without a character card in it (no 'chara' text chunk); "
                             "import the card's PNG as downloaded, or its JSON")
    try:
        decoded = base64.b64decode(text, validate=False).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise CharacterError(f"{source}: its 'chara' chunk is not base64-encoded JSON") from None
    return _json(decoded, f"{source}'s 'chara' chunk")


def check_size(size: int, filename: str) -> None:
    """CharacterError when a character file of ``size`` bytes is over the size an import reads (before it is read
    at all)."""
    limit = MAX_YAML_BYTES if Path(filename).suffix.lower() in (".yaml", ".yml") else MAX_FILE_BYTES
    if size > limit:
        raise CharacterError(f"'{Path(filename).name}' is {size / 2**20:,.1f} MB, over the {limit / 2**20:g} MB a "
                             "character file may take here; it is not read (a character's text is a few KB: "
                             "export a smaller card, or a PNG card with a smaller picture)")


def _text(blob: bytes, source: str) -> str:
    if blob.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise CharacterError(f"{source} is not UTF-8 text (it is UTF-16); save it as UTF-8 and import it again")
    try:
        return blob.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CharacterError(f"{source} is not UTF-8 text (byte {blob[exc.start]:#04x} at offset {exc.start}); "
                             "save it as UTF-8 and import it again") from None


def _json(text: str, source: str) -> Any:
    try:
        return load_json(text)
    except DataTooLarge as exc:
        raise CharacterError(f"{source}: {exc}; a character card is a flat object") from None
    except ValueError as exc:
        raise CharacterError(f"{source} is not valid JSON: {exc}") from None


def _yaml(text: str, source: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise CharacterError(f"{source} is not valid YAML: {exc}") from None
    except DataTooLarge as exc:
        raise CharacterError(f"{source}: {exc}; a character is a flat mapping of name, greeting, "
                             "context") from None


def parse_character(blob: bytes, filename: str) -> Character:
    """A character from an uploaded file, by its suffix: .yaml/.yml (text-generation-webui), .json (a card, or a
    text-generation-webui JSON character) or .png (a card)."""
    suffix = Path(filename).suffix.lower()
    source = f"'{Path(filename).name}'"
    check_size(len(blob), filename)
    if suffix == ".png":
        return from_card(card_from_png(blob, source), source)
    if suffix in (".yaml", ".yml"):
        return from_tgwui(_yaml(_text(blob, source), source), source)
    if suffix == ".json":
        data = _json(_text(blob, source), source)
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
        self._inside(path)
        try:
            data = load_yaml(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, ValueError) as exc:  # UnicodeDecodeError and DataTooLarge are ValueErrors
            raise CharacterError(f"the character file {path} cannot be read ({exc}); fix or delete it") from None
        character = from_tgwui(data, f"the character file {path}")
        return character if character.name == path.stem else replace(character, name=path.stem)

    def picture(self, name: str) -> Path | None:
        """The character's picture file, if it has one (CharacterError where it is a link to elsewhere)."""
        found = self._picture_file(name)
        return self._inside(found) if found is not None else None

    def create(self, character: Character) -> Character:
        """Save a new character (CharacterError when the name is taken)."""
        character = self._checked(character)
        if self._taken(character.name):
            raise CharacterError(f"a character named '{character.name}' exists; choose another name or edit it")
        atomic_write_text(self._path(character.name), character.to_yaml())
        return character

    def update(self, name: str, character: Character) -> Character:
        """Save ``character`` over the one named ``name`` (renamed, with its picture, when the name changed)."""
        self.get(name)
        character = self._checked(character)
        if character.name != name and self._taken(character.name):
            raise CharacterError(f"a character named '{character.name}' exists; choose another name")
        atomic_write_text(self._path(character.name), character.to_yaml())
        if character.name != name:
            if (old := self.picture(name)) is not None:
                old.replace(self._path(character.name).with_suffix(old.suffix))
            self._path(name).unlink()
        return character

    def delete(self, name: str) -> None:
        self.get(name)
        if (picture := self._picture_file(name)) is not None:
            picture.unlink()  # (a link: the link itself)
        self._path(name).unlink()

    def duplicate(self, name: str, new_name: str = "") -> Character:
        """A copy of ``name`` (and its picture) as ``new_name`` ("" : "<name> (copy)", numbered when taken)."""
        original = self.get(name)
        picture = self.picture(name)
        copy = self.create(replace(original, name=new_name or self.free_name(f"{name} (copy)")))
        if picture is not None:
            atomic_write_bytes(self._path(copy.name).with_suffix(picture.suffix), picture.read_bytes())
        return copy

    def set_picture(self, name: str, blob: bytes, suffix: str = ".png") -> Path:
        """Give character ``name`` the picture ``blob`` (PNG, JPEG or WebP), replacing the one it had."""
        self.get(name)
        suffix = suffix.lower()
        check_picture(blob, suffix)
        old = self._picture_file(name)
        path = self._path(name).with_suffix(suffix)
        atomic_write_bytes(path, blob)
        if old is not None and old != path:
            old.unlink()
        return path

    def import_file(self, blob: bytes, filename: str) -> Character:
        """Import a character file (see parse_character); under a free name ("Name (2)" when "Name" exists, so
        nothing saved is overwritten). A PNG card's image becomes the character's picture."""
        return self.add_imported(parse_character(blob, filename), blob if Path(filename).suffix.lower() == ".png"
                                 else None, f"'{Path(filename).name}'")

    def add_imported(self, character: Character, picture: bytes | None = None, source: str = "the file"
                     ) -> Character:
        """Save a character read from a file under a free name made from its own: characters a file name cannot
        hold (/ \\ : and control characters) become "_", leading dots go. ``picture``: a PNG card's image."""
        if picture is not None:
            check_picture(picture, ".png")
        try:
            name = self.free_name(plain_name(character.name) or character.name)
        except CharacterError as exc:
            raise CharacterError(f"{source} cannot be saved under its character's name: {exc} (edit the name in "
                                 "the file, then import it again)") from None
        character = self.create(replace(character, name=name))
        if picture is not None:
            atomic_write_bytes(self._path(character.name).with_suffix(".png"), picture)
        return character

    def export_yaml(self, name: str) -> str:
        return self.get(name).to_yaml()

    def export_card(self, name: str) -> str:
        return json.dumps(self.get(name).to_card(), ensure_ascii=False, indent=2)

    def free_name(self, name: str) -> str:
        """``name``, or ``name (2)``, ``name (3)``... where it is taken (shortened to leave room for the number)."""
        name = _checked_name(name)
        candidate, n = name, 1
        while self._taken(candidate):
            n += 1
            candidate = f"{name[:MAX_NAME_LENGTH - len(f' ({n})')].rstrip()} ({n})"
        return _checked_name(candidate)

    def _taken(self, name: str) -> bool:
        path = self._path(name)
        return path.exists() or path.is_symlink()

    def _checked(self, character: Character) -> Character:
        name = _checked_name(character.name)
        if not character.user_name.strip():
            raise CharacterError("the user's name must not be empty (it is how your turns are written)")
        for key, value in character.to_record().items():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise CharacterError(f"the character's {key} is not valid text: it holds a lone UTF-16 surrogate "
                                     "(as a JSON escape such as \\ud800 makes); remove it and try again") from None
        return character if name == character.name else replace(character, name=name)

    def _path(self, name: str) -> Path:
        return self.directory / f"{_checked_name(name)}{SUFFIX}"

    def _picture_file(self, name: str) -> Path | None:
        stem = self._path(name).with_suffix("")
        return next((p for p in (stem.with_name(stem.name + s) for s in PICTURES) if p.is_file()), None)

    def _inside(self, path: Path) -> Path:
        try:
            return inside("character file", self.directory, path)
        except InvalidName as exc:
            raise CharacterError(str(exc)) from None


def check_picture_size(size: int) -> None:
    """CharacterError when a picture of ``size`` bytes is over MAX_FILE_BYTES."""
    if size > MAX_FILE_BYTES:
        raise CharacterError(f"the picture is {size / 2**20:,.1f} MB, over the {MAX_FILE_BYTES // 2**20} MB a "
                             "character's picture may take; choose a smaller one")


def check_picture(blob: bytes, suffix: str) -> None:
    """CharacterError unless ``blob`` is a PNG, JPEG or WebP image of at most MAX_FILE_BYTES."""
    check_picture_size(len(blob))
    if suffix.lower() not in PICTURES or not _is_picture(blob):
        raise CharacterError("a character's picture must be a PNG, JPEG or WebP image")


def _checked_name(name: Any) -> str:
    try:
        return check_name("character", name)
    except InvalidName as exc:
        raise CharacterError(str(exc)) from None


def _is_picture(blob: bytes) -> bool:
    return blob.startswith(_PNG) or blob.startswith(b"\xff\xd8\xff") or (blob[:4] == b"RIFF" and blob[8:12] == b"WEBP")
