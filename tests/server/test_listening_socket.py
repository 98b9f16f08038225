"""One listening socket for `serve --http` (`http_guard.bind`) and `ui` (`web.run.listen`):
both call `http.listening_socket`, so an address means the same to both.

They used to differ: `serve --http` bound `::` to IPv6 only while `ui` left it to the
system (dual stack on Linux by default) and printed a 127.0.0.1 URL for it; `ui --host
[::1]` failed outright.  Now `::` is every address, IPv4 too, on either command (set on the
socket, whatever `net.ipv6.bindv6only` says), a specific address is that address only, and
brackets are accepted.  Real sockets, real connections.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from aromcp_workflows.http import BACKLOG
from aromcp_workflows.server.http_auth import HttpOptions, HttpSetupError
from aromcp_workflows.server.http_guard import bind
from aromcp_workflows.web.run import PortError, listen


def serve_socket(host: str, port: int) -> socket.socket:
    """`serve --http`'s socket as it serves: bound at once, listening once its claims are made."""
    sock = bind(HttpOptions(host=host, port=port))
    sock.listen(BACKLOG)
    return sock


OPENERS: dict[str, Callable[[str, int], socket.socket]] = {"serve --http": serve_socket, "ui": listen}


def has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not has_ipv6_loopback(), reason="this machine has no IPv6 loopback")


def reaches(address: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as conn:
        conn.settimeout(5)
        return conn.connect_ex((address, port)) == 0


@needs_ipv6
@pytest.mark.parametrize("command", OPENERS)
@pytest.mark.parametrize(("host", "v4", "v6"), [
    ("::", True, True), ("[::]", True, True), ("::1", False, True), ("[::1]", False, True),
    ("127.0.0.1", True, False), ("0.0.0.0", True, False)])
def test_one_ipv6_behaviour(command: str, host: str, v4: bool, v6: bool) -> None:
    sock = OPENERS[command](host, 0)
    try:
        port = sock.getsockname()[1]
        assert (reaches("127.0.0.1", port), reaches("::1", port)) == (v4, v6)
        assert sock.proto == socket.IPPROTO_TCP  # accepted connections get TCP_NODELAY, as asyncio's do
    finally:
        sock.close()


def test_a_port_in_use_says_what_to_change() -> None:
    taken = listen("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(PortError, match=rf"cannot listen on 127.0.0.1:{port}: .*choose another --port"):
            listen("127.0.0.1", port)
        with pytest.raises(HttpSetupError, match=rf"cannot listen on 127.0.0.1 port {port}") as refused:
            bind(HttpOptions(host="127.0.0.1", port=port))
        assert refused.value.exit_code == 1
    finally:
        taken.close()
