"""Which Host and Origin an HTTP server of ours answers, and the socket it listens on.

One rule for everything served over HTTP — `/mcp` and `/ui` of `serve --http --ui`, and the
web view alone (`aromcp-workflows ui`): the allowed hosts are loopback, the bind address
(unless it is 0.0.0.0 or ::, which name no host) and the `--allowed-host` entries.  A
request whose Host names another host gets 421, one whose Origin is a page of another host
403, before any app reads it: a web page that rebinds its own name to this server's address
(DNS rebinding) reaches nothing, and the refusal says which flag would allow the name.

Light on purpose (no MCP SDK): the web view alone imports it at start.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
UNSPECIFIED = frozenset({"0.0.0.0", "::", "[::]"})
HOST_ENTRY = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?")
ORIGIN = re.compile(r"(?P<scheme>https?)://(?P<host>[^/]+)/?")
DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_NAME_CHARS = 253  # a DNS name's limit
SHOWN_CHARS = 120  # of a refused header in the answer: enough to recognise, not an echo chamber
ALLOWED_BY = ("it answers only to loopback, the address it is bound to and the names given with --allowed-host "
              "(against DNS rebinding)")

Entry = tuple[str, int | None]  # (host as a Host header writes it, port or None for any port)


class HostEntryError(ValueError):
    """An `--allowed-host` entry that names no host; the text says what to write instead."""


def parse_host(text: str) -> Entry | None:
    """`name`, `name:port`, `[v6]`, `[v6]:port` or a bare IPv6 address → (host, port or
    None), lower-cased; None when `text` is none of these (or longer than a name can be)."""
    text = text.strip().lower()
    if len(text) > MAX_NAME_CHARS + 8:  # a name, brackets, and ":65535"
        return None
    if text.count(":") > 1 and not text.startswith("["):
        text = f"[{text}]"  # a bare IPv6 address (a bind address)
    match = HOST_ENTRY.fullmatch(text)
    port = int(match["port"]) if match is not None and match["port"] else None
    if match is None or (port is not None and not 0 < port < 65536):
        return None
    return (f"[{match['v6']}]" if match["v6"] else match["name"]), port


def split_host(entry: str) -> Entry:
    """An `--allowed-host` entry (or a bind address) as (host, port or None), or
    `HostEntryError` saying what to write."""
    parsed = parse_host(entry)
    if parsed is None:
        raise HostEntryError(f"--allowed-host {entry!r} is not a host name or address with an optional :PORT "
                             "(e.g. mcp.internal, mcp.internal:8443, 10.0.0.5, [fd00::5])")
    return parsed


@dataclass(frozen=True)
class HostRefusal:
    status: int  # 421 (Host) or 403 (Origin)
    text: str


@dataclass(frozen=True)
class HostRule:
    """The hosts a server answers to, each with its port (None: any port)."""

    entries: frozenset[Entry]

    @classmethod
    def for_bind(cls, bind: str, allowed: Iterable[str] = ()) -> HostRule:
        """Loopback, `bind` (unless it names every address) and the `--allowed-host`
        entries; `HostEntryError` for an entry that names no host."""
        bound = () if bind.strip().lower() in UNSPECIFIED else (bind,)
        return cls(frozenset(split_host(entry) for entry in (*LOOPBACK_HOSTS, *bound, *allowed)))

    def allows(self, host: str, port: int | None, default_ports: Iterable[int]) -> bool:
        """`host:port` is one of ours; a port left out is one of `default_ports` (a client
        leaves the scheme's default port out of Host and Origin)."""
        ports = (port,) if port is not None else tuple(default_ports)
        return (host, None) in self.entries or any((host, p) in self.entries for p in ports)

    def refusal(self, headers: Headers) -> HostRefusal | None:
        """Why this request is not served (a Host or an Origin of another host), or None."""
        host = headers.get("host")
        parsed = parse_host(host) if host else None
        if parsed is None or not self.allows(*parsed, DEFAULT_PORTS.values()):
            return HostRefusal(421, host_refused(host, parsed))
        origin = headers.get("origin")
        if origin is None:  # not sent by a browser, or a same-origin GET: the Host decides
            return None
        match = ORIGIN.fullmatch(origin.strip().lower())
        page = parse_host(match["host"]) if match else None
        if match is None or page is None or not self.allows(*page, (DEFAULT_PORTS[match["scheme"]],)):
            return HostRefusal(403, origin_refused(origin, page))
        return None


def shown(value: str) -> str:
    return repr(value[:SHOWN_CHARS] + ("..." if len(value) > SHOWN_CHARS else ""))


def host_refused(host: str | None, parsed: Entry | None) -> str:
    if not host:
        return f"the request has no Host header: send one that names this server ({ALLOWED_BY})"
    if parsed is None:
        return f"Host {shown(host)} is not a host name or address with an optional :PORT: {ALLOWED_BY}"
    return (f"Host {shown(host)} is not a name this server answers to: {ALLOWED_BY}; if clients reach it by "
            f"this name, start it with --allowed-host {parsed[0]}")


def origin_refused(origin: str, page: Entry | None) -> str:
    allow = f"; if that page may call it, start it with --allowed-host {page[0]}" if page is not None else ""
    return f"Origin {shown(origin)} is a page of another host: {ALLOWED_BY}{allow}"


async def respond(send: Send, status: int, body: bytes, content_type: bytes, close: bool = False) -> None:
    """A whole answer of our own (a refusal), sent before the app sees the request."""
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class HostGuard:
    """The rule in front of an ASGI app: a refused request never reaches it (nor is its
    body read)."""

    def __init__(self, app: ASGIApp, rule: HostRule):
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = self.rule.refusal(Headers(scope=scope)) if scope["type"] in ("http", "websocket") else None
        if refused is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":  # closed before it is accepted: the client gets 403
            await send({"type": "websocket.close", "code": 1008})
        else:
            await respond(send, refused.status, refused.text.encode(), b"text/plain; charset=utf-8")


BACKLOG = 2048  # connections the kernel holds before they are accepted


def listening_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one), made as asyncio makes its
    own (from `getaddrinfo`, so its protocol is TCP and the connections it accepts get
    TCP_NODELAY: without it an answer written in two parts waits for a delayed ACK).

    IPv6: `[::1]` and `::1` are the same address; `::` is every address, IPv4 ones too (dual
    stack, set here rather than left to the system's `net.ipv6.bindv6only`), as 0.0.0.0 is
    every IPv4 one and as the host rule treats them alike.  OSError when it cannot be.
    `listen=False`: bound only (the port is this process's, nobody can connect yet); the
    caller calls `listen(BACKLOG)` once it is ready to answer."""
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        if listen:
            sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock
