"""Messages between the server and its V8 child process (see `isolation.py`).

A message is a line `HEADER_LENGTH BODY_LENGTH`, a JSON header, then a body of raw bytes
that neither side decodes unless it needs to (values in, V8's JSON result out).  Kept
apart from `v8_child.py` so that importing the package never imports the child's
`__main__` module.
"""

from __future__ import annotations

import json
from typing import IO, Any


def read_message(source: IO[bytes]) -> tuple[dict[str, Any], bytes] | None:
    line = source.readline()
    if not line:
        return None
    head_len, body_len = (int(n) for n in line.split())
    head = source.read(head_len)
    body = source.read(body_len)
    if len(head) != head_len or len(body) != body_len:
        return None
    return json.loads(head), body


def write_message(sink: IO[bytes], head: dict[str, Any], body: bytes = b"") -> None:
    data = json.dumps(head, separators=(",", ":")).encode()
    sink.write(b"%d %d\n" % (len(data), len(body)) + data + body)
    sink.flush()
