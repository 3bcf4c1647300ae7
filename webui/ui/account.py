"""The header's account corner with a login: who is logged in, and Log out (Gradio's /logout route)."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from webui.services import Services

LOGOUT = "logout"
"""Gradio's route that forgets the login and goes back to the login form; relative, so it works under a root path
too."""


@dataclass
class Account:
    user: gr.Markdown
    logout: gr.Button


def create_account(services: Services) -> Account | None:
    """'Logged in as NAME' and a Log out button, only when the UI has a login (--ui-auth, --ui-auth-file)."""
    if not services.config.ui_users:
        return None
    with gr.Column(scale=0, min_width=180, elem_id="account"):
        user = gr.Markdown("", elem_id="account-user")
        logout = gr.Button("Log out", link=LOGOUT, size="sm", elem_id="account-logout")
    return Account(user, logout)


def on_load(account: Account) -> tuple[list, object]:
    """(outputs, function): the page's load names the user it was opened by."""
    def load(request: gr.Request) -> str:
        name = getattr(request, "username", None)
        return f"Logged in as **{name}**" if name else ""
    return [account.user], load
