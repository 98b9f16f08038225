"""The V8 child process behind `ProcessV8Runtime`: reads requests on stdin, runs them on
an in-process `V8Runtime`, writes one answer each on stdout; exits when stdin closes.

A message is a line `HEADER_LENGTH BODY_LENGTH`, a JSON header, then a body that is
forwarded untouched: the values going in and V8's JSON result coming out are never
decoded here (for a 10,000-item list that is most of the cost of the extra process).
"""

from __future__ import annotations

import sys
from typing import Any

from aromcp_workflows.expressions.pipe import read_message, write_message
from aromcp_workflows.expressions.runtime import FunctionDef, Interrupted, RuntimeFailure, V8Runtime


def serve(timeout_ms: int, max_memory_mb: int, gc_every: int) -> None:
    runtime = V8Runtime(timeout_ms=timeout_ms, max_memory_mb=max_memory_mb, gc_every=gc_every)
    while True:
        message = read_message(sys.stdin.buffer)
        if message is None:
            return
        head, body = handle(runtime, *message)
        head["stats"] = runtime.stats.as_dict()
        write_message(sys.stdout.buffer, head, body)


def handle(runtime: V8Runtime, request: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    if request["op"] == "reset":
        runtime.reset()
        return {"ok": True}, b""
    defs = [FunctionDef(fn_id, tuple(params), source, mode) for fn_id, params, source, mode in request["defs"]]
    try:
        text = runtime.call_text(request["entry"], defs, request["meta"], body.decode())
    except Interrupted as exc:
        return {"interrupted": exc.kind, "progress": exc.progress}, b""
    except RuntimeFailure as exc:
        return {"failure": str(exc)}, b""
    return {"ok": True}, text.encode()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
