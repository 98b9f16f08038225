"""The real server's answers that the plugin's proxy gives while the first start installs
(`plugin/server/answers.json`), recorded from a server started over stdio.

`test_plugin_proxy.py` compares the file with a fresh recording, so it cannot drift from
the server. After a change to the tools, prompts, resources, instructions or the package
version, write it again:

    .venv/bin/python tests/integrations/plugin_snapshot.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plugin_helpers import ANSWERS, HANDSHAKE, MODERN, RawClient, modern_meta

LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")
UNKNOWN_VERSION = "1999-01-01"
ABOUT = ("The real server's answers that server/proxy.py gives while the first start installs the dependencies. "
         "Written by tests/integrations/plugin_snapshot.py; tests/integrations/test_plugin_proxy.py checks them.")


def server(folder: Path, python: str) -> RawClient:
    env = {"AROMCP_WORKFLOWS_STORE": str(folder / "store.sqlite"), "PATH": "/usr/bin:/bin", "HOME": str(folder)}
    return RawClient([python, "-m", "aromcp_workflows", "serve"], env, folder)


def result(answer: dict[str, Any]) -> Any:
    assert "result" in answer, answer
    return answer["result"]


def record_handshake(folder: Path, python: str) -> dict[str, Any]:
    """The 2025-era answers: `initialize` at the newest version, then the lists and ping."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    assert HANDSHAKE_PROTOCOL_VERSIONS[-1] == HANDSHAKE
    with server(folder, python) as client:
        initialize = result(client.handshake(HANDSHAKE))
        results = {method: result(client.request(method)) for method in (*LISTS, "ping")}
    return {"versions": list(HANDSHAKE_PROTOCOL_VERSIONS), "initialize": initialize, "results": results}


def record_modern(folder: Path, python: str) -> dict[str, Any]:
    """The 2026-07-28 answers (each request stands alone), and the error for a version the
    server does not speak."""
    with server(folder, python) as client:
        results = {method: result(client.request(method, {"_meta": modern_meta()}))
                   for method in ("server/discover", *LISTS)}
        refused = client.request("tools/list", {"_meta": modern_meta(UNKNOWN_VERSION)})["error"]
    versions = results["server/discover"]["supportedVersions"]
    assert MODERN in versions and refused["data"] == {"supported": versions, "requested": UNKNOWN_VERSION}, refused
    return {"versions": versions, "unsupported": {"code": refused["code"], "message": refused["message"]},
            "results": results}


def record(python: str = sys.executable) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return {"about": ABOUT, "handshake": record_handshake(Path(tmp), python),
                "modern": record_modern(Path(tmp), python)}


if __name__ == "__main__":
    ANSWERS.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {ANSWERS}")
