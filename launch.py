#!/usr/bin/env python3
"""Start the workbench: `python launch.py` (see `python launch.py --help`).

The first run creates .venv and installs what is missing, then converts the
default model once; later runs start in seconds.
"""

import sys

from webui import bootstrap


def main(argv: list[str]) -> None:
    from webui.config import build_parser

    batch = bool(argv) and argv[0] == "batch"
    if not batch and any(a in ("-h", "--help") for a in argv):
        build_parser().print_help()
        return
    if not bootstrap.in_venv():
        bootstrap.ensure_venv()
        bootstrap.reexec_in_venv([__file__, *argv])
    bootstrap.ensure_venv()  # inside the venv: a no-op unless pyproject.toml changed
    if batch:
        from webui.batch.cli import main as batch_main

        sys.exit(batch_main(argv[1:]))
    from webui.app import run

    run(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
