"""What the documentation promises about refusals is what the server does.

docs/claude-code.md said that an agent which completes a `user_input` step by its id,
before the user was asked, "is not stopped"; the server has refused it since the form
gate (`test_user_input_gate.py::test_the_agent_cannot_answer_before_it_is_asked_either`
proves it), so a reader was told the gate was weaker than it is.  The page now says the
step is refused; and the pages about the HTTP surfaces say how to log in.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def paragraph_about(text: str, needle: str) -> str:
    for block in re.split(r"\n\s*\n", text):
        if needle in block:
            return " ".join(block.split())
    raise AssertionError(f"no paragraph mentions {needle!r}")


def test_claude_code_page_says_a_guessed_user_input_completion_is_refused() -> None:
    said = paragraph_about((DOCS / "claude-code.md").read_text(), "guesses a")
    assert "not stopped" not in said, said
    assert "refused" in said and "being asked" in said, said


def test_each_http_page_says_how_to_log_in() -> None:
    for page in ("ui.md", "security.md", "deploy.md", "mcp.md"):
        text = (DOCS / page).read_text()
        assert "login URL" in text and "SameSite=Strict" in text, f"docs/{page} does not say how to log in"
    assert "login URL" in (DOCS.parent / "README.md").read_text()
