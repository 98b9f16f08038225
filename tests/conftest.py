"""Test tiers: `make test-fast` (pytest -m "not slow") is the edit loop; `make test` runs all.

A test is slow when it starts processes (server or runner subprocesses, a PostgreSQL
cluster, the Claude Code CLI) or waits for limits to expire on purpose.  Whole modules of
that kind are marked here, in one place, instead of test by test.

Both tiers run on every core (pytest-xdist, `-n auto --dist loadscope`: `make test`), so every
test must be safe beside any other, and beside a whole second suite run in another checkout:
its files under its own `tmp_path`, HOME and store its own, ports picked by the OS
(tests/architecture/test_parallel_safe.py checks the sources for fixed ones), one PostgreSQL
cluster per worker (`tests/store/pg_cluster.py`, a socket in a temp dir of its own).  A
session fixture runs once per worker; the tests of one module run on one worker, so a module
fixture is made once (some are costly: AroMCP's whole corpus run, a PostgreSQL cluster, the
plugin's venv, a browser).  A test whose verdict depends on timing it cannot make robust,
because the timing is the product's (the fault campaign's command leases), is marked `alone`:
`make test` runs it after the rest, in a process of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SLOW_PREFIXES = (
    "e2e/",
    "importer/test_shipped.py",
    "importer/test_corpus.py",
    "importer/test_aromcp_corpus.py",
    "integrations/test_plugin_claude_cli.py",
    "integrations/test_plugin_launcher.py",
    "integrations/test_plugin_proxy.py",
    "server/test_crash.py",
    "server/test_load.py",
    "server/test_transport.py",
    "store/test_replicas.py",
    "store/test_store_cli.py",
    "store/test_store_processes.py",
    "security/test_v8_fairness.py",
    "security/test_v8_microtasks.py",
    "security/test_redos.py",
    "security/test_malformed_jsonrpc.py",
    "expressions/test_isolation.py",
    "explain/test_cli_real_store.py",
    "explain/test_transformation_tool.py",
    "test_cli_ops.py",
    "test_cli_definition.py",
    "test_cli_authoring_mistakes.py",
    "test_runner_shell.py",  # a timeout that waits out its bound (5 s) on purpose
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue  # a case of a shipped workflow's test file (workflows/*.test.yaml): in process, fast
        relative = item.path.relative_to(TESTS).as_posix()
        if relative.startswith(SLOW_PREFIXES) or "postgres" in item.nodeid:
            item.add_marker(pytest.mark.slow)
