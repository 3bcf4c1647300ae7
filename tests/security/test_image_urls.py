"""Hostile image URLs (#43, with --allow-image-urls): addresses only the server can reach (loopback, private,
link-local and metadata ones, directly, by DNS or by redirect), other schemes, redirect loops, and servers that
send too much, trickle or never answer. Each is one case, refused with a message that says what is wrong; the
images themselves are tried in test_images.py."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from typing import Callable

import pytest

from tests.conftest import run_async
from tests.vision_models import png
from webui.fetch import FetchError, FetchRefused, FetchRules, FetchTooLarge, fetch

SURFACE = "images"
RED = png((200, 30, 30), stripe=5)  # 40 x 30


# --- --allow-image-urls ---------------------------------------------------------------------------------------------

class Site(http.server.ThreadingHTTPServer):
    """A local HTTP server with routes for each hostile answer; it records the Host header of each request."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), SiteHandler)
        self.port = self.server_address[1]
        self.seen: list[tuple[str, str]] = []  # (path, Host header)
        self.stop = threading.Event()


class SiteHandler(http.server.BaseHTTPRequestHandler):
    server: Site
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Host", "")))
        route, _, arg = self.path.lstrip("/").partition("?to=")
        if route == "red.png":
            self._send(200, RED, {"Content-Type": "image/png"})
        elif route == "redirect":
            self._send(302, b"", {"Location": arg})
        elif route == "loop":
            self._send(302, b"", {"Location": "/loop"})
        elif route == "big-no-length":  # no Content-Length: the body ends when the connection does
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self._write_until_stopped(bytes(64 * 1024), 0)
        elif route == "big-length":  # a Content-Length over the limit, then a trickle that would take forever
            self.send_response(200)
            self.send_header("Content-Length", str(2**30))
            self.end_headers()
            self._write_until_stopped(b"x", 0.05)
        elif route == "trickle":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self._write_until_stopped(b"x", 0.05)
        elif route == "silent":  # never answers at all
            self.server.stop.wait(30)
        else:
            self._send(404, b"not here", {})

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _write_until_stopped(self, chunk: bytes, pause: float) -> None:
        try:
            for _ in range(100_000):
                if self.server.stop.wait(pause):
                    return
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:  # the client hung up: what it should do
            self.close_connection = True


@pytest.fixture(scope="module")
def site():
    server = Site()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.stop.set()
    server.shutdown()


def get(url: str, **rules: object) -> bytes:
    return run_async(fetch(url, FetchRules(**{"max_bytes": 2**20, "timeout": 3.0, **rules})), timeout=30)


# (id, URL from the site's port, rules, the error, words in its message)
URL_REFUSED: list[tuple[str, Callable[[int], str], dict, type, str]] = [
    ("loopback-without-the-flag", lambda p: f"http://127.0.0.1:{p}/red.png", {}, FetchRefused,
     "127.0.0.1 is a loopback address; the server was started without --allow-private-image-urls"),
    ("localhost-by-name", lambda p: f"http://localhost:{p}/red.png", {}, FetchRefused, "a loopback address"),
    ("ipv6-loopback", lambda p: f"http://[::1]:{p}/red.png", {}, FetchRefused, "a loopback address"),
    ("ipv4-mapped-ipv6-loopback", lambda p: f"http://[::ffff:127.0.0.1]:{p}/red.png", {}, FetchRefused,
     "a loopback address"),
    ("loopback-as-a-decimal-number", lambda p: f"http://2130706433:{p}/red.png", {}, FetchRefused,
     "a loopback address"),
    ("loopback-in-hex-short-form", lambda p: f"http://0x7f.1:{p}/red.png", {}, FetchRefused, "a loopback address"),
    ("six-to-four-wrapping-loopback", lambda p: "http://[2002:7f00:1::]/x.png", {}, FetchRefused,
     "a loopback address"),
    ("private-10", lambda p: "http://10.0.0.1/x.png", {}, FetchRefused, "a private address"),
    ("private-172-16", lambda p: "http://172.16.5.4/x.png", {}, FetchRefused, "a private address"),
    ("private-192-168", lambda p: "http://192.168.1.1/x.png", {}, FetchRefused, "a private address"),
    ("unique-local-ipv6", lambda p: "http://[fd12:3456::1]/x.png", {}, FetchRefused, "unique-local"),
    ("carrier-grade-nat", lambda p: "http://100.64.0.1/x.png", {}, FetchRefused, "carrier-grade NAT"),
    ("cloud-metadata-even-with-the-flag", lambda p: "http://169.254.169.254/latest/meta-data/",
     {"allow_private": True}, FetchRefused, "is a cloud metadata service's address \\(link-local\\); this server never "
     "fetches from such addresses"),
    ("aws-ipv6-metadata-even-with-the-flag", lambda p: "http://[fd00:ec2::254]/latest/meta-data/",
     {"allow_private": True}, FetchRefused, "a cloud metadata service's address"),
    ("nat64-wrapping-metadata", lambda p: "http://[64:ff9b::a9fe:a9fe]/", {"allow_private": True}, FetchRefused,
     "link-local"),
    ("ipv6-link-local", lambda p: "http://[fe80::1]/x.png", {"allow_private": True}, FetchRefused, "link-local"),
    ("zero-network", lambda p: f"http://0.0.0.0:{p}/red.png", {"allow_private": True}, FetchRefused, "0.0.0.0/8"),
    ("multicast", lambda p: "http://224.0.0.1/x.png", {"allow_private": True}, FetchRefused, "multicast"),
    ("reserved", lambda p: "http://240.0.0.1/x.png", {"allow_private": True}, FetchRefused, "reserved"),
    ("broadcast", lambda p: "http://255.255.255.255/x.png", {"allow_private": True}, FetchRefused, "broadcast"),
    ("ftp-scheme", lambda p: "ftp://example.com/x.png", {}, FetchRefused, "only http and https"),
    ("redirect-to-loopback", lambda p: f"http://127.0.0.1:{p}/redirect?to=http://127.0.0.1:{p + 1}/x.png",
     {"trusted": "site"}, FetchRefused, "a loopback address"),
    ("redirect-to-localhost", lambda p: f"http://127.0.0.1:{p}/redirect?to=http://localhost:{p + 1}/red.png",
     {"trusted": "site"}, FetchRefused, "a loopback address"),
    ("redirect-to-metadata-with-the-flag", lambda p: f"http://127.0.0.1:{p}/redirect?to=http://169.254.169.254/",
     {"allow_private": True}, FetchRefused, "link-local"),
    ("redirect-to-a-file-url", lambda p: f"http://127.0.0.1:{p}/redirect?to=file:///etc/passwd",
     {"allow_private": True}, FetchRefused, "only http and https URLs are fetched, not file"),
    ("redirect-loop", lambda p: f"http://127.0.0.1:{p}/loop", {"allow_private": True}, FetchError,
     "more than 5 redirects"),
    ("not-found", lambda p: f"http://127.0.0.1:{p}/missing.png", {"allow_private": True}, FetchError, "HTTP 404"),
    ("no-content-length-over-the-size", lambda p: f"http://127.0.0.1:{p}/big-no-length", {"allow_private": True},
     FetchTooLarge, "sent over 1 MB"),
    ("content-length-over-the-size", lambda p: f"http://127.0.0.1:{p}/big-length", {"allow_private": True},
     FetchTooLarge, "is 1.02e\\+03 MB"),
    ("trickle-cut-off-at-the-time-limit", lambda p: f"http://127.0.0.1:{p}/trickle", {"allow_private": True},
     FetchError, "took over 1 s \\(the limit\\)"),
    ("silent-server-cut-off-at-the-time-limit", lambda p: f"http://127.0.0.1:{p}/silent", {"allow_private": True},
     FetchError, "took over 1 s \\(the limit\\)"),
    ("unresolvable-host", lambda p: "http://no-such-host.invalid/x.png", {}, FetchError, "could not be resolved"),
    ("bad-port", lambda p: "http://example.com:99999/x.png", {}, FetchError, "not a valid URL"),
]


@pytest.mark.parametrize("url, rules, error, words", [pytest.param(u, r, e, w, id=i) for i, u, r, e, w in URL_REFUSED])
def test_urls_that_reach_for_what_only_the_server_can_reach_are_refused(site, url, rules, error, words):
    rules = {**rules, "trusted": ((("127.0.0.1", site.port),) if rules.get("trusted") else ())}
    if "trickle" in url(site.port) or "silent" in url(site.port):
        rules["timeout"] = 1.0
    seen = len(site.seen)
    start = time.monotonic()
    with pytest.raises(error, match=words):
        get(url(site.port), **rules)
    assert time.monotonic() - start < 4  # within the time limit (3 s; 1 s for the slow ones)
    if error is FetchRefused and not rules["trusted"] and not rules.get("allow_private"):
        assert len(site.seen) == seen  # the local server was never reached


def test_a_url_is_fetched_with_the_private_flag_and_through_redirects(site):
    assert get(f"http://127.0.0.1:{site.port}/red.png", allow_private=True) == RED
    hops = f"http://127.0.0.1:{site.port}/redirect?to=/redirect?to=/red.png"
    assert get(hops, allow_private=True) == RED


@pytest.fixture
def rebinding_dns(monkeypatch) -> list[str]:
    """DNS in which images.example resolves to 127.0.0.1 the first time and to the metadata address after; the
    lookups of images.example are listed in the list returned."""
    from asyncio.base_events import BaseEventLoop

    real, lookups = BaseEventLoop.getaddrinfo, []

    async def rebinding(self, host, port, *args, **kwargs):
        if host != "images.example":
            return await real(self, host, port, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "169.254.169.254"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(BaseEventLoop, "getaddrinfo", rebinding)
    return lookups


def test_the_host_is_resolved_once_and_the_checked_address_is_the_one_connected(site, rebinding_dns):
    """DNS rebinding: a name that resolves to an allowed address at the check and to the metadata address after
    it still reaches the checked address, with the URL's host in the Host header."""
    assert get(f"http://images.example:{site.port}/red.png", trusted=(("127.0.0.1", site.port),)) == RED
    assert rebinding_dns == ["images.example"] and site.seen[-1] == ("/red.png", f"images.example:{site.port}")


def test_https_to_the_checked_address_keeps_the_host_for_tls_and_verifies_its_certificate(tmp_path, rebinding_dns):
    """The TLS handshake with the pinned address names the URL's host (SNI), and a certificate the system does not
    trust is refused, as without pinning."""
    import shutil
    import ssl
    import subprocess

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=images.example"],
                   check=True, capture_output=True, timeout=60)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,func-returns-value]
    server = Site()
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED"):
            get(f"https://images.example:{server.port}/red.png", trusted=(("127.0.0.1", server.port),))
    finally:
        server.shutdown()
    assert names == ["images.example"] and rebinding_dns == ["images.example"]
