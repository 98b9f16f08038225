"""Web view fixtures: a project with the test workflows; a headless Chromium (Debian's
`chromium`, driven by Playwright, which never downloads a browser of its own)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web_helpers import Project  # tests/web is on sys.path (rootdir import mode)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    proj = Project.make(tmp_path)
    monkeypatch.setenv("HOME", str(proj.home))
    monkeypatch.setenv("AROMCP_WORKFLOWS_STORE", proj.store)  # never the user's store
    return proj


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium per module (the Debian package; CI installs it).  Not per
    session: Playwright's sync API keeps an event loop running in the main thread while it
    is open, and the asyncio tests that run after this module need it gone."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"
