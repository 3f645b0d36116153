"""One rule, one home: each rule below has one function, and a walk of the code finds no second copy."""

from __future__ import annotations

import ast
from pathlib import Path

import docker.errors
import pytest
from engine_double import Engine, Image
from parsed import parse, parsed_once_a_module  # noqa: F401  (its fixture: autouse)

from sglstack.adapters.docker import LocalImage, PullFailed, present_or_pulled
from sglstack.config.imageref import image_label, image_name, registry_digest
from sglstack.core.errors import MESSAGE_CUT, first_line, last_line

PACKAGE = Path(__file__).resolve().parents[2] / "sglstack"
# In-image code uses the standard library only: it keeps its own copies (it runs where sglstack is not).
IN_IMAGE = (PACKAGE / "inimage",)


def _ours() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py"))
            if not any(p.is_relative_to(x) for x in IN_IMAGE) and "data" not in p.relative_to(PACKAGE).parts]


# ---- an outside message in an error line: its first line, at most MESSAGE_CUT characters ---------------

@pytest.mark.parametrize(("text", "first", "last"), [
    ("", "", "no output"),
    ("\n\n", "", "no output"),
    ("one", "one", "one"),
    ("boom\nTraceback (most recent call last):\n  File x\n", "boom", "File x"),
    ("progress 1/2\n  error: pull access denied  \n\n", "progress 1/2", "error: pull access denied"),
    ("x" * 400 + "\nnext", "x" * MESSAGE_CUT, "next"),
])
def test_the_first_and_the_last_line_of_an_outside_message(text, first, last):
    assert (first_line(text), last_line(text)) == (first, last)


def _line_cuts(source: str) -> list[int]:
    """Lines that take the first or last line of `splitlines()` themselves (`x.splitlines()[0]`,
    `(x.splitlines() or [...])[-1]`)."""
    out = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Subscript) and ast.unparse(node.slice) in ("0", "-1"):
            value = node.value.values[0] if isinstance(node.value, ast.BoolOp) else node.value
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                    and value.func.attr == "splitlines":
                out.append(node.lineno)
    return out


def test_an_outside_message_is_cut_only_by_first_line_or_last_line():
    home = PACKAGE / "core" / "errors.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _line_cuts(p.read_text(encoding="utf-8"))}
    assert found == set(), "use sglstack.core.errors.first_line / last_line"


def test_the_line_cut_finder_sees_each_spelling():
    source = "a = s.splitlines()[0][:300]\nb = (s.splitlines() or [''])[-1]\nc = s.splitlines()[1]\nd = s.split()[0]\n"
    assert sorted(_line_cuts(source)) == [1, 2]


# ---- how an image is named: its registry digest, else its image id -----------------------------------

DIGEST, IMAGE_ID = "sha256:" + "d" * 64, "sha256:" + "1" * 64


@pytest.mark.parametrize(("digest", "image_id", "name"), [
    (DIGEST, IMAGE_ID, DIGEST), (None, IMAGE_ID, IMAGE_ID), ("", IMAGE_ID, IMAGE_ID), (None, None, None),
    ("", "", None),
])
def test_an_image_is_named_by_its_registry_digest_else_its_image_id(digest, image_id, name):
    assert image_name(digest, image_id) == name


@pytest.mark.parametrize(("digest", "image_id", "ref", "label"), [
    (DIGEST, IMAGE_ID, "a:1", DIGEST), ("", IMAGE_ID, "a:1", f"a:1 (image id {IMAGE_ID})"),
    (None, IMAGE_ID, None, f"id {IMAGE_ID}"), ("", "", "a:1", "a:1"), (None, None, None, None),
])
def test_a_person_is_shown_an_image_by_the_same_rule(digest, image_id, ref, label):
    assert image_label(digest, image_id, ref) == label


OTHER = "sha256:" + "e" * 64


@pytest.mark.parametrize(("ref", "repo_digests", "digest"), [
    ("reg:5000/a/b:1", [f"other/x@{OTHER}", f"reg:5000/a/b@{DIGEST}"], DIGEST),  # its own repository's, not the first
    ("reg:5000/a/b:1", [f"other/x@{OTHER}"], None),  # known only under another repository: not its digest
    ("reg:5000/a/b:1", [f"reg:5000/a/c@{OTHER}", f"reg:5000/a/b@{DIGEST}"], DIGEST),
    (f"reg:5000/a/b@{DIGEST}", [f"reg:5000/a/b@{OTHER}"], DIGEST),  # a digest ref is its own digest
    ("reg:5000/a/b:1", [], None),  # a local build
    (IMAGE_ID, [f"reg:5000/a/b@{DIGEST}"], None),  # an image id names no repository
])
def test_the_registry_digest_of_an_image_is_its_own_repositorys(ref, repo_digests, digest):
    assert registry_digest(ref, repo_digests) == digest


def _names_an_image(source: str) -> list[int]:
    """Lines that spell the rule themselves: `digest or image_id`, `x.get("digest") or x.get("id")`, a digest
    else a ref (`x.get("digest") or x.get("ref")`), a digest else an image id in a condition (`D if digest
    ... else f"id {image_id}"`, `digest or (f"... {image_id}" if image_id else ref)`)."""
    out = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) >= 2:
            first, second = node.values[0], node.values[1]
            a, b = ast.unparse(first), ast.unparse(second)
            if a.startswith(("image_name(", "image_label(")):
                continue  # the rule's own answer, with a fallback after it
            if isinstance(second, ast.IfExp) and "digest" in a and "image_id" in b:
                out.append(node.lineno)
            if not isinstance(second, ast.Attribute | ast.Call | ast.Name):
                continue  # a condition (`not x.image_id`) or a sentence that shows both
            if "digest" in a and (b.endswith("image_id") or b.endswith((".get('id')", ".get('ref')"))):
                out.append(node.lineno)
        elif isinstance(node, ast.IfExp) and "digest" in ast.unparse(node.test) \
                and ("image_id" in ast.unparse(node.orelse) or ".get('id')" in ast.unparse(node.orelse)):
            out.append(node.lineno)
    return out


def test_an_image_is_named_only_by_image_name():
    home = PACKAGE / "config" / "imageref.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _names_an_image(p.read_text(encoding="utf-8"))}
    assert found == set(), "use sglstack.config.imageref.image_name"


def test_the_image_name_finder_sees_each_spelling():
    source = ("a = r.digest or r.image_id or r.image\nb = i.get('digest') or i.get('id')\n"
              "c = r.digest or not r.image_id\nd = r.digest or r.tag\ne = i.get('digest') or i.get('ref')\n"
              "f = s(r.digest) if r.digest or not r.image_id else f'id {r.image_id}'\n"
              "g = p.digest or (f'{p.image} (image id {p.image_id})' if p.image_id else p.image)\n"
              "h = image_name(i.get('digest'), i.get('id')) or i.get('ref')\n")
    assert sorted(_names_an_image(source)) == [1, 2, 5, 6, 7]


# ---- an image found or pulled, then identified: through the Docker adapter -----------------------------

CREATED = "2026-01-02T03:04:05.123456789Z"
REF = "reg:5000/a/b:1"
PULLED = LocalImage(IMAGE_ID, (f"reg:5000/a/b@{DIGEST}",), CREATED)


def test_an_image_the_engine_has_is_not_pulled_and_one_it_lacks_is():
    here = Engine(local={REF: Image(IMAGE_ID, [f"reg:5000/a/b@{DIGEST}"], created=CREATED)})
    said: list[str] = []
    assert present_or_pulled(here, REF, before_pull=lambda: said.append("pulling")) == PULLED  # type: ignore[arg-type]
    assert (here.pulled, said) == ([], [])
    there = Engine(registry={REF: Image(IMAGE_ID, [f"reg:5000/a/b@{DIGEST}"], created=CREATED)})
    assert present_or_pulled(there, REF, before_pull=lambda: said.append("pulling")) == PULLED  # type: ignore[arg-type]
    assert (there.pulled, said) == ([REF], ["pulling"])


def test_a_pull_that_fails_or_brings_nothing_is_one_line():
    refused = Engine(pull_error=docker.errors.APIError("500", explanation="pull access denied\nmore" + "x" * 400))
    with pytest.raises(PullFailed) as err:
        present_or_pulled(refused, REF)  # type: ignore[arg-type]
    assert (str(err.value), err.value.vanished) == ("pull access denied", False)
    with pytest.raises(PullFailed) as err:
        present_or_pulled(Engine(), REF)  # type: ignore[arg-type]
    assert (str(err.value), err.value.vanished) == ("not on the engine after the pull", True)


def _pulls(source: str) -> list[int]:
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "pull"
            and ast.unparse(node.func.value).endswith("images")]


def test_only_the_docker_adapter_pulls_an_image():
    home = PACKAGE / "adapters" / "docker.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home for line in _pulls(p.read_text())}
    assert found == set(), "pull through sglstack.adapters.docker.present_or_pulled"


def test_the_pull_finder_sees_a_pull():
    assert _pulls("client.images.pull(ref)\nengine.images.pull('r', tag='2')\ngit.pull()\n") == [1, 2]


def _image_gets(source: str) -> list[int]:
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and ast.unparse(node.func.value).endswith(".images")]


def test_only_the_docker_adapter_asks_the_engine_for_an_image():
    home = PACKAGE / "adapters" / "docker.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home for line in _image_gets(p.read_text())}
    assert found == set(), "ask through sglstack.adapters.docker.engine_image (or local_image)"
    assert _image_gets("client.images.get(ref)\nself.engine.images.get(r).id\nimages.get(x)\nd.get('images')\n") \
        == [1, 2]


# ---- one Jinja environment ---------------------------------------------------------------------------

def test_every_template_renders_in_the_one_jinja_environment():
    from sglstack.render import templates

    home = PACKAGE / "render" / "templates.py"
    made = {f"{p.relative_to(PACKAGE)}:{node.lineno}" for p in _ours() if p != home
            for node in ast.walk(parse(p.read_text())) if isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("jinja2.Environment", "Environment", "jinja2.Template", "Template")}
    assert made == set(), "render through sglstack.render.templates"
    env, yaml_env = templates.environment(), templates.yaml_environment()
    assert yaml_env.filters is env.filters or dict(yaml_env.filters) == dict(env.filters)
    assert (env.trim_blocks, yaml_env.trim_blocks, yaml_env.undefined) == (False, True, env.undefined)


# ---- the build's BuildKit secrets: the plan shows what the build hands over ---------------------------

def test_the_dry_run_plan_names_the_build_secrets_as_the_build_reads_them(tmp_path, monkeypatch):
    """The plan read --ca-bundle itself (unexpanded, unchecked): it showed `src=~/ca.pem`, which no build used."""
    from sglstack.config.matrix import load_matrix
    from sglstack.core.errors import BuildInputError
    from sglstack.imagebuild.flow import describe_build
    from sglstack.imagebuild.plan import BuildSettings
    from sglstack.lock.trust import lock_for_build

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SGLSTACK_CA_BUNDLE", raising=False)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    stacks = PACKAGE.parent / "stacks.yaml"
    stack = load_matrix(stacks).get("cu130")
    lock = lock_for_build(str(stacks), stack)
    lines, _ = describe_build(stack, BuildSettings(ca_bundle="~/ca.pem", lock=lock))
    build = next(line for line in lines if line.startswith("build:"))
    assert f"id=ca_bundle,src={tmp_path / 'ca.pem'}" in build.split()
    with pytest.raises(BuildInputError) as err:
        describe_build(stack, BuildSettings(ca_bundle=str(tmp_path / "none.pem"), lock=lock))
    assert str(err.value) == (f"CA bundle '{tmp_path / 'none.pem'}' (from --ca-bundle or SGLSTACK_CA_BUNDLE) is "
                              "not a file")


# ---- one build-root layout -----------------------------------------------------------------------------

_BUILD_ROOTS = ("build_root()", "build_root", "root", "build_dir)", "build_dir", "build")


def _layout_spelled(source: str) -> list[int]:
    """Lines that spell a stack folder or the build record's name themselves: `build_root() / stack.name`,
    `root / stack_name`, "record.json"."""
    out = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = ast.unparse(node.left), ast.unparse(node.right)
            tail = left.split(".")[-1]
            if (tail in _BUILD_ROOTS or tail.endswith("(build_dir)")) and "stack" in right:
                out.append(node.lineno)
        elif isinstance(node, ast.Constant) and node.value == "record.json":
            out.append(node.lineno)
    return out


def test_the_build_root_layout_is_spelled_only_in_core_records():
    from sglstack.core.records import RECORD_FILE, stack_dir

    home = PACKAGE / "core" / "records.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _layout_spelled(p.read_text(encoding="utf-8"))}
    assert found == set(), "name the folder with sglstack.core.records.stack_dir (and RECORD_FILE)"
    assert (stack_dir("cu130", Path("/b")), RECORD_FILE) == (Path("/b/cu130"), "record.json")
    # a further platform of a stack of several builds in its own folder, NAME.OS-ARCH
    assert stack_dir("g", Path("/b"), platform="linux/arm64") == Path("/b/g.linux-arm64")


def test_the_layout_finder_sees_each_spelling():
    source = ("a = build_root() / stack.name\nb = self.build_root / self.stack.name / 'k8s'\n"
              "c = root / stack\nd = build_root() / BAKE_FILE\ne = path / 'record.json'\n"
              "f = Path(options.build_dir) / (stack.name if stack else NO_STACK)\ng = build / (stack_name or 'x')\n"
              "h = Path(build_dir) / (stack or NO_STACK)\n")
    assert sorted(_layout_spelled(source)) == [1, 2, 3, 5, 6, 7, 8]


# ---- a test's own HTTP server: tests/lib/httpserve, started and always shut down in one place ----------------

TESTS = PACKAGE.parent / "tests"


def _serves_http(source: str) -> list[int]:
    """Lines that make an HTTP server themselves: `ThreadingHTTPServer(...)`, `HTTPServer(...)`."""
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] in ("ThreadingHTTPServer", "HTTPServer")]


def test_a_test_serves_http_only_through_httpserve():
    home = TESTS / "lib" / "httpserve.py"
    doubles = TESTS / "doubles"  # stand-ins run as programs of their own (SGLang's server, kubectl)
    found = {f"{p.relative_to(TESTS)}:{line}" for p in sorted(TESTS.rglob("*.py"))
             if p != home and not p.is_relative_to(doubles) for line in _serves_http(p.read_text(encoding="utf-8"))}
    assert found == set(), "serve with tests/lib/httpserve.ThreadedServer (it always shuts the server down)"


def test_the_http_server_finder_sees_each_spelling():
    source = ("a = ThreadingHTTPServer(('127.0.0.1', 0), H)\nb = http.server.HTTPServer(x, H)\n"
              "c = ThreadedServer(H)\n")
    assert _serves_http(source) == [1, 2]


# ---- a registry in a unit or cli test: tests/lib/registry_double, the one stand-in --------------------------------

# The request handlers of the tests, each a protocol of its own: a registry is only registry_double's.
HANDLER_HOMES = {
    "lib/registry_double.py": "a registry's HTTP API v2 (the one stand-in)",
    "lib/registry_fixtures.py": "the token service beside the real distribution registry",
    "lib/faultproxy.py": "a proxy that breaks connections to a real registry",
    "lib/auth_index.py": "a package index behind auth and TLS",
    "unit/test_index_metadata.py": "a package index's JSON API and PEP 658 files",
    "doubles/sglang-double/sglang/srt/entrypoints/http_server.py": "SGLang's server",
}


def _request_handlers(source: str) -> list[int]:
    """Lines of request handler classes (`class H(BaseHTTPRequestHandler)`)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)
            and any(ast.unparse(b).endswith("BaseHTTPRequestHandler") for b in node.bases)]


def test_a_test_stands_in_for_a_registry_only_through_registry_double():
    found = {str(p.relative_to(TESTS)) for p in sorted(TESTS.rglob("*.py"))
             if _request_handlers(p.read_text(encoding="utf-8"))}
    assert found - set(HANDLER_HOMES) == set(), "stand in for a registry with tests/lib/registry_double.RegistryDouble"
    assert set(HANDLER_HOMES) - found == set(), "remove the files that serve no more"
    source = ("class A(BaseHTTPRequestHandler):\n    pass\nclass B(http.server.BaseHTTPRequestHandler):\n    pass\n"
              "class C(Handler):\n    pass\n")
    assert _request_handlers(source) == [1, 3]


# ---- a hidden secret is shown as REDACTED (core/credentials), never a "***" of its own -------------------------

def _redaction_spelled(source: str) -> list[int]:
    return [node.lineno for node in ast.walk(parse(source))
            if isinstance(node, ast.Constant) and node.value == "***"]


def test_a_hidden_secret_is_spelled_only_as_redacted():
    from sglstack.core.credentials import REDACTED

    home = PACKAGE / "core" / "credentials.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _redaction_spelled(p.read_text(encoding="utf-8"))}
    assert found == set(), "show a hidden value as sglstack.core.credentials.REDACTED"
    assert _redaction_spelled(f"a = {REDACTED!r}\nb = '*'\n") == [1]


# ---- a UTC timestamp is formatted only by core/clock ---------------------------------------------------------

def _formats_a_timestamp(source: str) -> list[int]:
    """Lines that spell the timestamp format themselves: `strftime("%Y-%m-%dT%H:%M:%SZ")`, any `%H:%M:%S` with a T."""
    return [node.lineno for node in ast.walk(parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "%dT%H:%M:%S" in node.value]


def test_a_utc_timestamp_is_formatted_only_by_the_clock():
    import datetime as dt

    from sglstack.core.clock import utc_timestamp

    home = PACKAGE / "core" / "clock.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _formats_a_timestamp(p.read_text(encoding="utf-8"))}
    assert found == set(), "stamp with sglstack.core.clock.utc_timestamp"
    assert utc_timestamp(dt.datetime.fromtimestamp(0, dt.UTC)) == "1970-01-01T00:00:00Z"
    assert _formats_a_timestamp("a = t.strftime('%Y-%m-%dT%H:%M:%SZ')\nb = '%Y-%m-%d %H:%M:%S'\n") == [1]


def test_the_clock_is_imported_from_the_clock():
    """The UTC clock, format and parser are core/clock's, and only there: no module offers them a second path."""
    clock = {"utc_now", "utc_timestamp", "utc_today", "parse_utc", "parse_local_stamp"}
    found = {f"{p.relative_to(PACKAGE)}:{node.lineno}" for p in _ours()
             for node in ast.walk(parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] != "clock"
             and clock & {a.name for a in node.names}}
    assert found == set(), "import the clock from sglstack.core.clock"


# ---- every platform of a stack: Stack.whole_platforms ---------------------------------------------------------

def _whole_platforms_spelled(source: str) -> list[int]:
    """Lines that spell `(stack.whole or stack).platforms` themselves."""
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.Attribute)
            and node.attr == "platforms" and isinstance(node.value, ast.BoolOp)
            and ast.unparse(node.value.values[0]).endswith("whole")]


def test_every_platform_of_a_stack_is_read_only_through_whole_platforms():
    home = PACKAGE / "config" / "schema.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _whole_platforms_spelled(p.read_text(encoding="utf-8"))}
    assert found == set(), "use Stack.whole_platforms"
    assert _whole_platforms_spelled("a = (stack.whole or stack).platforms\nb = stack.platforms\n") == [1]


# ---- a JSON document written for people: core/jsonreport (dumps, write_json) ------------------------------

# Documents whose bytes are not ours to choose, and the two writers not yet moved (each says why).
JSON_BYTES_OF_THEIR_OWN = {
    "publish/index.py",  # an OCI image index: its bytes are its digest
    "kernelcache/layout.py",  # an OCI layout's index.json
    "render/dockerfile.py",  # stack.json is in the build context: its bytes are in the config hash
    "publish/release.py",  # not yet: the release's smoke report (default=str, unsorted)
    "imagebuild/context.py",  # not yet: render --out's manifest of what it wrote (unsorted keys)
}


def _indented_dumps(source: str) -> list[int]:
    """Lines that encode an indented JSON document themselves: `json.dumps(x, indent=...)`."""
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func) == "json.dumps" and any(k.arg == "indent" for k in node.keywords)]


def test_a_json_document_is_encoded_only_by_jsonreport():
    home = PACKAGE / "core" / "jsonreport.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours()
             if p != home and str(p.relative_to(PACKAGE)) not in JSON_BYTES_OF_THEIR_OWN
             for line in _indented_dumps(p.read_text(encoding="utf-8"))}
    assert found == set(), "write with sglstack.core.jsonreport.write_json (print with dumps)"
    assert all((PACKAGE / f).is_file() for f in JSON_BYTES_OF_THEIR_OWN)
    assert _indented_dumps("a = json.dumps(x, indent=2)\nb = json.dumps(x, sort_keys=True)\n") == [1]


# ---- an option several tasks share is declared once, in cli/cmdoptions (as pip's cmdoptions) ----------------

SHARED_OPTIONS = {"stack": ("stack_option", "only_stack_option", "stacks_option"),
                  "signing_key": ("signing_key_option",), "verify_key": ("verify_key_option",),
                  "registry": ("registry_option",), "smoke_opt": ("smoke_opt_option",)}


def _shared_declared_inline(source: str) -> list[str]:
    """The shared options a task's options declare with `option(...)` and the like, not with their group."""
    return [f"{node.target.id}:{node.lineno}" for node in ast.walk(parse(source))
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and node.target.id in SHARED_OPTIONS and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) not in SHARED_OPTIONS[node.target.id]]


def test_a_shared_option_is_declared_by_its_group():
    cli = PACKAGE / "cli"
    found = {f"{p.name}:{x}" for p in sorted(cli.glob("*.py")) if p.name != "cmdoptions.py"
             for x in _shared_declared_inline(p.read_text(encoding="utf-8"))}
    assert found == set(), "declare it with its sglstack.cli.cmdoptions group"
    assert _shared_declared_inline("class O:\n    stack: str = required('x')\n    verify_key: str = "
                                   "verify_key_option('y')\n    other: str = option('z')\n") == ["stack:2"]


# ---- a test runs `invoke` as a child only through tests/lib/clirun (run_invoke, start_invoke) ----------------

# Engine tests not yet moved (each signals or reads a build, a preflight or a deploy as it goes).
INVOKES_OF_THEIR_OWN = {"e2e/test_build_interrupt.py", "e2e/test_preflight_interrupt.py", "e2e/test_coverage_cli.py",
                        "e2e/test_lock_cli.py", "e2e/test_deploy_compose.py", "e2e/test_registry_auth.py"}


def _spells_an_invoke(source: str) -> list[int]:
    """Lines that build `[sys.executable, "-m", "invoke", ...]` themselves."""
    return [node.lineno for node in ast.walk(parse(source)) if isinstance(node, ast.List)
            and [ast.unparse(e) for e in node.elts[1:3]] == ["'-m'", "'invoke'"]]


def test_a_test_runs_invoke_only_through_clirun():
    home = TESTS / "lib" / "clirun.py"
    found = {f"{p.relative_to(TESTS)}:{line}" for p in sorted(TESTS.rglob("*.py"))
             if p != home and str(p.relative_to(TESTS)) not in INVOKES_OF_THEIR_OWN
             for line in _spells_an_invoke(p.read_text(encoding="utf-8"))}
    assert found == set(), "run it with tests/lib/clirun.run_invoke (or start_invoke for a Popen)"
    assert all((TESTS / f).is_file() for f in INVOKES_OF_THEIR_OWN)
    assert _spells_an_invoke("a = [sys.executable, '-m', 'invoke', 'x']\nb = [sys.executable, '-m', 'pytest']\n") == [1]


# ---- the identity a release signature must name: deploy/identity (deploy, render and verify-image ask it) -------

def _release_identity_spelled(source: str) -> list[int]:
    """Lines that work out a release's expected identity themselves: its config hash from the matrix now
    (`released_config_hash(...)`) or the identity of a stack (`BuildIdentity.of_stack(...)`)."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
            and ast.unparse(node.func).split(".")[-1] in ("released_config_hash", "of_stack")]


def test_the_identity_a_release_signature_must_name_has_one_home():
    home = PACKAGE / "deploy" / "identity.py"
    found = {f"{p.relative_to(PACKAGE)}:{line}" for p in _ours() if p != home
             for line in _release_identity_spelled(p.read_text(encoding="utf-8"))}
    assert found == set(), "use sglstack.deploy.identity.release_identity"
    assert len(_release_identity_spelled(home.read_text(encoding="utf-8"))) == 2
    source = "a = released_config_hash(s, lock)\nb = BuildIdentity.of_stack(s, h)\nc = BuildIdentity(s.name)\n"
    assert _release_identity_spelled(source) == [1, 2]
