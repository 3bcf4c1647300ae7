"""Hostile character files and names, through CharactersController on a real characters folder (#43): each is
refused with a message that says what to do, or read as what it is; the folder is left as it was by a refusal (the
character there untouched), nothing outside it is read or written, and the next import still works."""

from __future__ import annotations

import base64
import json
import os
import random
import struct
import time
import zlib
from pathlib import Path
from typing import Callable

import pytest

from tests.security.conftest import write
from webui.chat.characters import MAX_FILE_BYTES, Character
from webui.controllers import UserError
from webui.controllers.characters import CharactersController
from webui.controllers.chat import ChatSession
from webui.controllers.generation import ActiveRequests

SURFACE = "character cards"
PNG = b"\x89PNG\r\n\x1a\n"
IHDR = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
GIB = 2**30
CARD = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {"name": "Mira", "description": "A cartographer.",
                                                                 "first_mes": "Hello, {{user}}."}}


def chunk(kind: bytes, body: bytes, declared: int | None = None) -> bytes:
    """A PNG chunk; ``declared``: the length it claims, where that is a lie."""
    return struct.pack(">I", len(body) if declared is None else declared) + kind + body + \
        struct.pack(">I", zlib.crc32(kind + body))


def png(*chunks: bytes, end: bool = True) -> bytes:
    return PNG + chunk(b"IHDR", IHDR) + b"".join(chunks) + (chunk(b"IEND", b"") if end else b"")


def b64(card: object) -> bytes:
    return base64.b64encode(json.dumps(card).encode())


def deflate_zeros(size: int) -> bytes:
    """``size`` zero bytes, deflated (a 1 GiB one is ~4.5 MB: under the size an import reads)."""
    packer, block = zlib.compressobj(1), bytes(2**20)
    return b"".join([*(packer.compress(block) for _ in range(size // len(block))), packer.flush()])


_bomb: list[bytes] = []


def bomb() -> bytes:
    """1 GiB of zeros, deflated once for the module."""
    if not _bomb:
        _bomb.append(deflate_zeros(GIB))
    return _bomb[0]


def sparse(size: int) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.truncate(size)  # a hole: no disk used, and reading it would take seconds
    return write


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]) + "\n"

# (file name, its content, what the message says): each refused, the folder left as it was.
REFUSED = [
    pytest.param("big.png", png(chunk(b"tEXt", b"chara\0abc", declared=100 * 2**20), end=False),
                 "is cut short: its 'tEXt' chunk says it holds 104,857,600 bytes, more than the file has left; use the "
                 "card as first saved", id="png-text-chunk-declares-100MB"),
    pytest.param("lie.png", png(chunk(b"IDAT", b"\0" * 16, declared=2**31 - 1)), "is cut short: its 'IDAT' chunk says",
                 id="png-idat-length-longer-than-the-file"),
    pytest.param("huge.png", lambda: png(chunk(b"tEXt", b"chara\0" + b"A" * (MAX_FILE_BYTES + 1))),
                 "is 8.0 MB, over the 8 MB a character file may take here; it is not read",
                 id="png-over-the-size-cap-with-a-real-9MB-text-chunk"),
    pytest.param("sparse.png", sparse(GIB), "is 1,024.0 MB, over the 8 MB a character file may take",
                 id="png-1GiB-refused-by-size-before-it-is-read"),
    pytest.param("sparse.json", sparse(GIB), "is 1,024.0 MB, over the 8 MB a character file may take",
                 id="json-1GiB-refused-by-size-before-it-is-read"),
    pytest.param("zbomb.png", lambda: png(chunk(b"zTXt", b"chara\0\0" + bomb())),
                 "'chara' text chunk unpacks to more than 8 MB of text, more than any character card holds; it is not "
                 r"read \(import the card as its JSON instead\)", id="ztxt-zip-bomb-1GiB"),
    pytest.param("ibomb.png", lambda: png(chunk(b"iTXt", b"chara\0\1\0en\0chara\0" + bomb())),
                 "'chara' text chunk unpacks to more than 8 MB", id="itxt-compressed-zip-bomb-1GiB"),
    pytest.param("many.png", lambda: png(*(chunk(b"zTXt", f"k{i}".encode() + b"\0\0" + deflate_zeros(3 * 2**20))
                                          for i in range(4))),
                 "'k2' text chunk unpacks to more than 8 MB", id="ztxt-small-bombs-that-add-up-past-the-cap"),
    pytest.param("cut.png", png(chunk(b"zTXt", b"chara\0\0" + zlib.compress(b64(CARD))[:-20])),
                 "'chara' text chunk is cut short; use the card as first saved", id="ztxt-stream-cut-short"),
    pytest.param("notz.png", png(chunk(b"zTXt", b"chara\0\0not zlib at all")), "'chara' text chunk cannot be read",
                 id="ztxt-not-zlib"),
    pytest.param("deep.png", png(chunk(b"tEXt", b"chara\0" + base64.b64encode(nested(20_000).encode()))),
                 "'chara' chunk: the JSON nests deeper than 100 levels", id="png-chara-chunk-json-bomb-20000-levels"),
    pytest.param("nob64.png", png(chunk(b"tEXt", b"chara\0%%% not base64 %%%")), "not base64-encoded JSON",
                 id="png-chara-chunk-not-base64"),
    pytest.param("nocard.png", png(chunk(b"tEXt", b"Comment\0hello")), "PNG without a character card in it",
                 id="png-without-a-card"),
    pytest.param("photo.png", b"\xff\xd8\xff\xe0" + bytes(64), "is not a PNG file", id="png-name-on-a-jpeg"),
    pytest.param("garbage.png", random.Random(7).randbytes(4096), "is not a PNG file", id="png-name-on-random-bytes"),
    pytest.param("deep.json", nested(20_000).encode(), "the JSON nests deeper than 100 levels; a character card is a flat "
                 "object", id="json-bomb-20000-nested-arrays"),
    pytest.param("deepobj.json", ('{"a":' * 20_000 + "1" + "}" * 20_000).encode(), "nests deeper than",
                 id="json-bomb-20000-nested-objects"),
    pytest.param("array.json", lambda: json.dumps([0] * 2_000_000).encode(), "is not a character card",
                 id="json-huge-top-level-array"),
    pytest.param("v9.json", json.dumps({"spec": "chara_card_v9", "data": CARD["data"]}).encode(),
                 "is a 'chara_card_v9' card; this reads chara_card_v2 and chara_card_v3 cards", id="card-unknown-spec"),
    pytest.param("flat.json", json.dumps({"spec": "chara_card_v2", "data": "Mira"}).encode(),
                 "keeps its fields under 'data', an object", id="card-data-not-an-object"),
    pytest.param("listname.json", json.dumps({**CARD, "data": {**CARD["data"], "name": ["Mira"]}}).encode(),
                 "has no character name: it needs data.name", id="card-name-is-a-list"),
    pytest.param("numdesc.json", json.dumps({**CARD, "data": {**CARD["data"], "description": 42}}).encode(),
                 "'description' must be text, got int", id="card-description-is-a-number"),
    pytest.param("v1num.json", json.dumps({"name": 7, "description": "x"}).encode(), "has no character name",
                 id="v1-card-name-is-a-number"),
    pytest.param("tgctx.json", json.dumps({"name": "Mira", "context": {"a": 1}}).encode(),
                 "'context' must be text, got dict", id="tgwui-json-context-is-an-object"),
    pytest.param("surrogate.json", json.dumps({**CARD, "data": {**CARD["data"], "description": "\ud800"}}).encode(),
                 "context is not valid text: it holds a lone UTF-16 surrogate", id="card-text-with-a-lone-surrogate"),
    pytest.param("surname.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "Mi\udc80ra"}}).encode(),
                 "character name 'Mi\\\\udc80ra' is not valid text", id="card-name-with-a-lone-surrogate"),
    pytest.param("long.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "N" * 10_000}}).encode(),
                 r"cannot be saved under its character's name: character name is too long \(10,000 characters; at most "
                 r"120\).*edit the name in the file", id="card-name-of-10000-characters"),
    pytest.param("dots.json", json.dumps({**CARD, "data": {**CARD["data"], "name": ".."}}).encode(),
                 "cannot be saved under its character's name: character name '..' must be a plain name",
                 id="card-name-dot-dot"),
    pytest.param("latin1.json", '{"name": "Mira", "context": "café"}'.encode("latin-1"),
                 r"is not UTF-8 text \(byte 0xe9 at offset 32\); save it as UTF-8 and import it again",
                 id="json-latin-1-bytes"),
    pytest.param("utf16.yaml", "name: Mira\ncontext: hi\n".encode("utf-16"),
                 r"is not UTF-8 text \(it is UTF-16\); save it as UTF-8", id="yaml-utf-16-with-bom"),
    pytest.param("noise.json", bytes(range(128, 256)) * 8, "is not UTF-8 text", id="json-binary-garbage"),
    pytest.param("laughs3.yaml", (BILLION_LAUGHS + "name: Mira\ncontext: hi\n").encode(), "billion laughs",
                 id="yaml-billion-laughs-in-a-key-it-does-not-use"),  # refused all the same: webui/safeload.py
    pytest.param("laughs.yaml", (BILLION_LAUGHS + "name: *i\n").encode(), "billion laughs",
                 id="yaml-billion-laughs-as-the-name"),
    pytest.param("laughs2.yaml", (BILLION_LAUGHS + "name: Mira\ncontext: *i\n").encode(),
                 "billion laughs", id="yaml-billion-laughs-as-the-context"),
    pytest.param("deep.yaml", nested(20_000).encode(), "the YAML nests deeper than 100 levels",
                 id="yaml-bomb-20000-nested-lists"),
    pytest.param("tag.yaml", b"name: !!python/object/apply:os.system ['echo owned']\n", "is not valid YAML",
                 id="yaml-python-object-tag"),
    pytest.param("big.yaml", lambda: b"name: Mira\ncontext: " + b"a" * (2**20) + b"\n",
                 "is 1.0 MB, over the 1 MB a character file may take here", id="yaml-over-its-1MB-cap"),
    pytest.param("mira.txt", b"name: Mira\n", "import a character as .yaml", id="unknown-suffix"),
    pytest.param("nosuffix", b"name: Mira\n", "import a character as .yaml", id="no-suffix"),
]

# (file name, its content, the name it is saved under, what else is checked): each imported, and only it.
READ = [
    pytest.param("v3.json", json.dumps({**CARD, "spec": "chara_card_v3", "spec_version": "3.0"}).encode(), "Mira",
                 id="card-v3"),
    pytest.param("v1.json", json.dumps({"name": "Mira", "description": "A cartographer.",
                                        "first_mes": "Hello."}).encode(), "Mira", id="card-v1-without-spec"),
    pytest.param("tags.json", lambda: json.dumps({**CARD, "data": {**CARD["data"], "tags": [0] * 1_000_000}}).encode(),
                 "Mira", id="card-with-a-huge-array-it-does-not-use"),
    pytest.param("ok.png", png(chunk(b"iTXt", b"chara\0\1\0\0\0" + zlib.compress(b64(CARD)))), "Mira",
                 id="png-card-in-a-compressed-itxt-chunk"),
    pytest.param("up.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "../x"}}).encode(), "_x",
                 id="card-name-dot-dot-slash"),
    pytest.param("etc.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "/etc/passwd"}}).encode(),
                 "_etc_passwd", id="card-name-absolute-path"),
    pytest.param("ab.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "a/b"}}).encode(), "a_b",
                 id="card-name-with-a-slash"),
    pytest.param("hidden.json", json.dumps({**CARD, "data": {**CARD["data"], "name": ".hidden"}}).encode(), "hidden",
                 id="card-name-hidden"),
    pytest.param("con.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "con\x00"}}).encode(), "con_",
                 id="card-name-with-a-nul"),
    pytest.param("win.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "C:\\x"}}).encode(), "C__x",
                 id="card-name-windows-path"),
    pytest.param("keep.json", json.dumps({**CARD, "data": {**CARD["data"], "name": "Keep"}}).encode(), "Keep (2)",
                 id="card-name-taken"),
]

BAD_NAMES = ["../x", "a/b", "..", ".hidden", "con\x00"]


@pytest.fixture
def characters(services) -> CharactersController:
    """The controller, with one character ("Keep", with a picture) that a refusal must leave as it was."""
    controller = CharactersController(ChatSession(services, ActiveRequests()))
    controller.save(None, "Keep", "Hi.", "Kept as it was.")
    services.characters.set_picture("Keep", png())
    return controller


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the user data dir, with a character and a picture a link could point at."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.yaml").write_text("name: Secret\ncontext: the secret context\n")
    (folder / "secret.png").write_bytes(png(chunk(b"tEXt", b"secret\0the secret picture")))
    return folder


def contents(folder: Path) -> dict[str, bytes | str]:
    """Every entry of ``folder``: a file's bytes, a link's target."""
    return {p.name: os.readlink(p) if p.is_symlink() else p.read_bytes() for p in sorted(folder.iterdir())}


def listing(root: Path) -> list[str]:
    """Every path under ``root`` (links not followed): what a refusal must not add to, anywhere."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def still_works(characters: CharactersController) -> None:
    assert characters.open("Keep").character == Character("Keep", "Hi.", "Kept as it was.")
    path = characters.services.config.user_data_dir / "after.json"
    path.write_text(json.dumps({**CARD, "data": {**CARD["data"], "name": "After"}}))
    assert characters.import_file(path).character.name == "After"


@pytest.mark.parametrize(("name", "content", "message"), REFUSED)
def test_a_hostile_file_is_refused_and_the_folder_is_left_as_it_was(characters, tmp_path, name, content, message):
    path = write(tmp_path / "upload", name, content)
    folder = characters.store.directory
    before, around = contents(folder), listing(tmp_path)
    started = time.monotonic()
    with pytest.raises(UserError, match=f"^Could not import the character: .*{message}") as caught:
        characters.import_file(path)
    assert time.monotonic() - started < 10, "refused without reading or unpacking it all"
    assert len(str(caught.value)) < 600, "the message names the problem, not the file's content"
    assert contents(folder) == before and listing(tmp_path) == around
    still_works(characters)


@pytest.mark.parametrize(("name", "content", "saved"), READ)
def test_a_strange_but_readable_file_imports_as_what_it_says(characters, tmp_path, name, content, saved):
    path = write(tmp_path / "upload", name, content)
    folder = characters.store.directory
    before = contents(folder)
    view = characters.import_file(path)
    assert view.character is not None and view.character.name == saved
    assert "'s Persona: A cartographer." in view.character.context or name.endswith(".yaml")
    assert saved in view.note or saved == "Mira"
    after = contents(folder)
    new = set(after) - set(before)
    assert new == {f"{saved}.yaml"} | ({f"{saved}.png"} if name.endswith(".png") else set())
    assert {k: v for k, v in after.items() if k in before} == before
    assert len(after[f"{saved}.yaml"]) < 1000, "only the character's own fields are kept"
    still_works(characters)


@pytest.mark.parametrize("bad", BAD_NAMES)
@pytest.mark.parametrize("how", ["create", "rename", "duplicate"])
def test_a_name_with_path_characters_is_refused(characters, tmp_path, how, bad):
    folder = characters.store.directory
    before, around = contents(folder), listing(tmp_path)
    act = {"create": lambda: characters.save(None, bad, "Hi.", "ctx"),
           "rename": lambda: characters.save("Keep", bad, "Hi.", "ctx"),
           "duplicate": lambda: characters.duplicate("Keep", bad)}[how]
    with pytest.raises(UserError, match=r"must be a plain name, without path characters .*; choose another"):
        act()
    assert contents(folder) == before and listing(tmp_path) == around
    still_works(characters)


def test_a_character_file_that_links_outside_the_folder_is_not_read(characters, outside):
    (characters.store.directory / "Secret.yaml").symlink_to(outside / "secret.yaml")
    with pytest.raises(UserError, match="'Secret.yaml' in .* is a link to a file outside that folder, which is not "
                                        "read; put the file itself in the folder"):
        characters.open("Secret")
    with pytest.raises(UserError, match="is a link to a file outside that folder"):
        characters.export("Secret", "card")
    still_works(characters)


def test_a_picture_that_links_outside_the_folder_is_not_shown_or_copied(characters, outside):
    folder = characters.store.directory
    (folder / "Keep.png").unlink()
    (folder / "Keep.png").symlink_to(outside / "secret.png")
    for act in (lambda: characters.open("Keep"), lambda: characters.duplicate("Keep", "Copy")):
        with pytest.raises(UserError, match="'Keep.png' in .* is a link to a file outside that folder"):
            act()
    assert "Copy.yaml" not in contents(folder)
    characters.delete("Keep", confirmed=True)  # removes the link, not what it points at
    assert (outside / "secret.png").is_file() and "Keep.png" not in contents(folder)


def test_saving_where_a_dangling_link_lies_never_writes_through_it(characters, outside):
    folder = characters.store.directory
    (folder / "Ghost.yaml").symlink_to(outside / "made-by-us.yaml")
    with pytest.raises(UserError, match="a character named 'Ghost' exists; choose another name"):
        characters.save(None, "Ghost", "Boo.", "ctx")
    assert not (outside / "made-by-us.yaml").exists()
    (folder / "Keep.jpg").symlink_to(outside / "picture.jpg")  # a dangling picture link beside Keep's PNG
    picture = outside.parent / "upload.jpg"
    picture.write_bytes(b"\xff\xd8\xff\xe0" + bytes(64))
    characters.set_picture("Keep", picture)
    assert not (outside / "picture.jpg").exists() and not (folder / "Keep.jpg").is_symlink()


@pytest.mark.parametrize(("name", "content", "message"), [
    pytest.param("x.png", b"not an image at all", "a character's picture must be a PNG, JPEG or WebP image",
                 id="picture-that-is-not-an-image"),
    pytest.param("x.exe", png(), "a character's picture must be a PNG, JPEG or WebP image",
                 id="picture-with-a-program-suffix"),
    pytest.param("x.png", sparse(GIB), r"the picture is 1,024.0 MB, over the 8 MB a character's picture may take; "
                 "choose a smaller one", id="picture-1GiB-refused-by-size-before-it-is-read"),
])
def test_a_hostile_picture_is_refused_and_the_old_one_kept(characters, tmp_path, name, content, message):
    path = write(tmp_path / "upload", name, content)
    folder = characters.store.directory
    before = contents(folder)
    started = time.monotonic()
    with pytest.raises(UserError, match=f"^Could not set the picture: {message}"):
        characters.set_picture("Keep", path)
    assert time.monotonic() - started < 5 and contents(folder) == before
    still_works(characters)
