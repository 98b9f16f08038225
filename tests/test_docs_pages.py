"""README.md and the pages in docs/ stay navigable and current.

Every relative link reaches a file that exists (and, for a Markdown page, a heading that
exists), docs/README.md lists every page, and no page tells the project's history: that
belongs in the commit log, and a reader cannot act on "wave 2".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.e2e_helpers import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HISTORY = re.compile(r"\bwaves?\b", re.IGNORECASE)


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links and headings live."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`\n]*`", "", line))
    return "\n".join(lines)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes for a page's headings (repeats get -1, -2, ...), plus explicit ids."""
    text, fenced = page.read_text(encoding="utf-8"), False
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            slug = _slug(match.group(1))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return found


def relative_links(page: Path) -> list[str]:
    """Every link target of a page that is not a URL."""
    return [target for target in LINK.findall(_prose(page.read_text(encoding="utf-8")))
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_relative_to(ROOT) or not file.exists():
            broken.append(f"{target}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(ROOT).as_posix())
def test_no_page_tells_the_projects_history(page: Path) -> None:
    said = [f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
            for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if HISTORY.search(line)]
    assert not said, "describe the current state (history is in the commit log):\n" + "\n".join(said)


def test_the_docs_index_lists_every_page_and_the_readme_links_it() -> None:
    index = DOCS / "README.md"
    listed = {(DOCS / target.partition("#")[0]).resolve() for target in relative_links(index)}
    missing = [page.name for page in sorted(DOCS.iterdir())
               if page.is_file() and page != index and page.resolve() not in listed]
    assert not missing, f"docs/README.md does not list {missing}"
    assert "docs/README.md" in relative_links(ROOT / "README.md")


def test_the_mcp_page_names_every_tool_and_argument() -> None:
    """The tools in the committed `tools/list` snapshot (which test_tools_list checks against
    the live server) each have a row in docs/mcp.md naming every one of their arguments."""
    page = (DOCS / "mcp.md").read_text(encoding="utf-8")
    rows = {match.group(1): match.group(0) for match in re.finditer(r"^\| `(workflow_\w+)`.*$", page, re.M)}
    tools = json.loads((ROOT / "tests/server/snapshots/list_tools.json").read_text(encoding="utf-8"))
    assert sorted(rows) == sorted(tool["name"] for tool in tools)
    for tool in tools:
        for argument in tool["inputSchema"].get("properties", {}):
            assert f"`{argument}`" in rows[tool["name"]], f"docs/mcp.md: {tool['name']} does not name {argument}"


def test_the_link_checker_catches_what_it_must(tmp_path: Path) -> None:
    """The checks above cannot pass vacuously: a heading's anchor, a link in code, a repeat."""
    page = tmp_path / "p.md"
    page.write_text("# A `code` heading: (x)\n## Same\n## Same\n```\n[in code](nowhere.md)\n```\n"
                    "See [it](p.md#a-code-heading-x) and `[not](gone.md)` and [gone](gone.md).\n")
    assert anchors(page) == {"a-code-heading-x", "same", "same-1"}
    assert relative_links(page) == ["p.md#a-code-heading-x", "gone.md"]
    assert HISTORY.search("as of Wave 2") and not HISTORY.search("a waveform, microwaves")
