"""The whole test suite: `python -m tests [pytest args]`.

Installs everything the tests need first (the venv with the test extras and the
optional loader backends the loader tests exercise: llama-cpp-python, built from
source on the first run, and gptqmodel; nltk and WordNet for the meteor assert;
Debian's chromium for the browser tests; promptfoo, with npm, for the tests that
compare our asserts with it; llama.cpp's GGUF converter, from the llama-cpp-python
sdist, for the tests that make tiny GGUF vision models with projector files),
then runs pytest inside the venv.

With no arguments the whole suite runs in three parts. The tests without a browser, on two workers (pytest-xdist,
a module per worker, so a module's shared server and model stay in one process). The browser tests, on two workers
(each with its own shared server and Chromium: a browser test, mostly waiting on the model and the page, keeps about
half a core busy, so two share two cores and their waits, sized for a busy machine, hold). Then the few tests
marked `alone`, one at a time: their user races a clock the machine sets (Training's Stop must land before a run of
fixed length ends).
With arguments, pytest runs them as given, in one process.
"""

import os
import subprocess
import sys

from webui import bootstrap

BROWSER_TESTS = "tests/ui"
"""Where every test marked ``browser`` or ``alone`` lives."""


def main(argv: list[str]) -> int:
    os.chdir(bootstrap.ROOT)
    bootstrap.ensure_venv(extras=("test", "llamacpp", "gptq", "meteor"))
    bootstrap.ensure_chromium()
    bootstrap.ensure_promptfoo()
    bootstrap.ensure_gguf_converter()
    if not bootstrap.in_venv():
        bootstrap.reexec_in_venv(["-m", "tests", *argv])
    if argv:
        import pytest

        return pytest.main(argv)
    workers = ["-n", "2", "--dist", "loadfile"]
    # the browser tests all live in tests/ui (tests/unit/test_suite_parts.py), so their parts collect only that
    # folder: collecting the whole tree costs each part ~20 s
    parts = (["-m", "not browser", *workers], [BROWSER_TESTS, "-m", "browser and not alone", *workers],
             [BROWSER_TESTS, "-m", "alone"])
    codes = [subprocess.call([sys.executable, "-m", "pytest", *part]) for part in parts]  # a process each
    return next((code for code in codes if code), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
