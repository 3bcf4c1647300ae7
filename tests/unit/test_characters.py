"""Characters: the store (create, update, delete, duplicate, list), imports of real text-generation-webui YAML and
SillyTavern v2 cards (JSON and PNG), exports, placeholders, and bad files."""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path

import pytest
import yaml

from webui.chat.characters import (Character, CharacterError, CharacterStore, card_from_png, fill_names,
                                   parse_character)

DATA = Path(__file__).resolve().parents[1] / "data" / "characters"


def png_with(chunks: list[tuple[bytes, bytes]]) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + b"".join(chunk(k, b) for k, b in chunks)
            + chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b""))


@pytest.fixture
def store(tmp_path: Path) -> CharacterStore:
    return CharacterStore(tmp_path / "characters")


def test_tgwui_yaml_imports_with_example_dialogue_after_the_context() -> None:
    c = parse_character((DATA / "Example.yaml").read_bytes(), "Example.yaml")
    assert c.name == "Chiharu Yamada"
    assert c.greeting.startswith("*Chiharu strides into the room")
    assert c.context.startswith("Chiharu Yamada's Persona: Chiharu Yamada is a young")
    assert c.context.endswith("{{char}}: Yeah, it's really fun. I'm lucky to be able to do this as a job.")
    assert "\n{{user}}: So how did you get into computer engineering?\n" in c.context
    assert c.user_name == "You"
    assert c.fill(c.context).count("You: ") == 5 and "{{" not in c.fill(c.context)


def test_v2_json_card_imports_as_tgwui_does() -> None:
    c = parse_character((DATA / "Seraphina.json").read_bytes(), "Seraphina.json")
    card = json.loads((DATA / "Seraphina.json").read_text(encoding="utf-8"))["data"]
    assert c.name == "Seraphina"
    assert c.greeting == card["first_mes"]
    assert c.context == f"Seraphina's Persona: {card['description'].strip()}"


def test_png_card_holds_the_same_card_as_its_json() -> None:
    blob = (DATA / "Seraphina.png").read_bytes()
    assert card_from_png(blob) == json.loads((DATA / "Seraphina.json").read_text(encoding="utf-8"))
    assert parse_character(blob, "Seraphina.png") == parse_character((DATA / "Seraphina.json").read_bytes(),
                                                                     "x.json")


def test_pygmalion_style_keys_and_v1_cards() -> None:
    old = {"char_name": "Ann", "char_persona": "kind", "world_scenario": "a ship", "char_greeting": "Hi <USER>",
           "example_dialogue": "<USER>: yo\n<BOT>: hey"}
    c = parse_character(json.dumps(old).encode(), "ann.json")
    assert c == Character("Ann", "Hi <USER>", "Ann's Persona: kind\nScenario: a ship\n<USER>: yo\n<BOT>: hey")
    v1 = {"name": "Bo", "description": "tall", "personality": "calm", "scenario": "", "first_mes": "Hello",
          "mes_example": "{{user}}: hi"}
    assert parse_character(json.dumps(v1).encode(), "bo.json") == Character(
        "Bo", "Hello", "Bo's Persona: tall\nBo's Personality: calm\n{{user}}: hi")


def test_placeholders_fill_as_the_formats_do() -> None:
    assert fill_names("{{char}} meets {{User}}; <BOT> and <USER> {{CHAR}}", "Ann", "Bo") == \
        "Bo meets Ann; Bo and Ann Bo"


def test_store_create_update_rename_duplicate_delete(store: CharacterStore) -> None:
    assert store.names() == []
    store.create(Character("Ann", "Hi {{user}}", "Ann is kind.", "Zed", "A traveller."))
    assert store.get("Ann") == Character("Ann", "Hi {{user}}", "Ann is kind.", "Zed", "A traveller.")
    with pytest.raises(CharacterError, match="exists"):
        store.create(Character("Ann"))
    store.set_picture("Ann", png_with([]))
    store.update("Ann", Character("Anna", "Hello", "Anna is kind."))
    assert store.names() == ["Anna"] and store.picture("Anna") is not None and store.picture("Ann") is None
    copy = store.duplicate("Anna")
    assert copy.name == "Anna (copy)" and store.get("Anna (copy)").context == "Anna is kind."
    assert store.picture("Anna (copy)") is not None
    assert store.duplicate("Anna").name == "Anna (copy) (2)"
    store.delete("Anna")
    assert store.names() == ["Anna (copy)", "Anna (copy) (2)"]
    assert not (store.directory / "Anna.png").exists()


def test_saved_files_are_tgwui_yaml(store: CharacterStore) -> None:
    store.create(Character("Ann", "Hi", "ctx", "Zed", "bio"))
    data = yaml.safe_load((store.directory / "Ann.yaml").read_text(encoding="utf-8"))
    assert data == {"name": "Ann", "greeting": "Hi", "context": "ctx", "user_name": "Zed", "user_bio": "bio"}


def test_import_keeps_what_is_saved_and_png_becomes_the_picture(store: CharacterStore) -> None:
    store.create(Character("Seraphina", "mine"))
    imported = store.import_file((DATA / "Seraphina.png").read_bytes(), "Seraphina.png")
    assert imported.name == "Seraphina (2)"
    assert store.get("Seraphina").greeting == "mine"
    picture = store.picture("Seraphina (2)")
    assert picture is not None and picture.read_bytes() == (DATA / "Seraphina.png").read_bytes()


def test_exports_import_back_unchanged(store: CharacterStore) -> None:
    c = store.create(Character("Ann", "Hi {{user}}", "Ann is kind.\n{{user}}: hi", "Zed", "A traveller."))
    card = json.loads(store.export_card("Ann"))
    assert card["spec"] == "chara_card_v2" and card["data"]["first_mes"] == "Hi {{user}}"
    assert card["data"]["description"] == c.context
    assert parse_character(store.export_card("Ann").encode(), "a.json") == c
    assert parse_character(store.export_yaml("Ann").encode(), "a.yaml") == c
    png = png_with([(b"tEXt", b"chara\0" + base64.b64encode(store.export_card("Ann").encode()))])
    assert parse_character(png, "a.png") == c


@pytest.mark.parametrize("blob, filename, message", [
    (b"name: [unclosed", "x.yaml", "'x.yaml' is not valid YAML"),
    (b"greeting: hi\n", "x.yaml", "'x.yaml' has no character name"),
    (b"- a list\n", "x.yaml", "'x.yaml' is not a character"),
    (b"name: A\ncontext: [1, 2]\n", "x.yaml", "'context' must be text"),
    (b"{not json", "x.json", "'x.json' is not valid JSON"),
    (b'{"spec": "chara_card_v2", "data": {"first_mes": "hi"}}', "x.json", "needs data.name"),
    (b'{"spec": "chara_card_v9", "data": {}}', "x.json", "'chara_card_v9' card"),
    (b"GIF89a", "x.png", "is not a PNG file"),
    (png_with([]), "x.png", "no 'chara' text chunk"),
    (png_with([(b"tEXt", b"chara\0%%%not base64")]), "x.png", "not base64-encoded JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x10\x00tEXtchara", "x.png", "cut short"),
    (b"\xff\xfe", "x.yaml", "not UTF-8"),
    (b"name: A", "x.txt", "import a character as .yaml"),
])
def test_bad_files_say_what_is_wrong(store: CharacterStore, blob: bytes, filename: str, message: str) -> None:
    store.create(Character("A", "kept"))
    with pytest.raises(CharacterError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        store.import_file(blob, filename)
    assert store.names() == ["A"] and store.get("A").greeting == "kept"


def test_bad_names_and_missing_characters(store: CharacterStore) -> None:
    with pytest.raises(CharacterError, match="plain name"):
        store.create(Character("../evil"))
    with pytest.raises(CharacterError, match="must not be empty"):
        store.create(Character("Ann", user_name=" "))
    with pytest.raises(CharacterError, match=r"no character 'Nope' in .*characters \(characters: none yet\)"):
        store.get("Nope")
    with pytest.raises(CharacterError, match="PNG, JPEG or WebP"):
        store.create(Character("Ann")) and store.set_picture("Ann", b"not an image")
    (store.directory / "Broken.yaml").write_text("name: [", encoding="utf-8")
    with pytest.raises(CharacterError, match="Broken.yaml cannot be read"):
        store.get("Broken")


def test_record_by_content_round_trips_and_checks_fields() -> None:
    c = Character("Ann", "Hi", "ctx", "Zed", "bio")
    assert Character.from_record(json.loads(json.dumps(c.to_record()))) == c
    with pytest.raises(CharacterError, match="'greeting' must be text"):
        Character.from_record({"name": "A", "greeting": 3})
    with pytest.raises(CharacterError, match='at least "name"'):
        Character.from_record({"greeting": "x"})


def test_tgwui_names_under_its_other_keys() -> None:
    c = parse_character(b"bot: Rex\nyour_name: Kim\ncontext: '{{char}} barks.'\n", "rex.yaml")
    assert (c.name, c.user_name, c.fill(c.context)) == ("Rex", "Kim", "Rex barks.")
