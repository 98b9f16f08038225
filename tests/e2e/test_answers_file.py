"""The runner's answers file: key lookup order, sequences, cases, errors (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aromcp_workflows.runner.answers import AnswerBook, AnswersFileError, answer_keys
from aromcp_workflows.runner.run import UsageError, parse_inputs

HINTS = {"id": "fix_batch_0.fix_files.get_hints#2", "type": "mcp_call",
         "definition": {"method": "hints_for_file", "params": {"file_path": "src/a.ts"}}}
APPLY = {"id": "fix_batch_1.fix_files.apply#0", "type": "agent_prompt",
         "definition": {"prompt": "Apply", "context": {"file": "lib/e.py", "hints": []}}}
ASK = {"id": "ask_branch", "type": "user_input", "definition": {"prompt": "Which branch?"}}


def test_keys_most_specific_first():
    assert answer_keys(HINTS, "fix_batch_0") == [
        "fix_batch_0.fix_files.get_hints#2", "fix_batch_0.fix_files.get_hints",
        "fix_files.get_hints#2", "fix_files.get_hints", "get_hints", "hints_for_file"]
    assert answer_keys(ASK, None) == ["ask_branch"]


def test_exact_id_beats_method_and_last_component():
    book = AnswerBook({"hints_for_file": {"hints": ["generic"]}, "get_hints": {"hints": ["step"]},
                       "fix_batch_0.fix_files.get_hints#2": {"hints": ["exact"]}})
    assert book.take(HINTS, "fix_batch_0").result == {"hints": ["exact"]}
    other = {**HINTS, "id": "fix_batch_0.fix_files.get_hints#3"}
    assert book.take(other, "fix_batch_0").result == {"hints": ["step"]}


def test_sequence_is_consumed_then_missing_with_hint():
    book = AnswerBook({"ask_branch": ["Bad Name", "release/1"]})
    assert [book.take(ASK, None).result, book.take(ASK, None).result] == ["Bad Name", "release/1"]
    assert book.take(ASK, None) is None
    assert "the 2 answer(s) listed under `ask_branch` were all used" in book.missing_hint(ASK, None)


def test_wrappers_literal_list_and_error():
    book = AnswerBook({"apply": {"result": [1, 2]}, "ask_branch": {"error": "user left"}})
    assert book.take(APPLY, "fix_batch_1").result == [1, 2]
    failed = book.take(ASK, None)
    assert (failed.status, failed.error) == ("failed", "user left")


def test_cases_by_params_and_definition_paths():
    book = AnswerBook({
        "hints_for_file": [{"when_params": {"file_path": "src/*.ts"}, "result": {"hints": ["ts"]}},
                           {"result": {"hints": []}}],
        "apply": [{"when": {"context.file": "lib/e.py"}, "result": 5}],
    })
    assert book.take(HINTS, "fix_batch_0").result == {"hints": ["ts"]}
    py = {**HINTS, "definition": {"method": "hints_for_file", "params": {"file_path": "a.py"}}}
    assert book.take(py, "fix_batch_0").result == {"hints": []}
    assert book.take(APPLY, "fix_batch_1").result == 5  # cases are never consumed
    assert book.take(APPLY, "fix_batch_1").result == 5
    elsewhere = {**APPLY, "definition": {"context": {"file": "other.py"}}}
    assert book.take(elsewhere, "fix_batch_1") is None


def test_missing_hint_names_method_for_mcp_calls():
    text = AnswerBook().missing_hint(HINTS, "fix_batch_0")
    assert "`hints_for_file:`" in text and "`fix_batch_0.fix_files.get_hints#2:`" in text


@pytest.mark.parametrize("text, problem", [
    ("- a\n- b\n", "must be a mapping"),
    ("x: [\n", r"answers\.yaml:2:1: invalid YAML: expected ',' or '\]' but found '<stream end>'; is the '\[' on "
                r"line 1, column 4 missing its '\]'\?"),  # file:line:column, as a workflow's
    ("x:\n  result: 1\n  error: e\n", "either `result` or `error`"),
    ("x:\n  - when_params: {a: 1}\n", "needs `result`"),
])
def test_malformed_files(tmp_path: Path, text: str, problem: str):
    path = tmp_path / "answers.yaml"
    path.write_text(text)
    with pytest.raises(AnswersFileError, match=problem):
        AnswerBook.load(path)


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(AnswersFileError, match="cannot read answers file"):
        AnswerBook.load(tmp_path / "nope.yaml")


def test_parse_inputs_keeps_the_text():
    """The server converts text to the declared type; the CLI guesses nothing."""
    assert parse_inputs(["n=3", "flag=true", "ref=main", "files=[\"a\"]", "s=a=b", "q=\"x\""]) == {
        "n": "3", "flag": "true", "ref": "main", "files": '["a"]', "s": "a=b", "q": '"x"'}
    with pytest.raises(UsageError, match="is not KEY=VALUE"):
        parse_inputs(["nokey"])


def test_yaml_dates_are_iso_text(tmp_path: Path):
    path = tmp_path / "answers.yaml"
    path.write_text("ask_branch: 2024-06-01\n")
    assert AnswerBook.load(path).take(ASK, None).result == "2024-06-01"
