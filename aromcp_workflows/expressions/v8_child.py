"""The V8 child process behind `ProcessV8Runtime`: reads requests on stdin, runs them on
an in-process `V8Runtime`, writes one answer each on stdout; exits when stdin closes.

A message is a line `HEADER_LENGTH BODY_LENGTH`, a JSON header, then a body that is
forwarded untouched: the values going in and V8's JSON result coming out are never
decoded here (for a 10,000-item list that is most of the cost of the extra process).

Two ways out besides an answer:
- SIGUSR1 while a call runs means "preempt": the parent needs this isolate for a
  waiting call.  The call's script is terminated (V8 stays usable) and answered
  `{"preempted": true}`; the parent runs it again later.  A signal that arrives between
  calls is ignored.
- A call whose promise jobs outlive the time limit leaves a V8 that nobody can stop
  (`runtime.poisoned`): the answer says `"exit": true` and the process exits at once.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

from aromcp_workflows.expressions.pipe import read_message, write_message
from aromcp_workflows.expressions.runtime import (
    FunctionDef,
    Interrupted,
    Preempted,
    RuntimeFailure,
    V8Runtime,
)

_armed = False  # a call is running: SIGUSR1 preempts it


def _on_preempt(signum: int, frame: FrameType | None) -> None:
    if _armed:
        raise Preempted


def serve(timeout_ms: int, max_memory_mb: int, gc_every: int) -> None:
    runtime = V8Runtime(timeout_ms=timeout_ms, max_memory_mb=max_memory_mb, gc_every=gc_every)
    signal.signal(signal.SIGUSR1, _on_preempt)
    write_message(sys.stdout.buffer, {"ready": True})  # SIGUSR1 no longer kills us
    while True:
        message = read_message(sys.stdin.buffer)
        if message is None:
            return
        head, body = handle(runtime, *message)
        head["stats"] = runtime.stats.as_dict()
        if runtime.poisoned:
            head["exit"] = True
        write_message(sys.stdout.buffer, head, body)
        if runtime.poisoned:
            os._exit(0)  # V8 is still running a job nobody can stop; threads die with us


def handle(runtime: V8Runtime, request: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    global _armed
    if request["op"] == "reset":
        runtime.reset()
        return {"ok": True}, b""
    defs = [FunctionDef(fn_id, tuple(params), source, mode) for fn_id, params, source, mode in request["defs"]]
    try:
        _armed = True
        try:
            text = runtime.call_text(request["entry"], defs, request["meta"], body.decode())
        finally:
            _armed = False
    except Preempted:
        return {"preempted": True}, b""
    except Interrupted as exc:
        return {"interrupted": exc.kind, "reached": exc.reached}, b""
    except RuntimeFailure as exc:
        return {"failure": str(exc)}, b""
    return {"ok": True}, text.encode()


if __name__ == "__main__":
    try:
        serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    except (BrokenPipeError, ConnectionResetError):  # the server died (killed): nobody is left to answer
        os._exit(0)
