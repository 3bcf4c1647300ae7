"""The UI's login in a real browser: --ui-auth on the command line and a file with a hashed password."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.e2e.server import running_server, user_data_with_default_model
from tests.ui.pages import screenshot, wait_text
from webui.auth import hash_password

pytestmark = [pytest.mark.real_model, pytest.mark.browser]


@pytest.fixture(scope="module")
def server(tmp_path_factory, default_model_dir):
    root = tmp_path_factory.mktemp("login")
    user_data = user_data_with_default_model(root / "data", default_model_dir)
    users = root / "users.txt"
    users.write_text(f"# hashed with python launch.py hash-password\nbob:{hash_password('b0b-secret')}\n")
    with running_server(user_data, "--ui-auth", "alice:wonderland", "--ui-auth-file", str(users)) as srv:
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
