"""The suite runs on every core (`make test`: pytest-xdist), and sometimes twice at once in two
checkouts, so no test or benchmark may take a fixed TCP port or a fixed name in the shared temp
directory: another worker, or another suite, takes the same one.  A port comes from the OS
(`--port 0` and the port the server prints, or `free_port()`), a file goes under the test's
own `tmp_path` (or a `tempfile.mkdtemp` folder).

Read with `ast` from the test and benchmark sources: a `port=` keyword, a `"--port"` argument
or a `bind`/`connect` address given a number other than 0; a string that starts with /tmp/ or
/dev/shm/; `tempfile.gettempdir() / "name"`.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("tests", "benchmarks")
SHARED_DIRS = ("/tmp/", "/dev/shm/", "/var/tmp/")


def _fixed_port(node: ast.AST) -> bool:
    """A number other than 0 where a port goes (an int, or a string of digits)."""
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return False
    value = node.value
    return (isinstance(value, int) and value != 0) or (isinstance(value, str) and value.isdigit() and value != "0")


def _port_arguments(call: ast.Call) -> list[ast.AST]:
    """What `call` passes as a port: `port=`, the item after "--port", a (host, port) address."""
    found: list[ast.AST] = [k.value for k in call.keywords if k.arg == "port"]
    items = [item for arg in call.args for item in (arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg])]
    found += [after for before, after in zip(items, items[1:], strict=False)
              if isinstance(before, ast.Constant) and before.value == "--port"]
    method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if method in ("bind", "connect", "connect_ex", "create_connection") and call.args:
        address = call.args[0]
        if isinstance(address, ast.Tuple) and len(address.elts) >= 2:
            found.append(address.elts[1])
    return found


def _shared_temp_name(node: ast.AST) -> bool:
    """A fixed path in a temp directory every process shares."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith(SHARED_DIRS)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant):
        calls = [n.func for n in ast.walk(node.left) if isinstance(n, ast.Call)]
        return any((f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) == "gettempdir" for f in calls)
    return False


def unsafe(source: str) -> list[tuple[int, str]]:
    """(line, what) for each fixed port or shared temp name in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            found += [(arg.lineno, "a fixed port") for arg in _port_arguments(node) if _fixed_port(arg)]
        if isinstance(node, ast.Constant | ast.BinOp) and _shared_temp_name(node):
            found.append((node.lineno, "a fixed name in the shared temp directory"))
    return sorted(found)


def test_no_test_or_benchmark_takes_a_fixed_port_or_temp_name() -> None:
    problems = [f"{path.relative_to(REPO)}:{line}: {what}"
                for folder in SOURCES for path in sorted((REPO / folder).rglob("*.py"))
                if path != Path(__file__).resolve()  # its own examples
                for line, what in unsafe(path.read_text(encoding="utf-8"))]
    assert problems == [], "take ports from the OS and files under tmp_path:\n" + "\n".join(problems)


def test_the_check_sees_each_kind() -> None:
    sample = ('serve("--http", "--port", "8780")\nserving_http(tmp, project, port=8780)\n'
              'sock.bind(("127.0.0.1", 9000))\nsock.connect_ex((host, 5432))\nopen("/tmp/out.log")\n'
              'Path(tempfile.gettempdir()) / "shots"\ntempfile.gettempdir() / "x"\n'
              'serve("--port", "0")\nsock.bind(("127.0.0.1", 0))\nconnect_ex((host, port))\nPath("/tmp")\n')
    assert [line for line, _ in unsafe(sample)] == [1, 2, 3, 4, 5, 6, 7]
