"""The serving argv check, in process: the shell around the probe (with a stand-in for the child
interpreter) and the probe itself on a small stand-in of SGLang's server_args (no wheel, no network)."""

from __future__ import annotations

import json
import os
import sys
import types
import zipfile
from pathlib import Path
from subprocess import TimeoutExpired
from sys import executable
from typing import Any

import pytest

from sglstack.upgrade import argv as argv_check
from sglstack.upgrade import argv_probe as probe

ABSENT = "torch_npu,habana_frameworks,intel_extension_for_pytorch,torch_musa,mindspore"


def _wheel(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


class _Child:
    """Stands in for the interpreter the probe runs in: records the call, answers as told."""

    def __init__(self, returncode: int = 0, stdout: str = "", stderr: str = "", timeout: bool = False) -> None:
        self.answer = types.SimpleNamespace(returncode=returncode, stdout=stdout, stderr=stderr)
        self.timeout = timeout
        self.calls: list[dict[str, Any]] = []
        self.TimeoutExpired = TimeoutExpired

    def run(self, cmd: list[str], **kw: Any) -> types.SimpleNamespace:
        tmp = Path(kw["cwd"])
        files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file())
        self.calls.append({"cmd": cmd, "files": files, "tmp": str(tmp), **kw})
        if self.timeout:
            raise TimeoutExpired(cmd, kw["timeout"])
        return self.answer


@pytest.fixture()
def wheels(tmp_path: Path) -> dict[str, Path]:
    return {
        "sglang": _wheel(tmp_path / "sglang.whl", {"sglang/srt/server_args.py": "x = 1\n", "sglang/lib.so": "bin",
                                                     "sglang-1.dist-info/METADATA": "Name: sglang\n"}),
        "packaging": _wheel(tmp_path / "packaging.whl", {"packaging/__init__.py": "", "packaging/py.typed": ""}),
        "msgspec": _wheel(tmp_path / "msgspec.whl", {"msgspec/__init__.py": "", "msgspec/_core.so": "bin"}),
    }


def _check(monkeypatch, wheels, child: _Child, argv: list[str], fetch=None) -> dict[str, Any]:
    monkeypatch.setattr(argv_check, "subprocess", child)
    monkeypatch.chdir(wheels["sglang"].parent)  # whatever lands in the working folder lands in the test's own
    fetched: list[tuple[str, str]] = []

    def fetch_double(name: str, version: str) -> Path:
        fetched.append((name, version))
        return wheels[name]

    versions = {"packaging": "26.0", "msgspec": "0.19.0"}
    out = argv_check.check_argv(wheels["sglang"], argv, versions.__getitem__, fetch=fetch or fetch_double)
    if fetch is None:
        assert fetched == [("packaging", "26.0"), ("msgspec", "0.19.0")]
    return out


def test_the_probe_runs_isolated_on_the_unpacked_wheels(monkeypatch, wheels) -> None:
    line = json.dumps({"flags": ["--model-path", "--tp-size"], "unknown": [], "errors": []})
    child = _Child(stdout=f"a warning on stdout\n{{}}\n{line}\n", stderr="noise\n")  # the last line counts
    out = _check(monkeypatch, wheels, child, ["--model-path", "m", "--tp-size", "8"])
    assert out == {"checked": True, "argv": ["--model-path", "m", "--tp-size", "8"], "accepted": True,
                   "unknown": {}, "errors": [], "flags": 2}
    (call,) = child.calls
    tmp = call["tmp"]
    assert Path(tmp).name.startswith("sglstack-argv-") and not Path(tmp).exists()  # removed afterwards
    assert call["cmd"][:4] == [executable, "-I", "-S", str(probe.__file__)]
    assert call["cmd"][4:] == [f"{tmp}/sglang", f"{tmp}/lib", ABSENT, "--model-path", "m", "--tp-size", "8"]
    assert Path(call["cmd"][3]).name == "argv_probe.py" and Path(call["cmd"][3]) == argv_check.PROBE
    # SGLang's Python source alone; the real packages whole
    assert call["files"] == ["lib/msgspec/__init__.py", "lib/msgspec/_core.so", "lib/packaging/__init__.py",
                             "lib/packaging/py.typed", "sglang/sglang/srt/server_args.py"]
    assert {k: v for k, v in call.items() if k not in ("cmd", "files", "tmp")} == {
        "capture_output": True, "text": True, "env": {"PATH": os.defpath, "HOME": tmp, "LANG": "C.UTF-8",
                                                      "TMPDIR": tmp},
        "cwd": tmp, "timeout": 120, "check": False}


@pytest.mark.parametrize(("child", "why"), [
    (_Child(returncode=1, stderr="Traceback\nImportError: no module x\n"), "ImportError: no module x"),
    (_Child(returncode=1, stdout='{"flags": []}\n'), "no output"),
    (_Child(returncode=0, stdout="\n", stderr="killed\n"), "killed"),
])
def test_a_probe_that_fails_says_its_last_line(monkeypatch, wheels, child, why) -> None:
    assert _check(monkeypatch, wheels, child, ["--x"]) == {
        "checked": False, "argv": ["--x"], "skipped": f"sglang's parser could not be loaded: {why}"}


def test_a_probe_that_hangs_is_skipped(monkeypatch, wheels) -> None:
    assert _check(monkeypatch, wheels, _Child(timeout=True), ["--x"]) == {
        "checked": False, "argv": ["--x"], "skipped": "the parser did not load in 120 s"}
    assert argv_check.PROBE_TIMEOUT_S == 120


@pytest.mark.parametrize("error", [OSError("disk full"), zipfile.BadZipFile("Bad CRC-32 for file 'x'")])
def test_wheels_that_cannot_be_unpacked_are_skipped(monkeypatch, wheels, error) -> None:
    def fetch(name: str, version: str) -> Path:
        raise error

    child = _Child()
    assert _check(monkeypatch, wheels, child, ["--x"], fetch=fetch) == {
        "checked": False, "argv": ["--x"], "skipped": f"cannot unpack the wheels: {error}"}
    assert child.calls == []


def test_judge_probe_whole() -> None:
    out = argv_check.judge_probe({"flags": ["--tp-size", "--model-path", "--dsa-decode-backend"],
                                  "unknown": ["--nsa-decode-backend", "--zzz"], "errors": ["bad value"]},
                                 ("--zzz", "1"))
    assert out == {"checked": True, "argv": ["--zzz", "1"], "accepted": False,
                   "unknown": {"--nsa-decode-backend": "--dsa-decode-backend", "--zzz": None},
                   "errors": ["bad value"], "flags": 3}
    assert argv_check.judge_probe({}, []) == {"checked": True, "argv": [], "accepted": True, "unknown": {},
                                              "errors": [], "flags": 0}
    assert argv_check.judge_probe({"errors": ["e"]}, [])["accepted"] is False
    # the closest match, not merely the first; a match as close as the cutoff (0.75) counts, one below not
    near = argv_check.judge_probe({"flags": ["--abcdzzzz", "--abcdefgh"], "unknown": ["--abcdefgz"]}, [])
    assert near["unknown"] == {"--abcdefgz": "--abcdefgh"}
    at = argv_check.judge_probe({"flags": ["--abcdzw"], "unknown": ["--abcdxy"]}, [])  # ratio 0.75
    assert at["unknown"] == {"--abcdxy": "--abcdzw"}
    far = argv_check.judge_probe({"flags": ["--abcdexyz"], "unknown": ["--abcdefgh"]}, [])  # ratio 0.7
    assert far["unknown"] == {"--abcdefgh": None}


# ---- the probe, in this interpreter ------------------------------------------------------------------

SERVER_ARGS = '''\
import argparse

import fakestub_torch
from fakestub_torch import nn
from fakestub_transformers import PretrainedConfig
import reallib

try:
    import fakeabsent_npu  # noqa: F401
    NPU = True
except ImportError:
    NPU = False


class Config(PretrainedConfig, total=False):
    x: int
    y: str


CONFIG = Config(1, y="from-a-stub-base")
PARSERS = []


class DeprecatedAliasStoreAction(argparse.Action):  # SGLang's retired-flag actions carry their new flag
    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


class DeprecatedRemovedAction(argparse.Action):  # a removed flag: only a message, no new flag to name
    def __init__(self, option_strings, dest, error_message=None, **kwargs):
        self.error_message = error_message
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        pass


class DeprecatedQuietAction(argparse.Action):  # neither a new flag nor a message
    def __call__(self, parser, namespace, values, option_string=None):
        pass


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        PARSERS.append(parser)
        parser.add_argument("--model-path", "--model", required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
        if NPU:
            parser.add_argument("--npu-device")
        if fakestub_torch.__version__ == "99.0.0":
            parser.add_argument("--newest-torch", action="store_true")
        if not hasattr(fakestub_torch, "npu") and hasattr(fakestub_torch, "cuda"):
            parser.add_argument("--cuda-only", action="store_true")
        parser.add_argument(f"--{reallib.NAME}", default=CONFIG.y)
        parser.add_argument("--nn", default=str(nn.Module.__name__))
        parser.add_argument("--old-backend", action=DeprecatedAliasStoreAction, new_flag="--backend")
        parser.add_argument("--removed-flag", action=DeprecatedRemovedAction, error_message="gone: use --x")
        parser.add_argument("--quiet-old", action=DeprecatedQuietAction)
'''


@pytest.fixture()
def probe_env(tmp_path, monkeypatch):
    """A stand-in SGLang root and lib folder; sys.path, sys.meta_path and the modules the probe imports
    restored afterwards."""
    (tmp_path / "root" / "sglang" / "srt").mkdir(parents=True)
    (tmp_path / "root" / "sglang" / "srt" / "server_args.py").write_text(SERVER_ARGS)
    (tmp_path / "lib" / "reallib").mkdir(parents=True)
    (tmp_path / "lib" / "reallib" / "__init__.py").write_text('NAME = "real-lib"\n')
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _probe(probe_env: Path, capsys, *args: str) -> dict[str, Any]:
    assert probe.main([str(probe_env / "root"), str(probe_env / "lib"), "fakeabsent_npu,fakeabsent_hpu",
                       *args]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    return json.loads(out)


FLAGS = ["--cuda-only", "--model", "--model-path", "--newest-torch", "--nn", "--old-backend", "--quiet-old",
         "--real-lib", "--removed-flag", "--tensor-parallel-size", "--tp-size"]
# what each retired flag's action says to use instead: its new flag, else its message, else nothing
DEPRECATED = {"--old-backend": "--backend", "--removed-flag": "gone: use --x", "--quiet-old": ""}


def test_the_probe_runs_the_release_parser_on_stubs(probe_env, capsys) -> None:
    path = list(sys.path)
    out = _probe(probe_env, capsys, "--model-path", "m", "--tp-size", "8", "--gone=1=2", "--gone", "2", "--old", "x")
    assert out == {"flags": FLAGS, "unknown": ["--gone", "--old"], "errors": [], "deprecated": DEPRECATED}
    assert sys.path == [str(probe_env / "root"), str(probe_env / "lib"), *path]
    assert isinstance(sys.meta_path[-1], probe._StubFinder)
    (parser,) = sys.modules["sglang.srt.server_args"].PARSERS
    assert (parser.prog, parser.add_help) == ("sglang.launch_server", False)
    assert parser.parse_known_args(["--model-path", "m"])[0].real_lib == "from-a-stub-base"
    assert parser.parse_known_args(["--model-path", "m"])[0].nn == "stub"


def test_the_probe_collects_every_complaint_instead_of_exiting(probe_env, capsys) -> None:
    out = _probe(probe_env, capsys, "--tp-size", "eight")
    assert out == {"flags": FLAGS, "unknown": [], "deprecated": DEPRECATED,
                   "errors": ["argument --tp-size/--tensor-parallel-size: invalid int value: 'eight'"]}
    missing = _probe(probe_env, capsys)
    assert missing["errors"] == ["the following arguments are required: --model-path/--model"]


def test_a_stub_is_anything() -> None:
    s = probe._Stub("torch")
    assert str(s) == "stub" and s._name == "torch" and probe._Stub()._name == "stub"
    assert s.cuda.is_available()._name == "torch.cuda.is_available()"
    assert s["k"]._name == "torch[]"
    s["k"] = 1
    assert list(s) == [] and len(s) == 0 and not s and bool(s) is False
    with s as entered:
        assert entered is s
    assert (s | 1) is s and (1 | s) is s
    assert s == s and not s == probe._Stub("torch") and not s == "stub"  # noqa: SIM201
    assert not (s < 1) and not (s <= 1) and not (s > 1) and not (s >= 1)
    assert hash(s) == id(s) and int(s) == 0 and float(s) == 0.0 and [10, 11][s] == 10
    assert s.__exit__(None, None, None) is None

    def kernel() -> int:
        return 1

    assert s.register(kernel) is kernel  # a decorator keeps the function
    assert s.register(kernel, 1)._name == "torch.register()" and s(x=kernel)._name == "torch()"
    assert s(len)._name == "torch()"  # a builtin is not SGLang's own code
    for attr in ("__fspath__", "__wrapped__", "__signature__", "__path__", "__origin__"):
        with pytest.raises(AttributeError) as err:
            getattr(s, attr)
        assert err.value.args == (attr,)
    assert s.__class_validators__._name == "torch.__class_validators__"  # library API, not protocol


def test_a_class_deriving_from_a_stub_is_a_record() -> None:
    base = probe._Stub("pydantic.BaseModel")

    class Model(base, total=False):  # type: ignore[misc,valid-type,call-arg]
        a: int
        b: str

    class Child(Model):
        c: float

    assert Model.__mro__[1:3] == (probe._StubBase, object)
    child = Child(1, "two", c=3.0, d=4)
    assert (child.a, child.b, child.c, child.d) == (1, "two", 3.0, 4)
    partial = Child(1)
    assert partial.a == 1 and not hasattr(partial, "b")
    assert Model.anything._name == "Model.anything"
    with pytest.raises(AttributeError) as err:
        Model.__signature__  # noqa: B018
    assert err.value.args == ("__signature__",)


def test_a_stub_module_and_its_finder() -> None:
    finder = probe._StubFinder(frozenset({"torch_npu"}))
    assert finder.find_spec("torch_npu") is None and finder.find_spec("torch_npu.core") is None
    assert finder.find_spec("sglang") is None and finder.find_spec("sglang.srt.x") is None
    spec = finder.find_spec("torch.cuda")
    assert (spec.name, spec.loader, spec.submodule_search_locations) == ("torch.cuda", finder, [])
    module = finder.create_module(spec)
    assert isinstance(module, probe._StubModule) and module.__name__ == "torch.cuda"
    assert module.__path__ == [] and module.__version__ == "99.0.0"
    assert finder.exec_module(module) is None and module.__version__ == "99.0.0"
    assert module.Stream._name == "torch.cuda.Stream"
    for attr in ("npu", "hpu", "musa", "__all__", "__file__"):
        with pytest.raises(AttributeError) as err:
            getattr(module, attr)
        assert err.value.args == (attr,)
    assert probe._special("__qualname__") and not probe._special("__version__")
