"""Verifying a patched file, structurally: the target class, its members, their kinds and signatures.

The queries `apply` asks before it inserts (is the class there once, is a method already a member, are
two bodies the same code, are two signatures compatible, which names does the module bind) and the
check run after every apply and by `verify` are one set of `ast` rules, kept here so that applying
and verifying cannot disagree about what a patched class looks like.
"""

from __future__ import annotations

import ast

from .errors import PatchError, PatchModuleLevelDef, PatchVerifyError
from .source import SourceFile
from .spec import PatchSpec, bound_names


def verify(spec: PatchSpec, src: SourceFile, identical: set[str]) -> None:
    """The checks run after every apply and by `verify`; failures are PatchVerifyError."""
    tree = parse(spec, src, PatchVerifyError)
    cls = the_class(spec, tree, PatchVerifyError)
    no_module_level_defs(spec, tree, PatchVerifyError)
    for method in spec.methods:
        node = member(spec, cls, method.name, PatchVerifyError)
        if node is None:
            raise verify_error(spec, f"method '{method.name}' is not a member of the class")
        if method.name in identical and not same_code(node, method.node):
            raise verify_error(spec, f"method '{method.name}' (line {node.lineno}) differs from the patch")
        if not compatible(node, method.node):
            raise verify_error(
                spec, f"method '{method.name}' has signature {signature(node)}, expected {signature(method.node)}"
            )
    if spec.entry_class and not registered(tree, spec.entry_class, spec.class_name):
        raise verify_error(
            spec, f"the class is not registered in {spec.entry_class}: SGLang would not find the architecture"
        )


def registered(tree: ast.Module, entry: str, class_name: str) -> bool:
    found = False
    for stmt in module_statements(tree.body):
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else ([stmt.target] if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value else [])
        )
        if any(isinstance(t, ast.Name) and t.id == entry for t in targets):
            values = stmt.value.elts if isinstance(stmt.value, (ast.List, ast.Tuple)) else [stmt.value]
            found = any(isinstance(v, ast.Name) and v.id == class_name for v in values) or (
                isinstance(stmt, ast.AugAssign) and found
            )
    return found


# ---- ast helpers -----------------------------------------------------------------------------------


def parse(spec: PatchSpec, src: SourceFile, error: type[PatchError]) -> ast.Module:
    try:
        return src.parse(spec.file)
    except SyntaxError as exc:
        raise patch_error(
            error,
            spec,
            f"does not compile: {type(exc).__name__}: {exc.msg} (line {exc.lineno})"
            + (
                ": methods appended at module level (the `cat >>` mistake)?"
                if isinstance(exc, IndentationError)
                else ""
            ),
        ) from None


def the_class(spec: PatchSpec, tree: ast.Module, error: type[PatchError]) -> ast.ClassDef:
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == spec.class_name]
    if not found:
        raise patch_error(error, spec, "class not found at the top level of the file")
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for n in found)
        raise patch_error(error, spec, f"class defined {len(found)} times (lines {lines})")
    return found[0]


def no_module_level_defs(spec: PatchSpec, tree: ast.Module, error: type[PatchError] = PatchModuleLevelDef) -> None:
    names = set(spec.method_names)
    for stmt in module_statements(tree.body):
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in names:
            raise patch_error(
                error,
                spec,
                f"function '{stmt.name}' is defined at module level (line "
                f"{stmt.lineno}), outside the class: the `cat >>` mistake",
            )


def module_statements(body: list[ast.stmt]):
    """Module-level statements, including those inside top-level if/try/with blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or (
            hasattr(ast, "TryStar") and isinstance(stmt, ast.TryStar)
        ):
            for name in ("body", "orelse", "finalbody"):
                yield from module_statements(getattr(stmt, name, []))
            for handler in getattr(stmt, "handlers", []):
                yield from module_statements(handler.body)


def member(spec: PatchSpec, cls: ast.ClassDef, name: str, error: type[PatchError]):
    """The class body's one statement binding `name`, None if none; more than one, or not a method,
    is an error."""
    hits = [s for s in cls.body if name in bound_names(s)]
    if len(hits) > 1:
        lines = ", ".join(str(s.lineno) for s in hits)
        raise patch_error(error, spec, f"'{name}' is defined {len(hits)} times in the class (lines {lines})")
    if hits and not isinstance(hits[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise patch_error(error, spec,
                          f"'{name}' is already a class member that is not a method (line {hits[0].lineno})")
    return hits[0] if hits else None


def same_code(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a, include_attributes=False) == ast.dump(b, include_attributes=False)


KIND_DECORATORS = {"staticmethod", "classmethod", "property", "abstractmethod", "abc.abstractmethod"}


def method_kind(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple:
    decos = set()
    for d in node.decorator_list:
        text = ast.unparse(d)
        if text in KIND_DECORATORS or text.endswith((".setter", ".getter", ".deleter")):
            decos.add(text)
    return (type(node).__name__, frozenset(decos))


def compatible(existing: ast.FunctionDef | ast.AsyncFunctionDef, ours: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Every call the patch's method accepts, the existing one accepts the same way."""
    if method_kind(existing) != method_kind(ours):
        return False
    ea, oa = existing.args, ours.args
    e_pos, o_pos = [*ea.posonlyargs, *ea.args], [*oa.posonlyargs, *oa.args]
    e_req = len(e_pos) - len(ea.defaults)
    o_req = len(o_pos) - len(oa.defaults)
    for i, arg in enumerate(o_pos):
        if i >= len(e_pos):
            if ea.vararg is None:
                return False
            continue
        if e_pos[i].arg != arg.arg and i >= len(ea.posonlyargs):
            return False
        if i >= o_req and i < e_req:  # optional for our callers, required by the existing method
            return False
    if len(e_pos) > len(o_pos) and e_req > len(o_pos):
        return False
    if oa.vararg is not None and ea.vararg is None:
        return False
    e_kw = {a.arg: d is None for a, d in zip(ea.kwonlyargs, ea.kw_defaults, strict=True)}
    o_kw = {a.arg: d is None for a, d in zip(oa.kwonlyargs, oa.kw_defaults, strict=True)}
    for name, required in e_kw.items():
        if required and not o_kw.get(name, False):
            return False
    # (one of ours that is optional but required by the existing method failed the loop above)
    for name in o_kw:
        if name not in e_kw and ea.kwarg is None:
            return False
    return not (oa.kwarg is not None and ea.kwarg is None)


def signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"({ast.unparse(node.args)})"


def module_bindings(tree: ast.Module) -> set[str] | None:
    bound = {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__"}
    for stmt in module_statements(tree.body):
        if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
            return None
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in stmt.names)
        else:
            bound |= bound_names(stmt)
            for node in (
                ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ()
            ):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    bound.add(node.id)
    return bound


def free_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    loaded: set[str] = set()
    local: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else local).add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            local.add(node.name)
        elif isinstance(node, ast.alias):
            local.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            local.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:  # `case {**rest}` binds rest
            local.add(node.rest)
    return loaded - local


def patch_error(cls: type[PatchError], spec: PatchSpec, reason: str) -> PatchError:
    return cls(reason, patch=spec.id, file=spec.file, class_name=spec.class_name)


def verify_error(spec: PatchSpec, reason: str) -> PatchError:
    return patch_error(PatchVerifyError, spec, reason)
