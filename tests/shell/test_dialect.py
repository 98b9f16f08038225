"""Which commands dash runs with bash's exact result, checked against both real shells.

The table says what the classifier accepts and why it rejects the rest; the differential
tests run every accepted command (the table's and generated ones) under `bash -c` and under
dash (argv[0] "bash") in the same directory and environment and compare stdout, stderr and
exit code.  The last tests show that rejected commands really do differ, so the rules matter.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aromcp_workflows.shell import dialect as shell_dialect
from aromcp_workflows.shell.dialect import dash_text, posix_words, runs_same_under_sh, sh_path
from aromcp_workflows.shell.runner import run_shell

DASH = sh_path()
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(DASH is None or BASH is None, reason="needs /bin/sh to be dash, and bash")
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/someone", "LANG": "C", "GREETING": "hello world",
       "STAR": "*", "DASHED": "-e", "BACK": "a\\tb"}


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a few files to glob, a shebang-less script and a script with a shebang."""
    root = tmp_path_factory.mktemp("dialect")
    for name in ("a.txt", "b.txt", "ab", "B", "c d"):
        (root / name).write_text(name + "\n")
    (root / "plain.sh").write_text("echo [[ ran as $0 ]]\n[[ 1 == 1 ]] && echo bash-only\n")
    (root / "shebang.sh").write_text("#!/bin/bash\necho from-shebang $#\n")
    (root / "noexec").write_text("#!/bin/bash\necho never\n")
    (root / "crlf.sh").write_bytes(b"#!/bin/bash\r\necho crlf\r\n")
    (root / "crlf.sh").chmod(0o755)
    (root / "plain.sh").chmod(0o755)
    (root / "shebang.sh").chmod(0o755)
    (root / "sub").mkdir()
    return root


ACCEPTED = [
    ("true", "builtin true"),
    ("false", "builtin false"),
    (": anything here", "builtin :"),
    ("exit 3", "exit with a number"),
    ("exit", "exit without a number"),
    ("echo hello world", "echo of plain words"),
    ("echo 'single $quotes' \"double $HOME\" $?", "quotes and $NAME, $?"),
    ('echo "${GREETING}" again', "${NAME}"),
    ("echo a; echo b && echo c || echo d", "lists"),
    ("false || echo recovered", "||"),
    ("ls | wc -l", "a pipe between programs"),
    ("ls >/dev/null", "> /dev/null"),
    ("ls /nonexistent 2>/dev/null; echo $?", "N> /dev/null, then $?"),
    ("ls /nonexistent 2>&1 | cat", "fd dup 2>&1"),
    ("echo to-stderr >&2", "fd dup >&2"),
    ("cat </dev/null", "< /dev/null"),
    ("echo x >>/dev/null", ">> /dev/null"),
    ("A=1 B=two /bin/sh -c 'echo $A $B'", "assignments before a program (by path)"),
    ("X=5", "an assignment alone"),
    ("export G2=hi; /bin/sh -c 'echo $G2'", "export NAME=value"),
    ("ls *.txt", "a glob under LANG=C"),
    ("ls ?b", "? glob"),
    ("/usr/bin/printf '%s|' $GREETING", "an unquoted expansion is split alike"),
    ("echo 'it''s' # a comment", "comments"),
    ("echo one\necho two\n\n", "newlines"),
    ("./shebang.sh x y", "a script with a #! line, by relative path"),
    ("cat a.txt 'c d'", "a program found on PATH"),
    ("exit 7 | true; echo $?", "the exit status of a pipeline"),
    ("ls a\\ b", "a backslash escape outside quotes"),
]
REJECTED = [
    ("sleep 0.01 & echo started", "a background job: bash gives its program another SHLVL"),
    ("echo 'a\\nb'", "echo and a backslash: dash's echo reads escapes"),
    ("echo -n x", "echo with an option"),
    ('echo "-e" x', "echo with a quoted option"),
    ("echo *", "echo and a glob"),
    ("[ a = a ]", "[ is a builtin that differs"),
    ("[[ 1 == 1 ]]", "[[ is bash only"),
    ("cd /nonexistent", "cd: exit codes differ"),
    ("printf x", "printf builtin"),
    ("test -f x", "test builtin"),
    ("read x", "read builtin"),
    ("set -e", "set"),
    ("source x", "source"),
    (". ./x", ". builtin"),
    ("eval true", "eval"),
    ("exec ls", "exec"),
    ("command ls", "command"),
    ("type ls", "type"),
    ("exit 256", "exit above 255"),
    ("exit 1 2", "exit with two arguments"),
    ("export", "export without arguments prints differently"),
    ("export -p", "export with an option"),
    ("A=1 :", "an assignment before a special builtin persists in dash only"),
    ("true > /nonexistent/x", "a redirection that can fail"),
    ("cat < a.txt", "a redirection to a file other than /dev/null"),
    ("echo x >&3", "fd dup of a descriptor that may not be open"),
    ("echo x >&-", "closing a descriptor"),
    ("ls 12>/dev/null", "multi-digit fd"),
    ("cat <<EOF\nx\nEOF", "here-document"),
    ("cat <<< x", "here-string"),
    ("ls &> /dev/null", "&>"),
    ("ls |& cat", "|&"),
    ("ls >| /dev/null", ">|"),
    ("echo `date`", "backquote"),
    ("echo $(date)", "$( )"),
    ("(true)", "subshell"),
    ("{ true; }", "group"),
    ("! true", "!"),
    ("ls ~", "tilde"),
    ("echo {a,b}", "brace expansion"),
    ("ls [ab]*", "bracket glob"),
    ("echo $'a'", "$'...'"),
    ('echo $"a"', '$"..."'),
    ("echo ${GREETING:-x}", "${NAME:-...}"),
    ("echo $1 $# $@ $$", "positional and special parameters"),
    ("echo $RANDOM", "bash dynamic variable"),
    ("echo $BASH_VERSION", "BASH_* variable"),
    ("echo $SHELL", "bash sets SHELL, dash does not"),
    ("echo $LINENO", "LINENO"),
    ("IFS=: ls", "assignment to IFS"),
    ("PATH=/x ls", "assignment to PATH"),
    ("A=1; echo $A", "a name set by the command then echoed"),
    ("if true; then echo y; fi", "keyword"),
    ("true &&", "a dangling operator"),
    ("; true", "an empty command"),
    ("true ;;", ";;"),
    ("echo 'unterminated", "unterminated quote"),
    ("echo h\u00e9", "non-ASCII"),
    ("echo a\rb", "carriage return"),
    ("l$X", "an expansion in the command word"),
    ("'ls'", "a quoted command word"),
    ("./plain.sh", "a script without #!: bash runs it as bash, dash as sh"),
    ("./noexec", "not executable"),
    ("./crlf.sh", "a #! line ending in CR: the kernel looks for '/bin/bash\\r'"),
    ("true " + "x" * 5000, "longer than the cached texts"),
    ("./sub", "a directory"),
    ("no-such-program-xyz", "not found: the messages differ"),
    ("env", "prints the environment, where _ and SHLVL differ"),
    ("echo $STAR", "echo of a value that globs"),
    ('echo "$DASHED"', "echo of a value that is an option"),
    ('echo "$BACK"', "echo of a value with a backslash"),
    ('ls \\\n-l', "line continuation"),
]


def verdict(command: str, cwd: Path, env: dict[str, str] = ENV) -> bool:
    return runs_same_under_sh(command, env, cwd)


def both(command: str, cwd: Path, env: dict[str, str] = ENV) -> tuple[tuple[str, str, int], tuple[str, str, int]]:
    """(stdout, stderr, exit code) under bash and under dash (given `dash_text(command)`, as the
    server does), argv[0] "bash" for both."""
    results = []
    for shell, text in ((BASH, command), (DASH, dash_text(command, env, cwd) or command)):
        proc = subprocess.run(["bash", "-c", text], executable=shell, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=30, check=False)
        results.append((proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"), proc.returncode))
    return results[0], results[1]


def test_the_table_has_enough_rows() -> None:
    assert len(ACCEPTED) + len(REJECTED) >= 40 and len(ACCEPTED) >= 25


@pytest.mark.parametrize(("command", "why"), ACCEPTED)
def test_accepted_commands_give_the_same_result(command: str, why: str, cwd: Path) -> None:
    assert verdict(command, cwd), f"should be accepted ({why}): {command!r}"
    on_bash, on_dash = both(command, cwd)
    assert on_bash == on_dash, f"{command!r}: bash {on_bash} != dash {on_dash}"


@pytest.mark.parametrize(("command", "why"), REJECTED)
def test_rejected_commands(command: str, why: str, cwd: Path) -> None:
    assert not verdict(command, cwd), f"should be rejected ({why}): {command!r}"


@pytest.mark.parametrize("command", [
    "echo 'a\\nb'", "[ a == a ] && echo eq", "cd /nonexistent", "true > /nonexistent/x", "./plain.sh",
    "echo $SHELL", "A=1 :; echo \"$A\"", "no-such-program-xyz", "./crlf.sh", 'echo "$DASHED" x', "ls ?",
])
def test_rejected_commands_really_differ(command: str, cwd: Path) -> None:
    """Each of these is rejected by a rule; running it shows the rule is needed."""
    (cwd / "\u00e9").write_text("")  # `ls ?` differs only in a UTF-8 locale with a multibyte name
    env = {**ENV, "LANG": "C.UTF-8"} if command == "ls ?" else ENV
    try:
        assert not verdict(command, cwd, env)
        on_bash, on_dash = both(command, cwd, env)
        assert on_bash != on_dash, f"{command!r} gives the same result in both shells: {on_bash}"
    finally:
        (cwd / "\u00e9").unlink()


PROBE = "/bin/sh -c 'case `cat /proc/$PPID/comm` in bash|dash) echo forked;; *) echo exec;; esac'"
EXEC_SHAPES = ["P", "A=1 B=2 P", "P 2>/dev/null", "P >/dev/null 2>&1", "true; P", "true && P", "false || P",
               "true || true && P", "false && true || P", "true\nP", "true\nP\n", "P\n\n", "P\n ", "P # c",
               "P; # c", "P ;", "P;\n", "true | P", "P; true", "P | cat",
               "true | true && P", "true 2>&1; P", "echo x; P", "\nP", "#c\nP"]


@pytest.mark.parametrize("shape", EXEC_SHAPES)
def test_dash_execs_the_last_program_where_bash_does(shape: str, cwd: Path) -> None:
    """bash -c execs its last command in some shapes and forks in others; the program can see
    which (its parent, and a death by signal: exit code -N without a message vs 128+N with
    one).  `dash_text` makes dash do the same; the probe reports what happened."""
    command = shape.replace("P", PROBE)
    assert verdict(command, cwd)
    on_bash, on_dash = both(command, cwd)
    assert on_bash == on_dash, f"{command!r}: bash {on_bash} != dash {on_dash}"


@pytest.mark.parametrize("command", ["/bin/sh -c 'kill -SEGV $$'", "true; /bin/sh -c 'kill -TERM $$'",
                                     "A=1 /bin/sh -c 'kill -KILL $$'"])
def test_a_program_killed_by_a_signal_looks_the_same_when_it_is_last(command: str, cwd: Path) -> None:
    """Exec'd by both shells, the program is the process whose status is read: -N, no message."""
    assert verdict(command, cwd)
    on_bash, on_dash = both(command, cwd)
    assert on_bash == on_dash and on_bash[2] < 0 and on_bash[1] == ""


def test_known_residual_a_program_killed_by_a_signal_before_the_end(cwd: Path) -> None:
    """The documented residual difference: a program that is not the last one and dies of a
    signal is reported by the shell on stderr, in words that differ.  Stdout and the exit
    code are the same.  (The text cannot tell whether a program will crash.)"""
    command = "/bin/sh -c 'kill -SEGV $$'; echo after"
    assert verdict(command, cwd)
    on_bash, on_dash = both(command, cwd)
    assert on_bash[0] == on_dash[0] == "after\n" and on_bash[2] == on_dash[2] == 0
    assert "Segmentation fault" in on_bash[1] and "Segmentation fault" in on_dash[1] and on_bash[1] != on_dash[1]


def test_the_environment_can_force_bash(cwd: Path) -> None:
    """BASH_ENV is read by `bash -c`, not by dash; an exported function; a UTF-8 locale for globs."""
    script = cwd / "startup"
    script.write_text("echo from-bash-env\n")
    assert verdict("ls *.txt", cwd) and not verdict("ls *.txt", cwd, {**ENV, "LANG": "C.UTF-8"})
    for extra in ({"BASH_ENV": str(script)}, {"BASH_FUNC_ls%%": "() { echo fn; }"}, {"SHELLOPTS": "xtrace"}):
        env = {**ENV, **extra}
        assert not verdict("ls", cwd, env)
        on_bash, on_dash = both("ls", cwd, env)
        assert on_bash != on_dash, extra
    assert not verdict("ls", cwd, {"HOME": "/"})  # no PATH: the shells' default PATHs differ


def test_a_relative_path_entry_or_a_shadowing_directory_forces_bash(cwd: Path, tmp_path: Path) -> None:
    assert not verdict("ls", cwd, {**ENV, "PATH": "bin:/usr/bin:/bin"})
    (tmp_path / "ls").mkdir()
    assert not verdict("ls", cwd, {**ENV, "PATH": f"{tmp_path}:/usr/bin:/bin"})


def test_the_verdict_follows_the_file(cwd: Path, tmp_path: Path) -> None:
    """The header check is keyed by the file's identity: a changed program is checked again."""
    program = tmp_path / "tool"
    program.write_text("#!/bin/sh\necho tool\n")
    program.chmod(0o755)
    assert verdict(str(program), cwd)
    program.write_text("echo no shebang now\n")
    os.utime(program, ns=(1, 1))
    assert not verdict(str(program), cwd)


WORD_TEXTS = ["a", "x y", "'q w'", '"$HOME"', "$HOME", "$?", "$UNSET_X", '"$UNSET_X"', "$GREETING",
              "*.txt", "?b", "*", "'*'", "a\\ b", "--", "-l", "=", "%", "a=b", "'$HOME'", '""']
PROGRAM_TEXTS = ["echo", "true", "false", ":", "exit 0", "exit 5", "/bin/ls", "ls", "cat", "wc -c",
                 "/usr/bin/printf '<%s>'", "/usr/bin/env printf '[%s]'", "./shebang.sh", "A=1 /bin/ls",
                 "printf", "cd", "./plain.sh", "[", "export Z=1"]
REDIRECT_TEXTS = ["", "", "", " 2>&1", " >/dev/null", " 2>/dev/null", " >&2", " </dev/null"]
OPERATOR_TEXTS = [" | ", " && ", " || ", "; ", "\n"]  # `&` is in the table: it races
SIMPLE = st.builds(lambda p, ws, r: " ".join([p, *ws]) + r, st.sampled_from(PROGRAM_TEXTS),
                   st.lists(st.sampled_from(WORD_TEXTS), max_size=3), st.sampled_from(REDIRECT_TEXTS))


@st.composite
def commands(draw: st.DrawFn) -> str:
    parts = draw(st.lists(SIMPLE, min_size=1, max_size=4))
    text = parts[0]
    for part in parts[1:]:
        text += draw(st.sampled_from(OPERATOR_TEXTS)) + part
    return text


def seeded_command(pick: random.Random) -> str:
    """One command of the same shape as `commands()`, from a seeded generator."""
    def simple() -> str:
        words = [pick.choice(WORD_TEXTS) for _ in range(pick.randint(0, 3))]
        return " ".join([pick.choice(PROGRAM_TEXTS), *words]) + pick.choice(REDIRECT_TEXTS)
    text = simple()
    for _ in range(pick.randint(0, 3)):
        text += pick.choice(OPERATOR_TEXTS) + simple()
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(commands())
def test_generated_accepted_commands_give_the_same_result(cwd: Path, command: str) -> None:
    if not verdict(command, cwd):
        return
    on_bash, on_dash = pipeline_view(command, *both(command, cwd))
    if on_bash != on_dash and "|" in command:
        seen_bash, seen_dash = pipeline_outcomes(command, cwd)
        assert seen_bash & seen_dash, f"{command!r}: bash gave {seen_bash}, dash gave {seen_dash}"
        return
    assert on_bash == on_dash, f"{command!r}: bash {on_bash} != dash {on_dash}"


Outcome = tuple[str, str, int]


def pipeline_view(command: str, *results: Outcome) -> list[Outcome]:
    """A pipeline's commands write to stderr at once, even mid-line: compare its characters."""
    if "|" not in command:
        return list(results)
    return [(out, "".join(sorted(err)), code) for out, err, code in results]


def pipeline_outcomes(command: str, cwd: Path, tries: int = 10) -> tuple[set[Outcome], set[Outcome]]:
    """A pipeline whose reader exits early races its writers: in `echo % | cat * | echo`, `cat`
    prints "sub: Is a directory" only when it gets there before SIGPIPE kills it, and which
    comes first is the kernel's choice, not the shell's. So a pipeline that differed once is run
    again under both shells until some outcome came from both (a real difference between the
    shells never does): the outcomes each shell gave."""
    seen_bash: set[Outcome] = set()
    seen_dash: set[Outcome] = set()
    for _ in range(tries):
        on_bash, on_dash = pipeline_view(command, *both(command, cwd))
        seen_bash.add(on_bash)
        seen_dash.add(on_dash)
        if seen_bash & seen_dash:
            break
    return seen_bash, seen_dash


def test_the_generator_reaches_both_sides(cwd: Path) -> None:
    """The generated corpus is not vacuous: many commands are accepted and many rejected
    (200 commands of the generator's shape from a fixed seed, so the count is the same
    every run)."""
    pick = random.Random(13)
    accepted = sum(verdict(seeded_command(pick), cwd) for _ in range(200))
    assert 40 < accepted < 160, accepted


def test_run_shell_uses_dash_only_for_accepted_commands(cwd: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `run_shell`: the shell that ran is visible in /proc, and AROMCP_SHELL_FAST=off forces bash."""
    probe = "/bin/sh -c 'cat /proc/$PPID/comm'; true"  # the inner sh's parent is the shell that ran
    assert posix_words(probe) == ("/bin/sh", "true")
    monkeypatch.setenv("LANG", "C")
    assert run_shell(probe, cwd).stdout == "dash\n"
    assert run_shell(probe + "; [[ 1 ]]", cwd).stdout == "bash\n"
    monkeypatch.setenv("AROMCP_SHELL_FAST", "off")
    assert run_shell(probe, cwd).stdout == "bash\n"


def test_sh_path_is_dash() -> None:
    assert DASH is not None and os.path.basename(DASH) == "dash"
    assert shell_dialect.sh_path() == os.path.realpath("/bin/sh")


ENV_SHAPES = ["./showenv", "./showenv; true", "./showenv | cat", "A=1 ./showenv", "true && ./showenv",
              "showenv", "true | showenv", "showenv 2>/dev/null"]


@pytest.mark.parametrize("level", [None, "0", "3", "998"])
@pytest.mark.parametrize("shape", ENV_SHAPES)
def test_programs_get_the_environment_bash_gives_them(shape: str, level: str | None, cwd: Path) -> None:
    """bash puts SHLVL (one more than its own, or its own for a program it execs) and `_`
    (the program's path) in each program's environment; dash is given them explicitly.
    The variables' order differs, so the program's output is compared sorted."""
    shutil.copy("/usr/bin/printenv", cwd / "showenv")
    env = {**ENV, "PATH": f"{cwd}:/usr/bin:/bin", "OLDPWD": str(cwd / "sub")}
    if level is not None:
        env["SHLVL"] = level
    command = shape
    assert verdict(command, cwd, env)
    on_bash, on_dash = both(command, cwd, env)
    assert sorted(on_bash[0].splitlines()) == sorted(on_dash[0].splitlines()), command
    assert "SHLVL=" in on_bash[0] and "_=" in on_bash[0]
    assert on_bash[1:] == on_dash[1:]


def test_a_background_program_gets_another_shlvl_from_bash(cwd: Path) -> None:
    """Why `&` is refused: bash execs a backgrounded program in its subshell and lowers
    SHLVL for it again, where a program before `&&` in the same place gets one more."""
    shutil.copy("/usr/bin/printenv", cwd / "showenv")
    command = "./showenv SHLVL & wait"
    assert not verdict(command, cwd)
    text = "SHLVL=1 _=./showenv ./showenv SHLVL & wait"  # what the foreground rule would give dash
    on_bash = subprocess.run(["bash", "-c", command], executable=BASH, cwd=cwd, env=ENV, capture_output=True)
    on_dash = subprocess.run(["bash", "-c", text], executable=DASH, cwd=cwd, env=ENV, capture_output=True)
    assert (on_bash.stdout, on_dash.stdout) == (b"0\n", b"1\n")


@pytest.mark.parametrize("extra", [{"SHLVL": "abc"}, {"SHLVL": " 5"}, {"SHLVL": "999"}, {"SHLVL": "-1"},
                                   {"SHLVL": ""}, {"OLDPWD": "/nonexistent-dir"}])
def test_environment_values_bash_rewrites_otherwise_force_bash(extra: dict[str, str], cwd: Path) -> None:
    shutil.copy("/usr/bin/printenv", cwd / "showenv")
    env = {**ENV, **extra}
    assert not verdict("./showenv", cwd, env)
    on_bash, on_dash = both("./showenv", cwd, env)
    assert sorted(on_bash[0].splitlines()) != sorted(on_dash[0].splitlines()), extra
