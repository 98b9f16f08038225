"""Create a small git project with 10 changed files: 7 that standards:fix fixes and 3 it
ignores (node_modules/, dist/, a .d.ts), so `make run` can show `standards:fix` end to end:
3 batches, 3 concurrent sub-agents.

Usage: python examples/demo_project.py DIR   (DIR is emptied and recreated)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

FILES = {
    "src/app.ts": "export const app = () => 1\n",
    "src/util.ts": "export function util(){return 2}\n",
    "src/api.ts": "export const api = 'v1'\n",
    "src/view.js": "module.exports = {}\n",
    "lib/tool.py": "def tool():\n  return 3\n",
    "lib/helpers.py": "X=1\n",
    "README.md": "# demo\n",
    "node_modules/dep/index.js": "// ignored by standards:fix\n",
    "dist/app.min.js": "// ignored by standards:fix\n",
    "types/app.d.ts": "// ignored by standards:fix\n",
}


def main(target: str) -> int:
    root = Path(target).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    git = ["git", "-c", "user.email=demo@example.com", "-c", "user.name=demo"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "start"], cwd=root, check=True)
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"demo project with {len(FILES)} changed files at {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ".demo-project"))
