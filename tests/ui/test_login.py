"""The UI's login in a real browser: --ui-auth on the command line and a file with a hashed password; each user
sees only their own chats, notebooks and settings. The server listens as a shared one does (--listen, on 127.0.0.1
here), so a user's uploaded suite reads only its own files and batch runs are numbered per user (#43)."""

from __future__ import annotations

import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import LONG, choose_preset, screenshot, send, set_number, tab, toast, wait_reply_done, wait_text
from webui.auth import hash_password

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    root = tmp_path_factory.mktemp("login")
    user_data = user_data_with_default_model(root / "data", default_model_dir)
    users = root / "users.txt"
    users.write_text(f"# hashed with python launch.py hash-password\nbob:{hash_password('b0b-secret')}\n")
    with running_server(user_data, "--ui-auth", "alice:wonderland", "--ui-auth-file", str(users), "--ui-admin", "alice",
                        "--listen", "--listen-host", "127.0.0.1") as srv:
        srv.user_data = user_data
        yield srv


def log_in(browser, url: str, user: str, password: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.locator("input[data-testid='textbox']").fill(user)
    page.locator("input[data-testid='password']").fill(password)
    page.get_by_role("button", name="Login").click()
    return page


def test_a_wrong_password_or_user_is_refused(server, browser):
    for user, password in (("alice", "nope"), ("mallory", "wonderland"), ("bob", "B0B-secret")):
        page = log_in(browser, server.url, user, password)
        wait_text(page, "body", "Incorrect Credentials", 30_000)
        assert page.locator("#chat-message").count() == 0
        page.close()


@pytest.mark.parametrize("user,password", [("alice", "wonderland"), ("bob", "b0b-secret")])
def test_each_user_logs_in_to_the_workbench(server, browser, user, password):
    page = log_in(browser, server.url, user, password)
    page.wait_for_selector("#chat-message textarea", timeout=60_000)
    screenshot(page, f"logged-in-{user}")
    page.close()


def test_without_a_login_the_app_answers_nothing_but_health(server):
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert r.status == 200
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(server.url + "/config", timeout=10)
    assert e.value.code == 401
    for path, data in (("/page-lines/a-guess", None), ("/drafts/a-guess/chat", b'{"seq": 1, "text": "x"}')):
        with pytest.raises(urllib.error.HTTPError) as e:  # the page's own channel: only with its page's token
            urllib.request.urlopen(server.url + path, data=data, timeout=10)
        assert e.value.code == 404


def logged_in(browser, url: str, user: str, password: str):
    page = log_in(browser, url, user, password)
    page.wait_for_selector("#chat-message textarea", timeout=60_000)
    page.wait_for_function("() => document.querySelector('#chat-list') !== null")
    return page


def test_each_user_sees_only_their_own_chats_notebooks_and_settings(server, browser):
    alice = logged_in(browser, server.url, "alice", "wonderland")
    choose_preset(alice, "Deterministic", "0")
    set_number(alice, "params-max_new_tokens", 2)
    tab(alice, "Chat")
    alice.locator("#chat-system textarea").fill("Alice's system prompt")
    alice.locator("#chat-new").click()
    send(alice, "My secret plan is to visit Paris.")
    wait_reply_done(alice, LONG)
    wait_text(alice, "#chat-list", "My secret plan", 30_000)
    tab(alice, "Notebook")
    alice.locator("#notebook-text textarea").fill("Alice's notebook text")
    alice.locator("#notebook-name input").fill("alice-notes")
    alice.locator("#notebook-save").click()
    wait_text(alice, "#notebook-stats", "Saved 'alice-notes'", 30_000)
    alice.close()

    bob = logged_in(browser, server.url, "bob", "b0b-secret")
    assert "secret plan" not in bob.locator("#chat-list").inner_text()
    bob.locator("#chat-search textarea, #chat-search input").first.fill("secret")
    bob.wait_for_timeout(1500)  # the search has run
    assert "secret plan" not in bob.locator("#chat-list").inner_text()
    tab(bob, "Parameters")
    assert bob.locator("#params-max_new_tokens input").first.input_value() != "2"  # alice's settings are hers
    tab(bob, "Notebook")
    bob.locator("#notebook-name input").click()
    assert "alice-notes" not in bob.locator("#notebook-name").inner_text()
    assert "Alice" not in bob.locator("#notebook-text textarea").input_value()  # her draft is hers (#46)
    screenshot(bob, "logged-in-bob-sees-nothing-of-alice")
    bob.close()

    with sqlite3.connect(f"file:{server.user_data / 'workbench.sqlite3'}?mode=ro", uri=True) as db:
        assert db.execute("SELECT owner FROM chats WHERE title LIKE 'My secret plan%'").fetchall() == [("alice",)]
        assert db.execute("SELECT owner FROM notebooks WHERE name = 'alice-notes'").fetchall() == [("alice",)]

    alice = logged_in(browser, server.url, "alice", "wonderland")  # alice again: all of it is still hers
    wait_text(alice, "#chat-list", "My secret plan", 30_000)
    tab(alice, "Parameters")
    assert alice.locator("#params-max_new_tokens input").first.input_value() == "2"
    tab(alice, "Notebook")  # the page saved her draft as hers
    alice.wait_for_function("() => document.querySelector('#notebook-text textarea').value === "
                            "\"Alice's notebook text\"", timeout=30_000)
    alice.close()


def test_the_page_names_who_is_logged_in_and_logs_out(server, browser):
    page = logged_in(browser, server.url, "bob", "b0b-secret")
    wait_text(page, "#account-user", "Logged in as bob", 30_000)
    screenshot(page, "logged-in-as-bob")
    page.locator("#account-logout").click()
    page.wait_for_selector("input[data-testid='password']", timeout=30_000)  # the login form again
    assert page.locator("#chat-message").count() == 0
    page.reload()  # the login is gone, not just hidden
    page.wait_for_selector("input[data-testid='password']", timeout=30_000)
    assert page.locator("#chat-message").count() == 0
    page.close()
    page = logged_in(browser, server.url, "bob", "b0b-secret")  # and works again
    wait_text(page, "#account-user", "Logged in as bob", 30_000)
    page.close()


def test_a_non_admin_sees_the_keep_every_request_switch_read_only_with_why(server, browser):
    """#46 item 11: bob (not --ui-admin) sees the switch disabled and why; alice (an admin) can click it."""
    page = logged_in(browser, server.url, "bob", "b0b-secret")
    tab(page, "Requests")
    wait_text(page, "#requests-capture", "Read-only: only admin users", 30_000)
    assert page.locator("#requests-capture input").is_disabled()
    page.close()
    page = logged_in(browser, server.url, "alice", "wonderland")
    tab(page, "Requests")
    page.wait_for_function("() => !document.querySelector('#requests-capture input').disabled", timeout=30_000)
    assert "Read-only" not in page.locator("#requests-capture").inner_text()
    page.close()


SUITE = """prompts: [file://prompt.txt]
providers: [{id: 'openai:chat:SmolLM2-135M-Instruct', config: {temperature: 0, max_tokens: 1}}]
tests: [{vars: {doc: 'a short document'}}]
"""
ESCAPES = {  # the cases (#43), each naming a file outside what the user uploaded, and what the refusal says
    "absolute": ("prompts: ['Summarize: {{doc}}']\ntests: [{vars: {doc: 'file:///etc/hostname'}}]\n",
                 "'/etc/hostname' lies outside the files uploaded with the suite"),
    "dot-dot": ("prompts: ['file://../../../../../../../etc/os-release']\n", "os-release' lies outside"),
    "symlink": ("prompts: ['Summarize: {{doc}}']\ntests: [{vars: {doc: 'file:///proc/self/root/etc/hostname'}}]\n",
                "'/proc/self/root/etc/hostname' lies outside"),
    "glob": ("prompts: ['Summarize: {{doc}}']\ntests: [{vars: {doc: 'file://../*'}}]\n", "'..' lies outside"),
}


def _upload(page, *paths: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.locator("#batch-upload").click()
    chooser.value.set_files([str(p) for p in paths])


def _run_suite(page, folder: Path, name: str) -> None:
    folder.mkdir()
    (folder / "promptfooconfig.yaml").write_text(SUITE.replace("prompts:", f"description: {name}\nprompts:"))
    (folder / "prompt.txt").write_text("Summarize: {{doc}}")
    tab(page, "Batch")
    _upload(page, folder / "promptfooconfig.yaml", folder / "prompt.txt")
    wait_text(page, "#batch-upload-note", "1 prompts × 1 providers", 30_000)
    page.locator("#batch-name input, #batch-name textarea").first.fill(name)
    page.locator("#batch-run").click()
    wait_text(page, "#batch-progress", "Finished: 1/1", LONG)


def test_a_second_users_suite_reads_only_its_own_files_and_runs_are_numbered_per_user(server, browser, tmp_path):
    alice = logged_in(browser, server.url, "alice", "wonderland")
    _run_suite(alice, tmp_path / "alice", "alices-run")
    alice.close()

    bob = logged_in(browser, server.url, "bob", "b0b-secret")
    tab(bob, "Batch")
    for name, (config, refused) in ESCAPES.items():
        path = tmp_path / name / "promptfooconfig.yaml"
        path.parent.mkdir()
        path.write_text(config)
        _upload(bob, path)
        toast(bob, refused)
        assert "Using" not in bob.locator("#batch-upload-note").inner_text(), name
    screenshot(bob, "second-user-suite-refused")
    _run_suite(bob, tmp_path / "bob", "bobs-run")
    bob.get_by_role("tab", name="Runs").click()
    bob.locator("#batch-runs input").click()
    options = bob.locator("#batch-runs").get_by_role("option")
    options.filter(has_text="bobs-run").wait_for(timeout=30_000)
    shown = [o.split("\n")[-1].split(" · ")[0] for o in options.all_inner_texts()]  # past a ✓ mark
    assert shown == ["#1 bobs-run"]  # nothing says that alice ran one first
    bob.close()
    with sqlite3.connect(f"file:{server.user_data / 'workbench.sqlite3'}?mode=ro", uri=True) as db:
        runs = db.execute("SELECT owner, number FROM batch_runs WHERE name LIKE '%s-run' ORDER BY id").fetchall()
    assert runs == [("alice", 1), ("bob", 1)]
