"""The `import` subcommand: arguments, one translation per file, the printed report.

Exit codes: 0 every file translated (or already valid here), 1 some part of some file
could not be translated (that file gets no output; a file beyond the loader's YAML bounds
is refused unread or unbuilt), or an output path is a symbolic link (never written
through), 2 usage errors (no such file, no `--out` without `--check`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "translate AroMCP workflow files into this project's language"
DESCRIPTION = (
    "Read workflow files written for AroMCP (then_steps/else_steps, while_loop, foreach body:, "
    "tool/parameters, this./inputs./loop. scopes, state_updates, stdout/returncode result names, "
    "...) and write each one, under the same file name, into --out DIR in this project's language. "
    "Every rewrite is printed as file:line: old → new (with a note where AroMCP's meaning differs "
    "from this project's); a part that cannot be translated is printed as file:line: reason and "
    "that file is not written. Files already valid here are copied unchanged. A file beyond the "
    "loader's bounds (size, nesting, alias expansion) is refused with the loader's message, and an "
    "output path that is a symbolic link is never written through. "
    "Exit 0: all translated; 1: some part could not be translated (or an output is a link); 2: usage error.")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `import` to the CLI's subcommands (called from cli/entry.py)."""
    parser = commands.add_parser("import", help=HELP, description=DESCRIPTION)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="AroMCP workflow files (.yaml) or folders of them")
    parser.add_argument("--out", metavar="DIR", help="folder to write the translated files to")
    parser.add_argument("--check", action="store_true",
                        help="print what would change, write nothing (exit 1 if a part cannot be translated)")
    parser.add_argument("--assume-aromcp", action="store_true",
                        help="translate every input, even files that already validate here (a file valid in both "
                             "languages can mean different things in each)")
    parser.set_defaults(handler=cmd_import)


def _files(paths: list[str]) -> list[Path] | str:
    """The input files, or the usage error to print."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
            if not found:
                return f"import: no .yaml files in {raw}"
            files += found
        elif path.is_file():
            files.append(path)
        else:
            return f"import: {raw}: no such file or folder"
    names = [f.name for f in files]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        return f"import: two inputs share the file name {clash[0]}; import them into different --out folders"
    return files


def cmd_import(args: argparse.Namespace) -> int:
    from aromcp_workflows.importer.translate import translate_file
    from aromcp_workflows.importer.writing import UnsafeTarget, write_result

    if not args.check and not args.out:
        print("import: say where to write with --out DIR (or use --check to only print the changes)", file=sys.stderr)
        return 2
    files = _files(args.paths)
    if isinstance(files, str):
        print(files, file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None and not args.check and out_dir.exists() and not out_dir.is_dir():
        print(f"import: --out {out_dir} is a file, not a folder; name a folder (it is made if it does not exist)",
              file=sys.stderr)
        return 2
    if out_dir is not None and not args.check:
        inputs = {f.resolve() for f in files}
        clash = [f for f in files if (out_dir / f.name).resolve() in inputs]
        if clash:
            print(f"import: --out {out_dir} would overwrite the input {clash[0]}; write the translation to "
                  "another folder (the original is kept)", file=sys.stderr)
            return 2
    failed = 0
    for path in files:
        try:
            result = translate_file(path, assume_aromcp=args.assume_aromcp)
        except (UnicodeDecodeError, OSError) as exc:  # nothing to translate: said, and the others go on
            failed += 1
            why = "the file is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else (exc.strerror or exc)
            print(f"{path}: not translated: {why}", file=sys.stderr)
            continue
        for line in result.lines():
            print(line)
        if not result.ok:
            failed += 1
            print(f"{path}: not translated ({len(result.notes.refusals)} part(s) could not be)", file=sys.stderr)
        elif out_dir is not None and not args.check:
            try:
                write_result(result, out_dir)
            except UnsafeTarget as exc:
                failed += 1
                print(exc, file=sys.stderr)
                continue
            print(f"{path}: wrote {result.written_to} ({len(result.notes.rewrites)} rewrite(s))", file=sys.stderr)
        else:
            print(f"{path}: {len(result.notes.rewrites)} rewrite(s) (not written: --check)", file=sys.stderr)
    return 1 if failed else 0
