"""Downloads of URLs that a request names (the API's image_url parts, with --allow-image-urls), within rules that keep
a caller from using the server to reach what only the server can reach.

- Only http and https.
- The host is resolved once, every address it resolves to is checked, and the connection goes to the checked
  address (the Host header and TLS's server name stay the URL's host), so DNS cannot answer differently between
  the check and the connection.
- Loopback, private (RFC 1918, unique-local IPv6) and carrier-grade NAT addresses are refused unless the operator
  allowed them (--allow-private-image-urls); link-local addresses (the cloud metadata service, 169.254.169.254 and
  fd00:ec2::254), 0.0.0.0/8, multicast, reserved and documentation ranges are always refused.
- Redirects are followed here, at most ``max_redirects``, each hop checked as the first.
- The size limit holds while the body arrives (a Content-Length over it is refused before reading), and one time
  limit covers the whole download, redirects included: a server that trickles bytes is cut off.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Iterable, Union
from urllib.parse import urljoin, urlsplit

import httpcore

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
REDIRECTS = (301, 302, 303, 307, 308)
_ALWAYS_REFUSED = [(ipaddress.ip_network(net), why) for net, why in (
    ("169.254.169.254/32", "a cloud metadata service's address (link-local)"),
    ("169.254.0.0/16", "a link-local address (where cloud metadata services answer)"),
    ("fe80::/10", "a link-local address (where cloud metadata services answer)"),
    ("fd00:ec2::254/128", "a cloud metadata service's address"),
    ("0.0.0.0/8", "an address of this host (0.0.0.0/8)"), ("::/128", "the unspecified address"),
    ("224.0.0.0/4", "a multicast address"), ("ff00::/8", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"), ("240.0.0.0/4", "a reserved address"),
    ("100::/64", "a reserved address (discard-only)"), ("192.0.0.0/24", "a reserved address (IETF protocols)"),
    ("198.18.0.0/15", "a reserved address (benchmarking)"), ("192.0.2.0/24", "a documentation address"),
    ("198.51.100.0/24", "a documentation address"), ("203.0.113.0/24", "a documentation address"),
    ("2001:db8::/32", "a documentation address"), ("fec0::/10", "a reserved address (site-local)"))]
_PRIVATE = [(ipaddress.ip_network(net), why) for net, why in (
    ("127.0.0.0/8", "a loopback address"), ("::1/128", "a loopback address"),
    ("10.0.0.0/8", "a private address"), ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"), ("fc00::/7", "a private address (unique-local)"),
    ("100.64.0.0/10", "a private address (carrier-grade NAT)"))]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class FetchError(ValueError):
    """A URL that was not fetched, with why."""


class FetchRefused(FetchError):
    """A URL the rules do not allow: not http(s), or an address that is not fetched from."""


class FetchTooLarge(FetchError):
    """A download over the size limit (cut off as soon as it was known)."""

    def __init__(self, message: str, size: int):
        super().__init__(message)
        self.size = size  # bytes: the Content-Length, or what had arrived when it was cut off


@dataclass(frozen=True)
class FetchRules:
    max_bytes: int
    timeout: float = 20.0  # seconds for the whole download, redirects included
    allow_private: bool = False  # loopback, private and carrier-grade NAT addresses (never link-local, metadata)
    max_redirects: int = 5
    trusted: tuple[tuple[str, int], ...] = ()  # (address, port) let through whatever the address is (tests)


def address_refusal(address: IPAddress, allow_private: bool) -> str | None:
    """Why ``address`` may not be fetched from ("loopback", "private", ...), or None where it may."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return address_refusal(embedded, allow_private)
    for network, why in _ALWAYS_REFUSED:
        if address in network:
            return why
    for network, why in _PRIVATE:
        if address in network:
            return None if allow_private else why
    return None if address.is_global else "not a public address"


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, 6to4, Teredo, NAT64), which is what it reaches."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


async def fetch(url: str, rules: FetchRules) -> bytes:
    """The body of ``url`` (HTTP 200 at the end of at most ``rules.max_redirects`` redirects); FetchError says why
    not: a scheme other than http(s), an address the rules refuse, another status, too large, too slow."""
    try:
        return await asyncio.wait_for(_follow(url, rules), rules.timeout)
    except asyncio.TimeoutError:
        raise FetchError(f"downloading {_short(url)} took over {rules.timeout:g} s (the limit), so it was "
                         "stopped; send the image inline as a data: URL") from None


async def _follow(url: str, rules: FetchRules) -> bytes:
    for _ in range(rules.max_redirects + 1):
        host, address = await _checked_address(url, rules)
        status, location, data = await _get(url, host, address, rules)
        if status not in REDIRECTS:
            if status != 200:
                raise FetchError(f"fetching {_short(url)} gave HTTP {status}")
            return data
        if not location:
            raise FetchError(f"{_short(url)} answered HTTP {status} (a redirect) without a Location")
        url = urljoin(url, location)
    raise FetchError(f"more than {rules.max_redirects} redirects (the limit), the last to {_short(url)}")


async def _checked_address(url: str, rules: FetchRules) -> tuple[str, str]:
    """The URL's host and the one address to connect to, after every address the host resolves to is checked."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError as exc:
        raise FetchError(f"not a valid URL ({exc}): {_short(url)}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs are fetched, not {parts.scheme or 'a URL without a scheme'}: "
                           f"{_short(url)}")
    host = parts.hostname
    if not host:
        raise FetchError(f"the URL has no host: {_short(url)}")
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise FetchError(f"the host {host!r} could not be resolved: {exc}") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found))
    for address in addresses:
        why = None if (str(address), port) in rules.trusted else address_refusal(address, rules.allow_private)
        if why is not None:
            how = ("the server was started without --allow-private-image-urls" if address_refusal(address, True) is None
                   else "this server never fetches from such addresses")
            named = f"{host} is {address}," if host != str(address) else f"{address} is"
            raise FetchRefused(f"{_short(url)}: {named} {why}; {how} (images are fetched from public "
                               "addresses only), so send the image inline as a data: URL")
    if not addresses:
        raise FetchError(f"the host {host!r} resolved to no address")
    return host, str(addresses[0])


async def _get(url: str, host: str, address: str, rules: FetchRules) -> tuple[int, str, bytes]:
    """One GET of ``url`` connected to ``address``: its status, Location and (for a 200) its body, within the size
    limit."""
    timeouts = {"connect": rules.timeout, "read": rules.timeout, "write": rules.timeout, "pool": rules.timeout}
    try:
        headers = [(b"Host", urlsplit(url).netloc.rpartition("@")[2].encode("idna")),
                   (b"User-Agent", b"llm-workbench"), (b"Accept", b"image/*")]
        async with httpcore.AsyncConnectionPool(network_backend=_PinnedBackend(address), retries=0) as pool:
            async with pool.stream("GET", url, headers=headers, extensions={"timeout": timeouts}) as response:
                fields = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
                if response.status != 200:
                    return response.status, fields.get("location", ""), b""
                length = fields.get("content-length", "")
                if length.isdigit() and int(length) > rules.max_bytes:
                    raise FetchTooLarge(f"{_short(url)} is {int(length) / 2**20:.3g} MB", int(length))
                data = bytearray()
                async for chunk in response.aiter_stream():
                    data += chunk
                    if len(data) > rules.max_bytes:
                        raise FetchTooLarge(f"{_short(url)} sent over {rules.max_bytes / 2**20:.3g} MB", len(data))
                return 200, "", bytes(data)
    except (httpcore.TimeoutException, httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol,
            UnicodeError) as exc:
        raise FetchError(f"{_short(url)} could not be fetched ({host} at {address}): "
                         f"{exc or type(exc).__name__}") from None


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the one address that was checked, whatever host the connection is for (a pool per URL)."""

    def __init__(self, address: str):
        self._address = address
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Iterable | None = None) -> httpcore.AsyncNetworkStream:
        return await self._backend.connect_tcp(self._address, port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not fetched from")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def _short(url: str) -> str:
    """``url`` for a message: without a user name and password, and at most 100 characters."""
    user, at, _ = url.partition("//")[2].partition("/")[0].rpartition("@")
    url = url.replace(user + at, "", 1) if at else url
    return url if len(url) <= 100 else url[:97] + "..."
