"""One home for each rule (issue 22): the behaviours that disagreed while a rule lived in two places.

--smoke-opt (smoke.options), image id vs registry digest (adapters.docker), image references
(config.imageref), label keys (core.labels), render writing nothing (imagebuild.context).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import docker.errors
import pytest
from bisect_fixtures import stack_yaml
from deploy_fixtures import make_test_stack

from sglstack.adapters.docker import local_image, local_image_id
from sglstack.bisect import driver
from sglstack.bisect.driver import BisectInputError, BisectRequest
from sglstack.config import names
from sglstack.config.fields import _pinned_image
from sglstack.config.imageref import (
    ImageReference,
    Repository,
    image_reference_problem,
    is_digest,
    name_problem,
    names_a_digest,
    names_its_registry,
    parse_image_reference,
    parse_repository,
    path_component_problem,
    pinned_digest,
    registry_digest,
    registry_reference_problem,
    tag_problem,
)
from sglstack.config.matrix import load_matrix
from sglstack.core import labels as lb
from sglstack.core.errors import ConfigError
from sglstack.deploy.images import image_identity
from sglstack.publish import PublishError, parse_smoke_opts
from sglstack.render import k8s
from sglstack.render.dockerfile import image_labels
from sglstack.serving import ServingError
from sglstack.smoke.options import SmokeOptionError
from sglstack.smoke.options import parse_smoke_opts as smoke_opts_parser
from sglstack.smoke.report import _identity
from sglstack.smoke.subject import resolve_image

# ---- --smoke-opt: one parser for bisect and publish ------------------------------------------------

SMOKE_OPTS = ["env=A=1", "env=B=2", "mount={a}:/data/a", "mount={b}:/data/b", "gpus=0", "max-new-tokens=8"]


def _opts(tmp_path) -> list[str]:
    for name in ("a", "b"):
        (tmp_path / name).mkdir(exist_ok=True)
    return [o.format(a=tmp_path / "a", b=tmp_path / "b") for o in SMOKE_OPTS]


def test_bisect_keeps_every_env_and_mount(tmp_path):
    """The old bisect parser kept the last `env=` (`{'env': 'B=2'}`) and dropped all mounts but one."""
    matrix = tmp_path / "stacks.yaml"
    matrix.write_text(stack_yaml(str(tmp_path / "sglang"), "0" * 40, patches=()))
    smoke = driver.smoke_overrides(_opts(tmp_path), env=["C=3"], mounts=None)
    request = BisectRequest(stack="synth", good="a", bad="b", stacks_file=matrix, smoke=smoke)
    *_, options = driver.prepare(request)  # the path bisect's smoke options take before any build
    assert options.env == {"A": "1", "B": "2", "C": "3"}
    assert [m.target for m in options.serving.mounts] == ["/data/a", "/data/b"]
    assert options.max_new_tokens == 8 and options.gpus == 0


def test_bisect_and_publish_read_smoke_opts_alike(tmp_path):
    opts = _opts(tmp_path)
    expected = {"env": {"A": "1", "B": "2"}, "mounts": [opts[2].partition("=")[2], opts[3].partition("=")[2]],
                "gpus": "0", "max_new_tokens": "8"}
    assert parse_smoke_opts(opts) == driver.smoke_overrides(opts) == smoke_opts_parser(opts) == expected


@pytest.mark.parametrize(("bad", "message"), [
    ("bogus", "--smoke-opt #1: expected KEY=VALUE (it has no '='; not shown, as it may be a secret)"),
    ("env=oops", "--smoke-opt 'env=…': expected env=NAME=VALUE"),
    ("gpus=0 gpus=1", "gpus is given twice"),
])
def test_a_bad_smoke_opt_is_one_error_in_every_caller(bad, message):
    pairs = bad.split()
    for call, error in ((smoke_opts_parser, SmokeOptionError), (parse_smoke_opts, PublishError),
                        (driver.smoke_overrides, BisectInputError)):
        with pytest.raises(error, match=re.escape(message)):
            call(pairs)


def test_a_named_flag_wins_over_a_smoke_opt_and_lists_add_up():
    got = driver.smoke_overrides(["gpus=1", "env=A=1", "mount=/x:/x", "extra-args=--a 1"],
                                 gpus=0, env=["A=2"], mounts=["/y:/y"], model=None)
    assert got == {"gpus": 0, "env": {"A": "2"}, "mounts": ["/x:/x", "/y:/y"], "extra_args": ["--a", "1"]}


# ---- image references: config.imageref parses them all ---------------------------------------------

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


@pytest.mark.parametrize(("ref", "name", "tag", "digest", "registry"), [
    (f"host:5000/a/b:tag@{DIGEST}", "host:5000/a/b", "tag", DIGEST, "host:5000"),
    (f"host:5000/a/b@{DIGEST}", "host:5000/a/b", None, DIGEST, "host:5000"),
    ("host:5000/a/b", "host:5000/a/b", None, None, "host:5000"),
    ("ubuntu", "ubuntu", None, None, "docker.io"),
    ("ubuntu:22.04", "ubuntu", "22.04", None, "docker.io"),
])
def test_one_parser_reads_ports_digests_and_missing_tags(ref, name, tag, digest, registry):
    parsed = parse_image_reference(ref)
    assert (parsed.name, parsed.tag, parsed.digest, parsed.repository.registry) == (name, tag, digest, registry)
    assert pinned_digest(ref) == digest
    assert names_its_registry(ref) == (registry != "docker.io")


def test_k8s_render_takes_a_registry_with_a_port_and_refuses_a_tag(tmp_path):
    """The third parser (a regex in render/k8s) is gone: k8s serves what the one parser says pins a digest."""

    stack = make_test_stack(tmp_path)
    files = k8s.manifests(stack, f"host:5000/a/b:tag@{DIGEST}", k8s.K8sOptions())
    assert f"host:5000/a/b:tag@{DIGEST}" in str(files[k8s.LWS_FILE])
    for tagged in ("host:5000/a/b:tag", "host:5000/a/b", f"Bad/Name@{DIGEST}"):
        with pytest.raises(ServingError, match="by digest"):
            k8s.manifests(stack, tagged, k8s.K8sOptions())


def test_a_stack_image_on_a_registry_port_needs_a_tag(tmp_path):
    assert _pinned_image("host:5000/a/b:1.0") == "host:5000/a/b:1.0"
    assert _pinned_image(f"host:5000/a/b@{DIGEST}") == f"host:5000/a/b@{DIGEST}"
    for untagged in ("host:5000/a/b", "ubuntu", "ubuntu:"):
        with pytest.raises(ValueError, match="has no tag"):
            _pinned_image(untagged)


# ---- "digest" is a registry manifest digest; an image id is an id -----------------------------------

@pytest.mark.parametrize(("ref", "repo_digests", "expected"), [
    (f"host:5000/a/b@{DIGEST}", [f"host:5000/a/b@{OTHER}"], DIGEST),  # a pinned ref is its own digest
    ("host:5000/a/b:tag", [f"other/repo@{OTHER}", f"host:5000/a/b@{DIGEST}"], DIGEST),  # its repository's
    ("ubuntu:22.04", [f"ubuntu@{DIGEST}"], DIGEST),  # Docker Hub's short names compare as the long ones
    ("host:5000/a/b:tag", [f"other/repo@{OTHER}"], None),  # another repository's digest is not this one's
    ("sglstack/local:abc", [], None),  # a local build has no registry digest (it used to get its image id)
    ("sha256:" + "ee" * 32, [], None),  # an image id names no repository
])
def test_the_registry_digest_of_a_local_image_is_never_its_image_id(ref, repo_digests, expected):
    assert registry_digest(ref, repo_digests) == expected


def test_a_reference_or_repo_digest_that_does_not_parse_names_no_digest():
    assert registry_digest("Bad_Ref", [f"x@{DIGEST}"]) is None
    assert registry_digest("host:5000/a/b:1", ["garbage@@", f"Bad@{OTHER}", f"host:5000/a/b@{DIGEST}"]) == DIGEST


class _Image:
    def __init__(self, image_id: str, repo_digests: list[str]) -> None:
        self.id, self.attrs = image_id, {"RepoDigests": repo_digests}


class _Engine:
    """The images part of a Docker client: one local build, never pushed."""

    def __init__(self, images: dict[str, _Image]) -> None:
        self.images = self
        self._images = images

    def get(self, ref: str) -> _Image:
        if ref not in self._images:
            raise docker.errors.ImageNotFound(ref)
        return self._images[ref]


IMAGE_ID = "sha256:" + "11" * 32


def test_deploy_smoke_and_build_name_a_local_build_alike():
    """Three policies answered image -> "digest" with the image id; now one answers the id, one the digest."""
    engine = _Engine({"sglstack/local:abc": _Image(IMAGE_ID, []),
                      "host:5000/a/b:1": _Image(IMAGE_ID, [f"host:5000/a/b@{DIGEST}"])})
    assert local_image_id(engine, "sglstack/local:abc") == IMAGE_ID  # type: ignore[arg-type]
    assert local_image_id(engine, "missing:1") is None  # type: ignore[arg-type]
    assert image_identity(engine, "sglstack/local:abc") == ("", IMAGE_ID)  # type: ignore[arg-type]
    info = resolve_image(engine, "sglstack/local:abc", pull=False)  # type: ignore[arg-type]
    assert (info["digest"], info["id"]) == (None, IMAGE_ID)
    assert image_identity(engine, "host:5000/a/b:1") == (DIGEST, IMAGE_ID)  # type: ignore[arg-type]
    info = resolve_image(engine, "host:5000/a/b:1", pull=False)  # type: ignore[arg-type]
    assert (info["digest"], info["id"]) == (DIGEST, IMAGE_ID)
    found = local_image(engine, "host:5000/a/b:1")  # type: ignore[arg-type]
    assert found is not None and found.repo_digests == (f"host:5000/a/b@{DIGEST}",)


def test_a_smoke_report_names_a_local_build_by_its_image_id():
    assert _identity({"ref": "x:1", "digest": None, "id": IMAGE_ID}) == f"image id `{IMAGE_ID}`"
    assert _identity({"ref": "x:1", "digest": DIGEST, "id": IMAGE_ID}) == f"digest `{DIGEST}`"
    assert _identity({"ref": "x:1", "digest": IMAGE_ID, "id": IMAGE_ID}) == f"digest `{IMAGE_ID}`"  # an old report


# ---- label keys: core.labels spells each one -------------------------------------------------------

LABEL_KEY = re.compile(r"""["'](?:io\.sglstack[./]|org\.opencontainers\.image\.)""")


def test_every_label_key_is_spelled_in_core_labels_only():
    """render/dockerfile and registry/local wrote theirs literally beside core/labels; a reader that spells
    a key again can drift from the writer."""
    package = Path(__file__).resolve().parents[2] / "sglstack"
    literal = [f"{path.relative_to(package)}:{n}" for path in sorted(package.rglob("*.py"))
               if path.relative_to(package).parts[0] != "data" and path.name != "labels.py"
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if LABEL_KEY.search(line)]
    assert not literal, literal
    assert LABEL_KEY.search('"io.sglstack.stack"') and LABEL_KEY.search("'org.opencontainers.image.title'")


def test_the_dockerfile_labels_are_the_keys_core_labels_names(tmp_path):
    keys = dict(image_labels(make_test_stack(tmp_path)))
    assert {lb.STACK_LABEL, lb.SGLANG_LABEL, lb.BASE_NAME_LABEL, lb.OCI_TITLE_LABEL} <= set(keys)
    assert keys[lb.STACK_LABEL] == "tiny"


# ---- render writes nothing: imagebuild.context writes what it returns -----------------------------------

RENDER = Path(__file__).resolve().parents[2] / "sglstack" / "render"
WRITING_MODULES = {"tempfile", "sglstack.core.safefiles"}  # shutil: `which` only, its writers are calls below
WRITING_CALLS = {"write_text", "write_bytes", "mkdir", "makedirs", "unlink", "rmdir", "rmtree", "rename",
                 "touch", "chmod", "move", "copy", "copy2", "copyfile", "copytree", "symlink_to", "mkstemp", "mkdtemp"}


def test_render_modules_import_no_file_writer_and_call_none():
    found = []
    for path in sorted(RENDER.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names if a.name in WRITING_MODULES]
            elif isinstance(node, ast.ImportFrom):
                module = "sglstack." + (node.module or "").lstrip(".") if node.level else node.module or ""
                if module in WRITING_MODULES or module.endswith("safefiles"):
                    found.append(f"{path.name}: from {module}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in WRITING_CALLS:
                    found.append(f"{path.name}:{node.lineno} .{node.func.attr}()")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                found.append(f"{path.name}:{node.lineno} open()")
    assert not found, found


@pytest.fixture
def no_writes(monkeypatch):
    """Any attempt to create, change or remove a file fails the test."""
    import builtins
    import os
    import shutil

    real_open = builtins.open

    def guarded_open(file, mode="r", *args, **kwargs):
        assert not set(str(mode)) & set("wax+"), f"opened {file} for writing"
        return real_open(file, mode, *args, **kwargs)

    def refuse(name):
        def call(*args, **kwargs):
            raise AssertionError(f"{name}{args}: render wrote to the disk")
        return call

    monkeypatch.setattr(builtins, "open", guarded_open)
    for name in ("mkdir", "makedirs", "replace", "rename", "unlink", "remove", "rmdir", "chmod", "symlink"):
        monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    monkeypatch.setattr(shutil, "rmtree", refuse("shutil.rmtree"))
    monkeypatch.setattr(Path, "write_bytes", refuse("Path.write_bytes"))
    monkeypatch.setattr(Path, "write_text", refuse("Path.write_text"))


def test_rendering_a_stack_touches_no_file(tmp_path, no_writes):
    from sglstack.render import compose as cmp
    from sglstack.render.dockerfile import build_context, render_dockerfile

    stack = load_matrix(Path(__file__).resolve().parents[2] / "stacks.yaml").get("cu130")
    rendered = build_context(stack)
    assert rendered.dockerfile == render_dockerfile(stack) and "stack.json" in rendered.files
    assert rendered.modes["tools/pip-env.sh"] & 0o700 and "tools/patchkit/__init__.py" in rendered.files
    assert cmp.deployment_files(stack, f"host:5000/a/b@{DIGEST}")
    assert k8s.render_k8s(stack, f"host:5000/a/b@{DIGEST}", k8s.K8sOptions())


def test_build_writes_the_context_render_returns(tmp_path, monkeypatch):
    """Byte for byte and mode for mode: the folder imagebuild.context writes is the content render returned."""
    from sglstack.imagebuild.context import write_build_context
    from sglstack.render.dockerfile import build_context

    monkeypatch.setenv("SGLSTACK_BUILD_DIR", str(tmp_path))
    stack = load_matrix(Path(__file__).resolve().parents[2] / "stacks.yaml").get("cu130")
    written = write_build_context(stack, tmp_path / "out")
    content = build_context(stack)
    on_disk = {p.relative_to(written.context).as_posix(): p for p in written.files}
    assert set(on_disk) == set(content.files)
    assert all(on_disk[rel].read_bytes() == data for rel, data in content.files.items())
    assert all(on_disk[rel].stat().st_mode & 0o777 == content.modes[rel] for rel in content.files)
    assert written.dockerfile.read_text(encoding="utf-8") == content.dockerfile
    assert (written.context / "patches").is_dir()


# ---- deploy records: `digest` is read as a registry digest only, old records included ---------------

def _record(image: str, digest: str, image_id: str, time: str):
    from sglstack.deploy.store import DeploymentRecord

    return DeploymentRecord(stack="s", action="deploy", result="healthy", image=image, digest=digest,
                            image_id=image_id, time=time, host="h", docker_host="", project="p",
                            compose_tool="docker compose", compose_file="compose.yaml")


def test_an_old_record_with_the_image_id_as_its_digest_reads_as_no_digest():
    old = _record("sglstack/local:a", IMAGE_ID, IMAGE_ID, "2026-01-01T00:00:00Z")  # written before the rename
    new = _record("sglstack/local:a", "", IMAGE_ID, "2026-01-02T00:00:00Z")
    pushed = _record(f"host:5000/a/b@{DIGEST}", DIGEST, IMAGE_ID, "2026-01-03T00:00:00Z")
    assert (old.registry_digest, new.registry_digest, pushed.registry_digest) == ("", "", DIGEST)


def test_a_moved_tag_still_has_a_rollback_target_without_a_registry_digest():
    """A local build has no registry digest now; its image id tells two images under one tag apart."""
    from sglstack.deploy.store import rollback_target

    other = "sha256:" + "22" * 32
    first = _record("sglstack/local:a", IMAGE_ID, IMAGE_ID, "2026-01-01T00:00:00Z")  # an old record
    second = _record("sglstack/local:a", "", other, "2026-01-02T00:00:00Z")
    assert rollback_target([first, second]) == first
    same = _record("sglstack/local:a", "", IMAGE_ID, "2026-01-02T00:00:00Z")
    assert rollback_target([first, same]) is None  # old and new records of one image are one image


# ---- image references: each rule's answer, word for word ----------------------------------------------

@pytest.mark.parametrize(("component", "problem"), [
    ("abc", None), ("a.b", None), ("a_b", None), ("a__b", None), ("a---b", None), ("0", None),
    ("Abc", "has uppercase letters"),
    ("", "is empty"),
    ("-ab", "must start and end with a lowercase letter or digit"),
    ("ab-", "must start and end with a lowercase letter or digit"),
    ("a!b", "may hold only lowercase letters, digits, '.', '_' and '-'"),
    ("a..b", "has a separator Docker refuses ('..', '._', '___' and the like)"),
    ("a___b", "has a separator Docker refuses ('..', '._', '___' and the like)"),
])
def test_a_path_component_problem_is_named(component, problem):
    assert path_component_problem(component) == problem


def test_names_and_tags_have_their_docker_lengths():
    assert name_problem("a" * 255) is None
    assert name_problem("a" * 256) == "is 256 characters long, over Docker's limit of 255"
    assert tag_problem("v1.0_rc-2") is None
    assert tag_problem("_" + "a" * 127) is None
    assert tag_problem("a" * 129) == "is 129 characters long, over Docker's limit of 128"
    letters = "may hold only letters, digits, '_', '.' and '-', and may not start with '.' or '-'"
    assert tag_problem(".a") == letters
    assert tag_problem("-a") == letters
    assert tag_problem("a/b") == letters
    assert tag_problem("." + "a" * 127) == letters  # 128 characters: the length is not what is wrong


@pytest.mark.parametrize(("ref", "problem"), [
    (f"ubuntu@{DIGEST}", None),
    (f"host:5000/a/b:1.0@{DIGEST}", None),
    ("ubuntu@sha256:ab", "has a digest 'sha256:ab' that is not sha256: and 64 lowercase hex digits"),
    (f"ubuntu@{DIGEST.upper()}", f"has a digest '{DIGEST.upper()}' that is not sha256: and 64 lowercase hex digits"),
    (f"@{DIGEST}", "has no name"),
    ("Ubuntu", "has a path component 'Ubuntu' that has uppercase letters"),
])
def test_an_image_reference_problem_is_named(ref, problem):
    assert image_reference_problem(ref) == problem


@pytest.mark.parametrize(("ref", "problem"), [
    ("host:5000/a/b", None),
    ("host:5000/a/b:tag", None),
    ("localhost/a", None),
    ("localhost", None),
    ("a.b", None),
    ("a_b/x", None),
    ("[::1]:5000/a", None),
    ("a/b@x", "may not hold a digest: a cache is written to a tag"),
    ("host:5000/a/b:.bad", "has a tag that may hold only letters, digits, '_', '.' and '-', and may not start with "
                           "'.' or '-'"),
    ("a/b:" + "x" * 129, "has a tag that is 129 characters long, over Docker's limit of 128"),
    ("a_b.c/x", "has an invalid registry host 'a_b.c'"),
    ("a_b:5000/x", "has an invalid registry host 'a_b:5000'"),
    ("[zz]/x", "has an invalid registry host '[zz]'"),
    ("host:5000/A/b", "has a path component 'A' that has uppercase letters"),
    ("h/a:1/b", "has a path component 'a:1' that may hold only lowercase letters, digits, '.', '_' and '-'"),
    ("host:5000/a//b", "has a path component '' that is empty"),
    ("host:5000/" + "a" * 246, "is 256 characters long, over Docker's limit of 255"),
])
def test_a_registry_reference_problem_is_named(ref, problem):
    assert registry_reference_problem(ref) == problem


def test_a_repository_writes_tags_and_digests_back():
    repo = Repository("host:5000", "a/b")
    assert str(repo) == "host:5000/a/b"
    assert repo.ref("1.0") == "host:5000/a/b:1.0"
    assert repo.ref(DIGEST) == f"host:5000/a/b@{DIGEST}"
    assert str(ImageReference(repo, tag="1.0", digest=DIGEST)) == f"host:5000/a/b:1.0@{DIGEST}"
    assert str(ImageReference(repo, digest=DIGEST)) == f"host:5000/a/b@{DIGEST}"
    assert str(ImageReference(repo, tag="1.0")) == "host:5000/a/b:1.0"
    assert str(parse_image_reference("ubuntu:22.04")) == "docker.io/library/ubuntu:22.04"


@pytest.mark.parametrize(("ref", "named"), [
    ("host.x/a", True), ("h:5000/a", True), ("localhost/a", True),
    ("host.x", False), ("team/name", False), ("name", False), ("localhostx/a", False), ("team/host.x/a", False),
])
def test_a_reference_names_its_registry_only_with_a_host_first(ref, named):
    assert names_its_registry(ref) is named


@pytest.mark.parametrize(("repository", "registry", "path"), [
    ("127.0.0.1:5000/sglstack/sglang", "127.0.0.1:5000", "sglstack/sglang"),
    ("localhost/a", "localhost", "a"),
    ("ubuntu", "docker.io", "library/ubuntu"),
    ("team/name", "docker.io", "team/name"),
])
def test_a_repository_is_split_into_registry_and_path(repository, registry, path):
    assert parse_repository(repository) == Repository(registry, path)


@pytest.mark.parametrize(("repository", "message"), [
    ("bad_host.com/a", "stack 's': key 'k': 'bad_host.com/a' has an invalid registry host 'bad_host.com'"),
    ("host.com/", "stack 's': key 'k': 'host.com/' is not a valid repository (lowercase path components like "
                  "'host:port/team/name')"),
    ("Ubuntu", "stack 's': key 'k': 'Ubuntu' is not a valid repository (lowercase path components like "
               "'host:port/team/name')"),
    ("a/" + "b" * 254, f"stack 's': key 'k': 'a/{'b' * 38}...' is longer than 255 characters"),
])
def test_a_bad_repository_is_one_line_naming_the_stack_and_key(repository, message):
    with pytest.raises(ConfigError) as exc:
        parse_repository(repository, stack="s", key="k")
    assert str(exc.value) == message
    assert parse_repository("a/" + "b" * 253).path == "a/" + "b" * 253


@pytest.mark.parametrize(("ref", "message"), [
    ("ubuntu@sha256:ab", "key 'image': 'ubuntu@sha256:ab' has an invalid digest (expected sha256:<64 hex>)"),
    ("ubuntu:.x", "key 'image': 'ubuntu:.x' has an invalid tag '.x' (letters, digits, '_', '.', '-'; at most 128)"),
    ("[::1]", "key 'image': '[::1]' is not a valid repository (lowercase path components like "
              "'host:port/team/name')"),
    ("bad_host.com/a:1", "key 'image': 'bad_host.com/a' has an invalid registry host 'bad_host.com'"),
])
def test_a_bad_image_reference_is_one_line_naming_the_key(ref, message):
    with pytest.raises(ConfigError) as exc:
        parse_image_reference(ref)
    assert str(exc.value) == message


def test_a_parsed_reference_keeps_the_name_as_written():
    parsed = parse_image_reference(f"localhost:5000/a:v1@{DIGEST}", stack="s")
    assert parsed == ImageReference(Repository("localhost:5000", "a"), tag="v1", digest=DIGEST)
    assert parsed.name == "localhost:5000/a"
    assert parse_image_reference("a/b").digest is None
    assert not names_a_digest("a/b:1")
    assert names_a_digest(f"a/b@{DIGEST}")
    assert not names_a_digest("Bad@" + DIGEST)
    assert pinned_digest("Bad@" + DIGEST) is None
    assert is_digest(DIGEST) and not is_digest(DIGEST.upper()) and not is_digest(DIGEST + "a")


# ---- the names a stack's name becomes elsewhere ------------------------------------------------------

def test_each_system_gets_the_stack_name_it_can_hold():
    assert names.local_image("cpu.Test") == "sglstack/cpu.Test"
    assert names.compose_project("Cpu.test_x-y!") == "sglstack-cpu-test_x-y-"
    assert names.k8s_object_name("--Cpu..test__x--") == "sglstack-cpu-test-x"
    assert names.k8s_service_name("cpu.test") == "sglstack-cpu-test-api"
    # cut at 40 characters, and never ending in '-'
    assert names.k8s_object_name("a" * 30 + "-" + "b" * 30) == "sglstack-" + "a" * 30
    assert len(names.k8s_object_name("a" * 60)) == names.K8S_NAME_MAX == 40


def test_stacks_whose_names_meet_in_some_system_are_each_named_with_the_first_they_meet():
    assert names.collisions(["cpu-test", "cpu.test", "cpu_test", "other", "other"]) == [
        ("cpu.test", "cpu-test", "compose project", "sglstack-cpu-test"),
        ("cpu_test", "cpu-test", "Kubernetes LeaderWorkerSet name", "sglstack-cpu-test"),
    ]
    assert names.collisions(["a", "b"]) == []


# ---- platforms: one map from a platform to its machine name ----------------------------------------


def test_the_platform_to_machine_map_has_one_home(repo_root: Path) -> None:
    """`linux/arm64` -> `aarch64` was written in five modules; a platform added to one would be missed by four."""
    import typing

    from sglstack.config.platforms import MACHINE, PLATFORM_OF_ARCH, PLATFORMS
    from sglstack.config.schema import Stack

    mapping = re.compile(r"""["']linux/(amd64|arm64)["']\s*:\s*["'](x86_64|aarch64)["']"""
                         r"""|["'](amd64|arm64)["']\s*:\s*["']linux/""")
    homes = sorted(
        str(path.relative_to(repo_root)) for path in (repo_root / "sglstack").rglob("*.py")
        if "inimage" not in path.parts and mapping.search(path.read_text())
    )
    assert homes == ["sglstack/config/platforms.py"], homes
    declared = typing.get_args(typing.get_args(Stack.model_fields["platforms"].annotation)[0])
    assert set(declared) == set(PLATFORMS) == set(PLATFORM_OF_ARCH.values()) == set(MACHINE)


# ---- times: one parser for what the engine, a registry and a record write --------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-05T01:02:03Z", "2026-12-05T01:02:03+00:00"),
        ("2026-12-05T01:02:03.123456789Z", "2026-12-05T01:02:03.123456+00:00"),  # the engine's nanoseconds
        ("2026-12-05T01:02:03.5z", "2026-12-05T01:02:03.500000+00:00"),
        ("2026-12-05T03:02:03+02:00", "2026-12-05T01:02:03+00:00"),
        ("2026-12-05T01:02:03", "2026-12-05T01:02:03+00:00"),  # no zone: UTC, as every record is
        (" 2026-12-05T01:02:03Z\n", "2026-12-05T01:02:03+00:00"),
    ],
)
def test_parse_utc_reads_every_form_a_time_arrives_in(text: str, expected: str) -> None:
    from sglstack.core.records import parse_utc

    parsed = parse_utc(text)
    assert parsed is not None and parsed.isoformat() == expected


@pytest.mark.parametrize("text", [None, 0, "", "yesterday", "2026-13-05T01:02:03Z", "Z"])
def test_parse_utc_says_none_for_anything_else(text: object) -> None:
    from sglstack.core.records import parse_utc

    assert parse_utc(text) is None


def test_times_are_parsed_in_one_home(repo_root: Path) -> None:
    """Five modules parsed times five ways (one cut the text at 32 characters, one at the second)."""
    parsers = re.compile(r"\b(fromisoformat|strptime)\(")
    homes = sorted(
        str(path.relative_to(repo_root)) for path in (repo_root / "sglstack").rglob("*.py")
        if "inimage" not in path.parts and parsers.search(path.read_text())
    )
    assert homes == ["sglstack/core/records.py"], homes
