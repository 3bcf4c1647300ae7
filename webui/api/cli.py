"""`python launch.py requests list|show|replay|export|delete`: the kept API requests (#33) from scripts.

    python launch.py requests list [--limit 20] [--model M] [--status 400] [--client "key 1"] [--text WORDS]
    python launch.py requests show ID                      everything kept, as JSON
    python launch.py requests replay ID [--set temperature=0.9 ...]   sent again to the model it named
    python launch.py requests export [--out FILE.jsonl] [ID ...]      OpenAI's batch input format
    python launch.py requests export --format promptfoo [--out suite.yaml] [ID ...]   a promptfoo suite
    python launch.py requests delete ID [ID ...]

Requests are kept by the API with --capture-requests, or when a chat completion asks store: true. The exit code is
2 for bad input (an unknown id, a --set that is not NAME=JSON).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from webui.config import AppConfig, default_user_data_dir
from webui.store import Database
from webui.store.requests import CapturedRequest, RequestStore


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python launch.py requests", description=__doc__.splitlines()[0])
    p.add_argument("--user-data-dir", type=Path)
    p.add_argument("--threads", type=int, help="torch CPU threads for replay")
    sub = p.add_subparsers(dest="command", required=True)
    listed = sub.add_parser("list", help="the newest kept requests, one a line")
    listed.add_argument("--limit", type=int, default=20)
    listed.add_argument("--model")
    listed.add_argument("--status", type=int)
    listed.add_argument("--client", help="an API key's label, e.g. 'key 1'")
    listed.add_argument("--text", help="only requests whose body holds this text")
    sub.add_parser("show", help="one request, everything kept, as JSON").add_argument("id")
    again = sub.add_parser("replay", help="send a request again (loads the model it named)")
    again.add_argument("id")
    again.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                       help="change a field of the body first, e.g. --set temperature=0.9 (repeatable)")
    out = sub.add_parser("export", help="requests as OpenAI batch input lines (JSONL), or a promptfoo suite")
    out.add_argument("ids", nargs="*", help="which (default: every kept request that was answered)")
    out.add_argument("--out", type=Path, help="the file (default: standard output)")
    out.add_argument("--format", choices=("openai-batch", "promptfoo"), default="openai-batch",
                     help="openai-batch: OpenAI's batch input JSONL; promptfoo: a promptfooconfig.yaml, each "
                          "request a prompt with its parameters (run it with launch.py batch or promptfoo)")
    sub.add_parser("delete", help="forget requests").add_argument("ids", nargs="+")
    return p


def batch_line(item: CapturedRequest) -> dict[str, Any]:
    """One line of OpenAI's batch input format, so a captured session can be run again by any batch tool."""
    body = {k: v for k, v in (item.request if isinstance(item.request, dict) else {}).items()
            if k not in ("stream", "stream_options", "background")}
    return {"custom_id": item.id, "method": "POST", "url": item.endpoint, "body": body}


def summary(item: CapturedRequest) -> str:
    sent = item.request if isinstance(item.request, dict) else {}
    messages = sent.get("messages") or []
    said = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else sent.get(
        "prompt", sent.get("input", ""))  # (a Responses API request's input)
    text = json.dumps(said, ensure_ascii=False)[:60]
    return f"{item.id}  {item.endpoint:22} {item.status}  {item.client or '-':8} {item.model or '-':24} {text}"


def parse_changes(assignments: list[str]) -> dict[str, Any]:
    changes = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            raise ValueError(f"--set takes NAME=JSON, got '{assignment}'")
        try:
            changes[name] = json.loads(value)
        except ValueError:
            changes[name] = value  # a bare word: the text itself
    return changes


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    config = AppConfig(user_data_dir=args.user_data_dir or default_user_data_dir(), threads=args.threads)
    config.make_dirs()
    if args.command == "replay":
        return _replay(config, args.id, args.set)
    with Database(config.db_path) as db:
        store = RequestStore(db)
        if args.command == "list":
            page = store.page(model=args.model, limit=10**9 if args.text else args.limit, order="desc")
            items = [i for i in page.items if (args.status is None or i.status == args.status)
                     and (args.client is None or i.client == args.client)
                     and (args.text is None or args.text in json.dumps(i.request, ensure_ascii=False))]
            for item in items[:args.limit]:
                print(summary(item))
            return 0
        if args.command == "show":
            shown = store.get(args.id)
            if shown is None:
                return _fail(f"no kept request has the id '{args.id}' (python launch.py requests list)")
            print(json.dumps(vars(shown), ensure_ascii=False, indent=2))
            return 0
        if args.command == "export":
            missing = [i for i in args.ids if store.get(i) is None]
            if missing:
                return _fail(f"no kept request has the id '{missing[0]}'")
            items = [found for i in args.ids if (found := store.get(i))] if args.ids else \
                [i for i in store.page(limit=10**9).items if i.status == 200]
            if args.format == "promptfoo":
                from webui.api.suite import promptfoo_suite  # here: it imports the engine (torch), which list,
                # show and delete do without
                try:
                    suite = promptfoo_suite(items)
                except ValueError as exc:
                    return _fail(str(exc))
                text = suite.text
                for note in suite.notes:
                    print(f"note: {note}", file=sys.stderr)
            else:
                text = "".join(json.dumps(batch_line(item), ensure_ascii=False) + "\n" for item in items)
            if args.out:
                args.out.write_text(text, encoding="utf-8")
                print(f"wrote {len(items)} requests to {args.out}", file=sys.stderr)
            else:
                sys.stdout.write(text)
            return 0
        gone = [i for i in args.ids if not store.delete(i)]
        return _fail(f"no kept request has the id '{gone[0]}'") if gone else 0


def _replay(config: AppConfig, request_id: str, assignments: list[str]) -> int:
    from loaders.base import LoaderError
    from webui.api.replay import ReplayError, replay
    from webui.models import ModelId
    from webui.services import Services
    from webui.startup import load_startup_model

    try:
        changes = parse_changes(assignments)
    except ValueError as exc:
        return _fail(str(exc))
    services = Services.create(config)
    try:
        item = services.requests.get(request_id)
        if item is None:
            return _fail(f"no kept request has the id '{request_id}' (python launch.py requests list)")
        loader = item.details.get("loader")
        if item.model:  # the model that answered, on its loader
            services.models.ensure(str(ModelId(item.model, loader or "")))
        else:  # refused before a model was chosen: the model in use, as the server would have
            load_startup_model(services)
        again = replay(services, item, changes)
        print(json.dumps({"id": again.id, "status": again.status, "response": again.response}, ensure_ascii=False,
                         indent=2))
        return 0 if again.status == 200 else 1
    except (ReplayError, LoaderError, LookupError, OSError, ValueError) as exc:
        return _fail(str(exc))
    finally:
        services.close()


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
