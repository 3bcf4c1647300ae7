"""Official clients' own test suites, run against our server (tests/api/test_openai_suite.py,
tests/api/test_anthropic_suite.py): the sdist of the installed client, fetched once into the test cache, and the
test packages a suite needs beyond ours, installed beside it (never into the project's environment)."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.conftest import TEST_CACHE


def _pip(*args: str, what: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.fail(f"could not {what}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def client_sdist(package: str) -> Path:
    """The unpacked sdist of the installed version of ``package`` (its tests included), fetched once from PyPI with
    ``pip download --no-deps --no-binary :all:`` into ``.test-cache/<package>-sdist/``."""
    version = importlib.metadata.version(package)
    cache = TEST_CACHE / f"{package}-sdist"
    target = cache / f"{package}-{version}"
    if (target / "tests" / "conftest.py").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        _pip("download", "--no-deps", "--no-binary", ":all:", f"{package}=={version}", "-d", tmp,
             what=f"download the {package} {version} sdist from PyPI")
        archive = next(Path(tmp).glob(f"{package}-*.tar.gz"))
        with tarfile.open(archive) as tar:
            # the "data" filter (no links out, no devices) exists from Python 3.10.12 / 3.11.4
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        unpacked = next(p for p in Path(tmp).iterdir() if p.is_dir())
        if target.exists():  # another run finished first
            shutil.rmtree(unpacked)
        else:
            unpacked.rename(target)
    return target


def suite_packages(sdist: Path, names: tuple[str, ...]) -> Path:
    """A folder holding ``names`` (test packages the suite's conftest imports that our environment lacks) at the
    versions the sdist's requirements-dev.lock pins, installed with ``pip install --no-deps --target`` beside the
    sdist; put it on the suite's PYTHONPATH. Our environment is left as it is (their pytest plugins would load in
    every run of ours). A package is installed once: one whose pinned version's ``.dist-info`` (which pip writes
    last) is in the folder is there; a name added later is installed beside the others."""
    target = sdist.parent / f"{sdist.name}-test-packages"
    lock = (sdist / "requirements-dev.lock").read_text()
    missing = []
    for name in names:
        found = re.search(rf"^{re.escape(name)}==(\S+)", lock, re.M | re.I)
        if found is None:
            pytest.fail(f"{sdist.name}'s requirements-dev.lock pins no {name}")
        installed = target / f"{re.sub(r'[-_.]+', '_', name).lower()}-{found.group(1)}.dist-info"
        if not installed.is_dir():
            missing.append(f"{name}=={found.group(1)}")
    if missing:
        _pip("install", "--no-deps", "--target", str(target), *missing,
             what=f"install {', '.join(missing)} for its tests")
    return target
