"""The shape of the code: module and function sizes of sglstack/, read with `ast`.

    python3 benchmarks/code_shape.py [--root sglstack] [--top 10]

Prints how many modules are over 300/400/500 lines, the largest modules, and every function over 50 lines
with its length (def line to last line). `sglstack/data` is left out: templates and SGLang's patch sources.
A function marked `# long: reason` on the line above its def is shown with the mark.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules(package: Path) -> list[Path]:
    return [p for p in sorted(package.rglob("*.py")) if "data" not in p.relative_to(package).parts[:1]]


def functions(path: Path) -> list[tuple[str, int, bool]]:
    """(qualified name, length in lines, marked long) of each function and method of one module."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[tuple[str, int, bool]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                marked = first >= 2 and lines[first - 2].strip().startswith("# long:")
                out.append((prefix + child.name, (child.end_lineno or child.lineno) - child.lineno + 1, marked))
                walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse("\n".join(lines)), "")
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=str(ROOT / "sglstack"))
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    package = Path(args.root)
    sizes = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in modules(package)}
    rel = {p: str(p.relative_to(package.parent)) for p in sizes}
    print(f"modules: {len(sizes)}, lines: {sum(sizes.values())}")
    print("modules over 300 / 400 / 500 lines: "
          + " / ".join(str(sum(n > limit for n in sizes.values())) for limit in (300, 400, 500)))
    print(f"\nlargest {args.top} modules:")
    for path, n in sorted(sizes.items(), key=lambda kv: (-kv[1], rel[kv[0]]))[: args.top]:
        print(f"  {n:5d}  {rel[path]}")
    funcs = [(n, f"{rel[p]}:{name}", marked) for p in sizes for name, n, marked in functions(p)]
    over50 = sorted((f for f in funcs if f[0] > 50), key=lambda f: (-f[0], f[1]))
    print(f"\nfunctions: {len(funcs)}; over 50 lines: {len(over50)}; over 60 lines: "
          f"{sum(f[0] > 60 for f in funcs)} ({sum(f[0] > 60 and f[2] for f in funcs)} marked '# long:')")
    for n, name, marked in over50:
        print(f"  {n:5d}  {name}{'  (# long)' if marked else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
