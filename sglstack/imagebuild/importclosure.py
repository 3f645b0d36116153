"""The import closure of a serving image: what the in-image check imports (the serving path of the stack's
configuration) and how its report is judged (`inimage/incontainer/importcheck.py` does the work in the image).

The serving path of SGLang 0.5.x, as its own source has it: `python -m sglang.launch_server` imports
`sglang.srt.entrypoints.http_server`; the model class is looked up in `sglang/srt/models/*.py` by the
`EntryClass` that names the served architecture (the target's, and the draft's: `LlamaForCausalLMEagle3` is
`sglang.srt.models.llama_eagle3`); `--speculative-algorithm EAGLE`/`EAGLE3`/`NEXTN` runs an EAGLE worker
(`speculative/spec_info.py: create_worker`: `eagle_worker_v2`, `eagle_worker` in older releases); an attention
backend is the factory `attention_registry.py` registers under its name (`@register_attention_backend("fa3")`)
and the modules it imports. Which modules those are is found in the image, from the installed SGLang itself.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.schema import Stack
from ..config.settings import RuntimeImportsPolicy
from ..serving import ServingSpec, serving_spec
from ..serving.draftfiles import host_folder, read_model

ENTRY_MODULES = ("sglang.launch_server", "sglang.srt.entrypoints.http_server")
# SGLang's flags that choose an attention backend (server_args: --attention-backend and its prefill/decode split).
BACKEND_FLAGS = ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
                 "--speculative-attention-backend")


def flag_values(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    """The values of `flags` in `argv` (`--flag V` or `--flag=V`), in order."""
    out = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags:
            if eq:
                out.append(value)
            elif i + 1 < len(argv):
                out.append(argv[i + 1])
    return list(dict.fromkeys(out))


def served_architectures(stack: Stack, spec: ServingSpec) -> list[str]:
    """The stack's declared architectures, else those of the target's and the draft's config.json where their
    files are on this machine (the build's, through the serving mounts or the Hugging Face cache)."""
    if stack.runtime_imports.architectures:
        return list(stack.runtime_imports.architectures)
    found: list[str] = []
    models = [spec.model] + ([spec.speculative.draft_model] if spec.speculative else [])
    for model in models:
        files = read_model(host_folder(spec, model, container=True, env={}))
        names = files.config.get("architectures") if files else None
        # a list of class names; anything else names none (a string is not read letter by letter)
        found += [a for a in names if isinstance(a, str)] if isinstance(names, list) else []
    return list(dict.fromkeys(found))


def import_closure_args(stack: Stack) -> list[str]:
    """importcheck.py's arguments for the stack's serving path."""
    spec = serving_spec(stack)
    args = [f"--module={m}" for m in ENTRY_MODULES]
    args += [f"--architecture={a}" for a in served_architectures(stack, spec)]
    if spec.speculative is not None:
        args.append("--speculative")
    args += [f"--attention-backend={b}" for b in flag_values(spec.extra_args, BACKEND_FLAGS)]
    return args


def import_closure_option(stack: Stack) -> str:
    return f"--import-closure={json.dumps(import_closure_args(stack))}"


def site_relative(path: str, sites: Sequence[str]) -> str:
    for site in sites:
        if path.startswith(site.rstrip("/") + "/"):
            return path[len(site.rstrip("/")) + 1:]
    return path


def _exception_for(policy: RuntimeImportsPolicy, module: str, importer: str) -> int | None:
    for i, e in enumerate(policy.exceptions):
        if fnmatch.fnmatchcase(module, e.module) and (e.importer is None or fnmatch.fnmatchcase(importer, e.importer)):
            return i
    return None


def judge_imports(report: Mapping[str, Any] | None, policy: RuntimeImportsPolicy) -> dict[str, Any]:
    """The import closure's verdict: errors (the serving path), warnings (elsewhere), what the stack's
    exceptions waive (with their reasons) and the exceptions that match nothing (stale)."""
    if report is None:
        return {"errors": [], "warnings": [], "waived": {}, "stale": []}
    if report.get("error"):
        return {"errors": [f"import closure: the check did not run: {report['error']}"], "warnings": [],
                "waived": {}, "stale": []}
    sites = report.get("sites") or []
    errors: list[str] = []
    warnings: list[str] = []
    waived: dict[str, str] = {}
    used: set[int] = set()
    for result in report.get("modules") or []:
        if result.get("ok"):
            continue
        missing, importer = result.get("missing"), site_relative(str(result.get("importer") or "?"), sites)
        if missing:
            exc = _exception_for(policy, str(missing).split(".")[0], importer)
            if exc is not None:
                used.add(exc)
                waived[f"{missing} ({importer})"] = policy.exceptions[exc].reason
                continue
            errors.append(f"import closure: importing {result['module']} (serving path) fails: module '{missing}', "
                          f"imported by {importer}, is provided by no installed distribution")
        else:  # an import that needs what a build has not (a GPU, a driver): said, not judged
            warnings.append(f"importing {result['module']} (serving path) without a GPU: {result.get('error')} "
                            f"(in {importer})")
    for found in sorted(report.get("unprovided") or [], key=lambda u: (not u.get("serving"), u["importer"],
                                                                       u.get("line", 0), u["module"])):
        importer = site_relative(found["importer"], sites)
        where = f"{importer}:{found.get('line')}"
        exc = _exception_for(policy, found["module"], importer)
        if exc is not None:
            used.add(exc)
            waived[f"{found['module']} ({where})"] = policy.exceptions[exc].reason
        elif found.get("serving") and not found.get("conditional"):
            errors.append(f"import closure: module '{found['module']}', imported by {where} (serving path), is "
                          "provided by no installed distribution")
        else:
            # Under an `if` (a GPU's or another platform's branch, a feature flag), or off the serving path.
            where += " (serving path, under a condition)" if found.get("serving") else ""
            warnings.append(f"module '{found['module']}', imported by {where}, is provided by no installed "
                            "distribution")
    for name in report.get("unknown_architectures") or []:
        warnings.append(f"architecture {name}: no SGLang model file's EntryClass names it (its module was not "
                        "imported)")
    for name in report.get("unknown_attention_backends") or []:
        warnings.append(f"attention backend {name}: SGLang's attention_registry registers no such backend")
    stale = [f"runtime_imports exception '{e.module}' matches no import: remove it"
             for i, e in enumerate(policy.exceptions) if i not in used]
    return {"errors": errors, "warnings": warnings, "waived": waived, "stale": stale}


def import_closure_record(report: Mapping[str, Any] | None, verdict: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the verify record keeps of the check: the modules imported, the verdict, the sizes; not the raw list."""
    if report is None:
        return None
    return {"modules": report.get("modules"), "architectures": report.get("architectures"),
            "serving_files": report.get("serving_files"), "scanned_files": report.get("scanned_files"),
            "seconds": report.get("seconds"), "seconds_imports": report.get("seconds_imports"),
            "seconds_scan": report.get("seconds_scan"), "facts": report.get("facts"), "error": report.get("error"),
            **verdict}
