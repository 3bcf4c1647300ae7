#!/usr/bin/env python3
"""Start the workbench: `python launch.py` (see `python launch.py --help`).

The first run creates .venv and installs what is missing, then converts the
default model once; later runs start in seconds. Other commands:

    python launch.py batch PROMPTS [options]        run a batch test headless (see `batch --help`)
    python launch.py requests list|show|replay|export|delete   the API requests kept (see `requests --help`)
    python launch.py install llamacpp|gptq|exllamav2|meteor  add an optional backend to .venv
    python launch.py quantize gptq|exl2 MODEL --bits 4    make a GPTQ (or EXL2, CUDA only) model folder
    python launch.py train --data FILE --name NAME [settings]   train a LoRA adapter (see `train --help`)
    python launch.py hash-password                   print a hashed password for --ui-auth-file
"""

import sys

from webui import bootstrap


def main(argv: list[str]) -> None:
    from webui.config import build_parser

    command = argv[0] if argv and argv[0] in ("batch", "requests", "install", "quantize", "train",
                                                   "hash-password") else None
    if command == "install":
        sys.exit(bootstrap.install_extras(argv[1:]))
    if command == "hash-password":
        from webui.auth import main as hash_main

        sys.exit(hash_main(argv[1:]))
    if command is None and any(a in ("-h", "--help") for a in argv):
        build_parser().print_help()
        return
    if not bootstrap.in_venv():
        bootstrap.ensure_venv()
        bootstrap.reexec_in_venv([__file__, *argv])
    bootstrap.ensure_venv()  # inside the venv: a no-op unless pyproject.toml changed
    if command == "batch":
        from webui.batch.run.cli import main as batch_main

        sys.exit(batch_main(argv[1:]))
    if command == "requests":
        from webui.api.cli import main as requests_main

        sys.exit(requests_main(argv[1:]))
    if command == "quantize":
        from webui.quantize import main as quantize_main

        sys.exit(quantize_main(argv[1:]))
    if command == "train":
        from webui.training.cli import main as train_main

        sys.exit(train_main(argv[1:]))
    from webui.app import run

    run(argv)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    finally:
        # The interpreter's last garbage collections walk every object torch, transformers and gradio made: seconds
        # at each exit (Ctrl+C, the end of a batch run). Frozen, they are left to the exit, which frees the memory;
        # files, the store and temporary folders are closed before this by the commands themselves and atexit.
        import gc

        gc.freeze()
