"""A PostgreSQL wire relay that can lose a message on purpose, for the outage tests.

It listens on a unix socket of its own (clients name it like a cluster: ``host=<dir>``,
``port=<n>``) and relays every connection to the real cluster's socket byte for byte.
Two faults, each armed for the next message whose bytes contain a marker (the SQL text of
a statement: psycopg sends it in full until it prepares the statement, after five runs):

- `lose_reply(marker)`: the message reaches PostgreSQL, which runs and commits it; its
  reply never reaches the client — both sides of that connection are closed instead.
  A commit whose acknowledgement was lost: the client cannot know that it happened.
- `lose_request(marker)`: the message never reaches PostgreSQL; the connection is closed.
  Nothing was committed, and the client cannot know that either.

`hold_request(marker)` keeps the message back until `release()`: the call is in flight
while the test restarts PostgreSQL under it.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path

CHUNK = 65536


class PgRelay:
    def __init__(self, upstream: Path) -> None:
        """`upstream`: the cluster's socket file (``<root>/.s.PGSQL.<port>``)."""
        self.upstream = upstream
        self.root = Path(tempfile.mkdtemp(prefix="aromcp-relay-"))
        self.port = 5999
        self.path = self.root / f".s.PGSQL.{self.port}"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        os.chmod(self.path, 0o777)
        self._listener.listen(64)
        self._lock = threading.Lock()
        self._fault: tuple[str, bytes] | None = None  # (kind, marker)
        self.fired = threading.Event()
        self.released = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@/{dbname}?host={self.root}&port={self.port}"

    def lose_reply(self, marker: str) -> None:
        self._arm("reply", marker)

    def lose_request(self, marker: str) -> None:
        self._arm("request", marker)

    def hold_request(self, marker: str) -> None:
        self.released.clear()
        self._arm("hold", marker)

    def release(self) -> None:
        self.released.set()

    def _arm(self, kind: str, marker: str) -> None:
        with self._lock:
            self.fired.clear()
            self._fault = (kind, marker.encode())

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.released.set()

    # -- relaying ----------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                server.connect(str(self.upstream))
            except OSError:
                client.close()
                continue
            lost_reply = threading.Event()  # this connection owes a lost reply
            threading.Thread(target=self._upstream, args=(client, server, lost_reply), daemon=True).start()
            threading.Thread(target=self._downstream, args=(server, client, lost_reply), daemon=True).start()

    def _take(self, data: bytes) -> str | None:
        """The fault armed for a message holding its marker (disarmed as it fires)."""
        with self._lock:
            if self._fault is None or self._fault[1] not in data:
                return None
            kind, self._fault = self._fault[0], None
        return kind

    def _upstream(self, client: socket.socket, server: socket.socket, lost_reply: threading.Event) -> None:
        try:
            while data := client.recv(CHUNK):
                kind = self._take(data)
                if kind == "request":
                    self.fired.set()
                    break
                if kind == "hold":
                    self.fired.set()
                    self.released.wait(60)
                    break  # the connection it was sent on is gone by now (PostgreSQL restarted)
                if kind == "reply":
                    lost_reply.set()
                server.sendall(data)
        except OSError:
            pass
        _close(client, server)

    def _downstream(self, server: socket.socket, client: socket.socket, lost_reply: threading.Event) -> None:
        try:
            while data := server.recv(CHUNK):
                if lost_reply.is_set():  # PostgreSQL answered (so it committed): the client never hears it
                    self.fired.set()
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
