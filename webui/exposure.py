"""What a remote user can and cannot do on a listening server (``--listen``): printed at start so an operator sees
the exposure at a glance (#43). Each line says what is allowed, and the flag that changes it."""

from __future__ import annotations

from webui.config import AppConfig


def exposure_report(config: AppConfig) -> list[str]:
    """The report's lines ([] when the workbench listens on 127.0.0.1 only)."""
    if not config.listen:
        return []
    if config.nowebui:
        return ["--listen with --nowebui: no UI is served. What a remote client can do:", *_api_lines(config)]
    users = [name for name, _ in config.ui_users]
    where = f"{config.host}:{config.port}"
    lines = [f"--listen: the UI is reachable from other machines on {where}. What a remote user can do:"]
    if users:
        lines.append(f"  login        required: {len(users)} user(s) ({', '.join(users)}); each has their own chats, "
                     "notebooks, batch runs, presets and settings")
    else:
        lines.append("  login        NONE: anyone who can reach the port can read, change and delete every chat, "
                     "notebook, batch run, preset and setting (add --ui-auth USER:PASSWORD or --ui-auth-file)")
    lines.append("  models       every user can load, unload and switch models, which all users share; one "
                 "training run at a time, seen by every user")
    admins = ", ".join(config.ui_admins) if users else "everyone (no login)"
    lines.append(f"  admin-only   the Requests tab (every API client's prompts): {admins or 'nobody (no --ui-admin)'}")
    lines.append("  files        a promptfoo suite reads only the files uploaded with it; asserts written in the Batch "
                 "tab or a prompt file name no files; nothing else is opened by a name a user gives")
    lines.append("  python       Python asserts and transforms: " + (
        "ALLOWED (--allow-python-asserts): anyone who can log in runs code with this server's rights"
        if config.allow_python_asserts else "refused (--allow-python-asserts allows them)"))
    lines.append("  javascript   JavaScript asserts and transforms run sandboxed (QuickJS, no files, no network), "
                 "with a time limit")
    lines += _api_lines(config)
    return lines


def _api_lines(config: AppConfig) -> list[str]:
    if not config.api:
        return ["  API          off (--api serves it)"]
    keys, admins = len(config.api_keys), len(config.admin_keys)
    if not (keys or admins):
        api = f"on 127.0.0.1:{config.api_port} only: no --api-key, so other machines cannot reach it"
    else:
        api = (f"on {config.api_host}:{config.api_port} with {keys} key(s); loading models and adapters over it: "
               + (f"{admins} admin key(s)" if admins else "refused (no --admin-key)"))
    capture = "every request kept (--capture-requests)" if config.capture_requests else \
        "kept only when a request asks store: true"
    local = (f"only under {config.local_images_dir} (--allow-local-images)" if config.local_images_dir
             else "no (--allow-local-images DIR)")
    urls = "no (--allow-image-urls)" if not config.allow_image_urls else (
        "yes, private and loopback addresses too (--allow-private-image-urls)" if config.allow_private_image_urls
        else "yes, public addresses only (--allow-image-urls)")
    return [f"  API          {api}; {capture}",
            f"  images       API image files on this machine: {local}; image URLs fetched: {urls}"]
