"""UI users: plain and hashed passwords, files with mistakes, the login check, and hash-password."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT
from webui.auth import AuthConfigError, authenticator, check_password, hash_password, read_users

FAST = 1000  # iterations: the tests check the format, not the cost


def test_a_hashed_password_checks_and_the_hash_hides_it():
    stored = hash_password("s3cret", iterations=FAST)
    assert stored.startswith("pbkdf2_sha256$1000$") and "s3cret" not in stored
    assert check_password(stored, "s3cret") and not check_password(stored, "s3cret ")
    assert hash_password("s3cret", iterations=FAST) != stored  # a new salt each time
    assert check_password("plain", "plain") and not check_password("plain", "Plain")


def test_users_from_the_command_line_and_a_file(tmp_path):
    hashed = hash_password("pw2", iterations=FAST)
    users = tmp_path / "users"
    users.write_text(f"# team\nbob:{hashed}\n\ncarol:colon:in:password\n")
    found = read_users(["alice:pw1"], [users])
    assert found == {"alice": "pw1", "bob": hashed, "carol": "colon:in:password"}
    check = authenticator(found)
    assert check("alice", "pw1") and check("bob", "pw2") and check("carol", "colon:in:password")
    assert not check("bob", hashed) and not check("mallory", "pw1") and not check("alice", "")


@pytest.mark.parametrize("given,lines,message", [
    (["alice"], "", "--ui-auth: expected USER:PASSWORD"),
    (["alice:"], "", "no password for 'alice'"),
    (["al ice:pw"], "", "may not contain spaces"),
    (["alice:pw"], "alice:other\n", "line 1: the user 'alice' is given twice"),
    ([], "# c\nbob:pbkdf2_sha256$x$y$z\n", "line 2: the hashed password of 'bob' is not pbkdf2_sha256$"),
])
def test_mistakes_are_named_with_where_they_are(tmp_path, given, lines, message):
    users = tmp_path / "users"
    users.write_text(lines)
    with pytest.raises(AuthConfigError) as e:
        read_users(given, [users])
    assert message in str(e.value)


def test_the_command_line_refuses_a_bad_users_file(tmp_path):
    from webui.config import config_from_args

    with pytest.raises(SystemExit, match="cannot read"):
        config_from_args(["--ui-auth-file", str(tmp_path / "missing")])
    config = config_from_args(["--ui-auth", "alice:pw"])
    assert config.ui_users == (("alice", "pw"),) and "pw" not in repr(config)


def test_hash_password_prints_a_line_for_the_users_file():
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "hash-password"], input="horse battery\n",
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    stored = out.stdout.strip()
    assert check_password(stored, "horse battery") and read_users([f"dave:{stored}"], []) == {"dave": stored}
