"""Cost of building a shell command from a template, next to rendering the same text unquoted.

Run: ``.venv/bin/python benchmarks/bench_shell_quoting.py [--n N]``

Each value of a `shell_command`/`agent_shell_command` is escaped for the bash quoting
context it stands in (bare, "…", '…', $(…), here document).  The context is found once per
distinct template (cached); per call only the escaping runs.  Reference: the same template
rendered as plain text in the same run (no quoting at all).
"""

from __future__ import annotations

import argparse
import statistics
import time

from aromcp_workflows.expressions import ExpressionEngine

COMMAND = 'git commit -m "fix: {{ title }}" -- {{ path }} && echo \'{{ note }}\''
SCOPE = {"title": 'say "hi" $HOME', "path": "src/a b.ts", "note": "it's done"}


def _median_us(fn: object, n: int) -> float:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    args = parser.parse_args()
    engine = ExpressionEngine(isolation="thread")
    quoted = _median_us(lambda: engine.render_with_command({}, COMMAND, SCOPE), args.n)
    plain = _median_us(lambda: engine.render(COMMAND, SCOPE), args.n)
    print(f"command with 3 values: quoted {quoted:.1f} µs | unquoted text {plain:.1f} µs | ratio {quoted / plain:.2f}")


if __name__ == "__main__":
    main()
