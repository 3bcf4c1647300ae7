"""The whole test suite: `python -m tests [pytest args]`.

Installs everything the tests need first (the venv with the test extras and the
optional loader backends the loader tests exercise: llama-cpp-python, built from
source on the first run, and gptqmodel; nltk and WordNet for the meteor assert;
Debian's chromium for the browser tests; promptfoo, with npm, for the tests that
compare our asserts with it; llama.cpp's GGUF converter, from the llama-cpp-python
sdist, for the tests that make tiny GGUF vision models with projector files),
then runs pytest inside the venv.
"""

import os
import sys

from webui import bootstrap


def main(argv: list[str]) -> int:
    os.chdir(bootstrap.ROOT)
    bootstrap.ensure_venv(extras=("test", "llamacpp", "gptq", "meteor"))
    bootstrap.ensure_chromium()
    bootstrap.ensure_promptfoo()
    bootstrap.ensure_gguf_converter()
    if not bootstrap.in_venv():
        bootstrap.reexec_in_venv(["-m", "tests", *argv])
    import pytest

    return pytest.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
