"""Run inside a bare interpreter: does SGLang's own server argument parser accept an argv? (stdlib only)

    python -I -S argv_probe.py SGLANG_ROOT LIB_DIR ABSENT ARG...

SGLANG_ROOT is an unpacked SGLang wheel; LIB_DIR holds the real wheels of the few packages the parser is
built with (`packaging`, whose version comparisons pick code paths at import time; `msgspec`, whose structs
hold 0.5.2x's ServerArgs fields). `sglang.srt.server_args` imports torch, triton, transformers and more at
module level, and none of them shapes the parser: every other package that is not the standard library is
stood in for by an inert stub module, so the parser that runs is SGLang's own (`ServerArgs.add_cli_args`),
its flags, choices and types exactly as the release defines them, without a GPU and without installing
SGLang's 200 dependencies. The import names in ABSENT (comma-separated: the optional back ends nobody
installs on a CUDA server, torch_npu, habana_frameworks...) stay missing, so
SGLang's own "is this installed?" probes answer as they do on one. Prints one JSON object on stdout:
{"flags": [every option string], "unknown": [argv flags the parser lacks], "errors": [argparse's complaints],
"deprecated": {flag: the replacement its action names}}.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import importlib.abc
import importlib.machinery
import json
import sys
import types

# The special names Python itself looks up (protocols, introspection): a stub must not claim to have them.
# Any other dunder (`PretrainedConfig.__class_validators__`) is library API and answers a stub.
_PROTOCOL = frozenset({
    "__mro_entries__", "__set_name__", "__get__", "__set__", "__delete__", "__wrapped__", "__signature__",
    "__text_signature__", "__fspath__", "__length_hint__", "__index__", "__class_getitem__", "__annotations__",
    "__dataclass_fields__", "__origin__", "__args__", "__parameters__", "__isabstractmethod__", "__qualname__",
    "__module__", "__path__", "__file__", "__spec__", "__loader__", "__all__", "__func__", "__self__",
    "__get_pydantic_core_schema__", "__await__", "__aiter__", "__aenter__", "__copy__", "__deepcopy__",
    "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__orig_bases__", "__slots__",
})


def _special(attr: str) -> bool:
    return attr in _PROTOCOL


class _StubMeta(abc.ABCMeta):  # ABCMeta: SGLang mixes stubbed bases with ABC
    def __getattr__(cls, attr: str):
        if _special(attr):
            raise AttributeError(attr)
        return _Stub(f"{cls.__name__}.{attr}")


class _StubBase(metaclass=_StubMeta):
    """What a class deriving from a stubbed one derives from instead (a TypedDict's total=False, too)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__()

    def __init__(self, *args, **kwargs) -> None:
        # Record-like bases (msgspec.Struct, pydantic's BaseModel, NamedTuple) keep their fields: SGLang
        # reads them back at import time (its kernel registry keys on `spec.op`).
        fields = [n for klass in reversed(type(self).__mro__) for n in vars(klass).get("__annotations__", {})]
        for name, value in (*zip(fields, args, strict=False), *kwargs.items()):
            object.__setattr__(self, name, value)


class _Stub(str):
    """Anything: callable, indexable, iterable (empty), a base class, a decorator, a context manager, and a
    string (module-level code passes such values to getattr and os.environ.get)."""

    _name: str

    def __new__(cls, name: str = "stub") -> _Stub:
        self = super().__new__(cls, "stub")
        self._name = name
        return self

    def __getattr__(self, attr: str) -> _Stub:
        if _special(attr):
            raise AttributeError(attr)
        return _Stub(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        # `@decorator` on a function keeps the function: SGLang's own code stays callable.
        if len(args) == 1 and not kwargs and isinstance(args[0], types.FunctionType):
            return args[0]
        return _Stub(f"{self._name}()")

    def __mro_entries__(self, bases):
        return (_StubBase,)

    def __getitem__(self, key) -> _Stub:
        return _Stub(f"{self._name}[]")

    def __setitem__(self, key, value) -> None:
        pass

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> _Stub:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def __or__(self, other):
        return self

    __ror__ = __or__

    def __eq__(self, other) -> bool:
        return other is self

    def __lt__(self, other) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __hash__(self) -> int:
        return id(self)

    def __int__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.0

    def __index__(self) -> int:
        return 0



# Device back ends a CUDA build of torch does not have (torch_npu, habana and MUSA add them): SGLang asks
# `hasattr(torch, "npu")` and raises when it is there but unavailable.
_ABSENT = frozenset({"npu", "hpu", "musa"})


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str):
        if _special(attr) or attr in _ABSENT:
            raise AttributeError(attr)
        return _Stub(f"{self.__name__}.{attr}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: what no real finder found becomes a stub, unless it is to stay absent."""

    def __init__(self, absent: frozenset[str]) -> None:
        self.absent = absent

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.absent or fullname.split(".")[0] == "sglang":
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        # Version gates at import time take their newest branch, the one a current install takes.
        module.__version__ = "99.0.0"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module) -> None:
        pass


def main(argv: list[str]) -> int:
    root, lib, absent, args = argv[0], argv[1], argv[2], argv[3:]
    sys.path[:0] = [root, lib]
    sys.meta_path.append(_StubFinder(frozenset(absent.split(","))))
    from sglang.srt.server_args import ServerArgs  # after the stubs: that is the point of this probe

    errors: list[str] = []

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # argparse would exit; the caller wants every complaint
            errors.append(message)
            raise SystemExit(2)

    parser = Parser(prog="sglang.launch_server", add_help=False)
    ServerArgs.add_cli_args(parser)
    flags = sorted(parser._option_string_actions)  # argparse keeps no public list of its option strings
    unknown = sorted({a.split("=", 1)[0] for a in args if a.startswith("--")} - set(flags))
    with contextlib.suppress(SystemExit):  # Parser.error recorded the complaint
        parser.parse_known_args(args)
    # A retired flag SGLang still parses (its Deprecated*Action), with what it says to use instead.
    deprecated = {flag: str(getattr(action, "new_flag", None) or getattr(action, "error_message", None) or "")
                  for flag, action in parser._option_string_actions.items()
                  if type(action).__name__.startswith("Deprecated")}
    print(json.dumps({"flags": flags, "unknown": unknown, "errors": errors, "deprecated": deprecated}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
