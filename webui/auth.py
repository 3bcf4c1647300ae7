"""The UI's login: users from --ui-auth USER:PASSWORD and --ui-auth-file FILE, passwords plain or hashed.

A hashed password is ``pbkdf2_sha256$ITERATIONS$SALT$HASH`` (hex salt and hash), what
``python launch.py hash-password`` prints; the file then holds ``user:pbkdf2_sha256$...`` lines. Passwords are
compared in constant time; no password or hash is logged.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import secrets
import sys
from pathlib import Path
from typing import Callable

SCHEME = "pbkdf2_sha256"
ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256


class AuthConfigError(ValueError):
    pass


def hash_password(password: str, iterations: int = ITERATIONS, salt: str | None = None) -> str:
    salt = salt or secrets.token_hex(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), iterations).hex()
    return f"{SCHEME}${iterations}${salt}${digest}"


def check_password(stored: str, given: str) -> bool:
    """Whether ``given`` is the password ``stored`` (plain, or hashed as above)."""
    if stored.startswith(SCHEME + "$"):
        _, iterations, salt, digest = stored.split("$")
        given_digest = hashlib.pbkdf2_hmac("sha256", given.encode(), bytes.fromhex(salt), int(iterations)).hex()
        return hmac.compare_digest(given_digest, digest)
    return hmac.compare_digest(given.encode(), stored.encode())


def _entry(text: str, where: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    user = user.strip()
    if not sep or not user or not password:
        raise AuthConfigError(f"{where}: expected USER:PASSWORD, got {'an empty line' if not text else 'no password'}"
                              f" for '{user or text[:20]}'")
    if any(c.isspace() for c in user):
        raise AuthConfigError(f"{where}: a user name may not contain spaces: '{user}'")
    if password.startswith(SCHEME + "$"):
        parts = password.split("$")
        try:
            ok = len(parts) == 4 and int(parts[1]) > 0 and bytes.fromhex(parts[2]) and len(bytes.fromhex(parts[3])) == 32
        except ValueError:
            ok = False
        if not ok:
            raise AuthConfigError(f"{where}: the hashed password of '{user}' is not {SCHEME}$ITERATIONS$SALT$HASH; "
                                  f"make one with: python launch.py hash-password")
    return user, password


def read_users(given: list[str], files: list[Path]) -> dict[str, str]:
    """User -> stored password, from --ui-auth values and files (blank lines and # comments skipped)."""
    users: dict[str, str] = {}
    entries = [(text, "--ui-auth") for text in given]
    for path in files:
        try:
            lines = Path(path).expanduser().read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"--ui-auth-file: cannot read {path}: {exc}") from None
        entries += [(line.strip(), f"{path}, line {n}") for n, line in enumerate(lines, 1)
                    if line.strip() and not line.strip().startswith("#")]
    for text, where in entries:
        user, password = _entry(text, where)
        if user in users:
            raise AuthConfigError(f"{where}: the user '{user}' is given twice")
        users[user] = password
    return users


def authenticator(users: dict[str, str]) -> Callable[[str, str], bool]:
    """Gradio's auth callable: the user exists and the password is theirs (the same work either way)."""
    decoy = hash_password("", salt="00" * 16)

    def check(username: str, password: str) -> bool:
        stored = users.get(username)
        return check_password(stored if stored is not None else decoy, password) and stored is not None

    return check


def main(argv: list[str]) -> int:
    """python launch.py hash-password: print a hashed password for --ui-auth-file (read without echo)."""
    if argv:
        print("usage: python launch.py hash-password   (asks for the password; or pipe it in)", file=sys.stderr)
        return 2
    if sys.stdin.isatty():
        password = getpass.getpass("Password: ")
        if getpass.getpass("Again: ") != password:
            print("error: the two passwords differ", file=sys.stderr)
            return 1
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        print("error: the password is empty", file=sys.stderr)
        return 1
    print(hash_password(password))
    return 0
