"""What the user decided stays the user's: the state paths a `user_input` answer wrote.

The server holds the program counter, so an agent cannot skip a step; this holds the
*authority*.  Each answer to a question is recorded with the path it wrote (its
`state_update` target), the question, and who gave it (`user`: a form the client showed;
`person`: the CLI or the page; `agent`: relayed by an agent whose client shows no forms;
`runner`: the headless runner, which plays both roles).  The record is part of the run
(`Machine.owners`), so it is committed, caught up, rebuilt and forked with the state.

The agent may not write a user-owned path, nor a path above or inside one, in either
writable tier (`raw.x` shadows `state.x` where a condition reads `x`), nor delete an item
before a user-owned item of a list (which would move another value to its index)
(`refuse_agent_writes`): its `workflow_state_update` and its fork edits of one are refused
with the question that owns it, and nothing changes.  A fork that would start after user
answers carries them forward: the instance layer asks the user first (`answers_in`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from aromcp_workflows.errors import ErrorKind, KindedError
from aromcp_workflows.state import Update, format_path, parse_write_path

Writer = Literal["agent", "user", "person", "runner", "server"]
QUESTION_CHARS = 200  # of the question kept with an answer: enough to recognise it


class UserOwned(KindedError):
    """The agent tried to write what the user decided."""

    kind: ErrorKind = "refused"


@dataclass(frozen=True)
class UserAnswer:
    """One user-owned path: which question's answer wrote it, and who gave it."""

    path: str
    step_id: str
    question: str
    by: str
    at: str

    def data(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> UserAnswer:
        return cls(**{k: str(data.get(k, "")) for k in ("path", "step_id", "question", "by", "at")})


def _key(path: str) -> tuple[str | int, ...]:
    """What a path names as conditions and templates read it: its segments, without its tier
    (the flat view shows `raw.x` or `state.x` as one `x`, the first shadowing the second)."""
    _tier, segments = parse_write_path(path)
    return tuple(segments)


def _same(a: tuple[str | int, ...], b: tuple[str | int, ...]) -> bool:
    return len(a) == len(b) and all(str(x) == str(y) for x, y in zip(a, b, strict=True))


def record(owners: dict[str, dict[str, dict[str, str]]], state_key: str, answer: UserAnswer) -> None:
    """Keep `answer` as the owner of its path in the state `state_key` (an include has its own)."""
    owners.setdefault(state_key, {})[answer.path] = answer.data()


def carry_up(owners: dict[str, dict[str, dict[str, str]]], child_key: str, parent_key: str,
             result_path: str) -> None:
    """An included workflow's state lands in its parent at `result_path`, flattened: what the
    user decided in the child is theirs there too (`result_path` and the path without its tier)."""
    tier, base = parse_write_path(result_path)
    for data in list(owners.get(child_key, {}).values()):
        answer = UserAnswer.from_data(data)
        _tier, segments = parse_write_path(answer.path)
        record(owners, parent_key, replace(answer, path=format_path(tier, [*base, *segments])))


def owner_of(owners: dict[str, dict[str, dict[str, str]]], state_key: str, path: str,
             operation: str = "set") -> UserAnswer | None:
    """The answer that owns `path`, a path above it or one inside it (in either tier), or, for
    a `delete` of a list item, an item after it in the same list; None when it is free."""
    try:
        wanted = _key(path)
    except Exception:  # a path no update could write: the state refuses it with its own words
        return None
    for owned, data in owners.get(state_key, {}).items():
        key = _key(owned)
        n = min(len(key), len(wanted))
        if _same(key[:n], wanted[:n]) or (operation == "delete" and _moves(wanted, key)):
            return UserAnswer.from_data(data)
    return None


def _moves(deleted: tuple[str | int, ...], owned: tuple[str | int, ...]) -> bool:
    """Whether deleting the list item `deleted` shifts the owned item (one later in the same list)."""
    at = len(deleted) - 1
    if at >= len(owned):
        return False
    gone, kept = deleted[at], owned[at]
    return isinstance(gone, int) and isinstance(kept, int) and kept > gone and _same(deleted[:at], owned[:at])


def refuse_agent_writes(owners: dict[str, dict[str, dict[str, str]]], state_key: str,
                        updates: list[Update]) -> None:
    """`UserOwned` for the first update of the agent's that would change what a user decided."""
    for update in updates:
        answer = owner_of(owners, state_key, update.path, update.operation)
        if answer is not None:
            raise UserOwned(refusal(update.path, answer))


def refusal(path: str, answer: UserAnswer) -> str:
    """The one line an agent gets: the rule, the question, and who may change it."""
    return (f"refused: {path} holds the user's answer to {answer.question!r} (step {answer.step_id}); "
            "the agent may not change what the user decided. Ask the user, who can change it from the "
            "command line (`aromcp-workflows fork ID --set PATH=JSON`) or the page; nothing was changed")


def answers_in(owners: dict[str, dict[str, dict[str, str]]]) -> list[UserAnswer]:
    """Every user answer a body carries, in the order they were given (an included workflow's
    once, though its parent's copy of it is owned too: `carry_up`)."""
    found: dict[tuple[str, str], UserAnswer] = {}
    for paths in owners.values():
        for data in paths.values():
            answer = UserAnswer.from_data(data)
            found.setdefault((answer.step_id, answer.at), answer)
    return sorted(found.values(), key=lambda a: a.at)


def shown_question(text: object) -> str:
    """The question as kept with its answer: one line, at most `QUESTION_CHARS`."""
    line = " ".join(str(text or "").split())
    return line if len(line) <= QUESTION_CHARS else line[: QUESTION_CHARS - 1] + "…"
