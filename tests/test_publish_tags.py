"""Pure tag policy and option parsing: no Docker, no registry."""

from __future__ import annotations

import datetime as dt

import pytest

from sglstack.errors import ConfigError
from sglstack.matrix import load_matrix
from sglstack.publish import PublishError, parse_smoke_opts, target_repository
from sglstack.tags import (
    candidate_tag_pattern,
    immutable_tag_pattern,
    is_digest,
    parse_image_reference,
    parse_repository,
    release_tags,
    validate_template,
)

HASH = "1a2b3c4d5e6f77889900aabbccddeeff00112233445566778899aabbccddeeff"
DAY = dt.date(2026, 12, 2)


@pytest.fixture(scope="module")
def stacks(repo_root):
    return load_matrix(repo_root / "stacks.yaml")


def test_release_tags_follow_the_issue_examples(stacks):
    tags = release_tags(stacks.get("cu130"), HASH, DAY)
    assert tags.immutable == "0.5.9-cu130-20261202-1a2b3c4d"
    assert tags.moving == ("0.5.9-cu130", "cu130")
    assert tags.candidate == "candidate-cu130-1a2b3c4d5e6f"
    assert tags.release == ("0.5.9-cu130-20261202-1a2b3c4d", "0.5.9-cu130", "cu130")


def test_per_stack_templates_override_defaults(stacks):
    stack = stacks.get("cu130").model_copy(
        update={
            "publish": stacks.get("cu130").publish.model_copy(
                update={"immutable_tag": "v{sglang}_{stack}.{confighash12}", "moving_tags": ("latest-{stack}",)}
            )
        }
    )
    tags = release_tags(stack, HASH, DAY)
    assert tags.immutable == "v0.5.9_cu130.1a2b3c4d5e6f"
    assert tags.moving == ("latest-cu130",)


def test_git_sources_give_valid_tags(stacks):
    base = stacks.get("cu130")
    from sglstack.matrix import SGLangSource

    git = SGLangSource(git={"repo": "https://example.invalid/sglang", "ref": "ab" * 20})
    stack = base.model_copy(update={"sglang": git})
    assert release_tags(stack, HASH, DAY).immutable == "git-abababababab-cu130-20261202-1a2b3c4d"


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{sglang}-{branch}-{confighash8}", "unknown placeholder '{branch}'"),
        ("{sglang}:{stack}-{confighash8}", "characters a docker tag cannot hold"),
        ("{sglang}-{stack}-{date}", "must contain {confighash8} or {confighash12}"),
        ("{confighash8:>10}", "format spec"),
        ("{sglang", "malformed"),
    ],
)
def test_bad_templates_are_refused_with_their_key(template, needle):
    with pytest.raises(ConfigError) as err:
        validate_template(template, stack="cu130", key="publish.immutable_tag", require_hash=True)
    assert needle in str(err.value)
    assert "stack 'cu130'" in str(err.value) and "key 'publish.immutable_tag'" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_tag_over_128_characters_is_refused(stacks):
    base = stacks.get("cu130")
    stack = base.model_copy(
        update={"publish": base.publish.model_copy(update={"immutable_tag": "x" * 120 + "-{confighash12}"})}
    )
    with pytest.raises(ConfigError, match="not a valid docker tag"):
        release_tags(stack, HASH, DAY)


def test_config_hash_must_be_hex(stacks):
    with pytest.raises(ConfigError, match="config hash"):
        release_tags(stacks.get("cu130"), "not-a-hash", DAY)


def test_immutable_pattern_matches_any_date_of_the_same_config_only(stacks):
    stack = stacks.get("cu130")
    pattern = immutable_tag_pattern(stack, HASH)
    assert pattern.fullmatch("0.5.9-cu130-20270101-1a2b3c4d")
    assert not pattern.fullmatch("0.5.9-cu130-20270101-ffffffff")
    assert not pattern.fullmatch("0.5.9-cu129-20270101-1a2b3c4d")
    assert not pattern.fullmatch("0.5.9-cu130")


def test_candidate_pattern(stacks):
    pattern = candidate_tag_pattern(stacks.get("cu130").publish)
    assert pattern.fullmatch("candidate-cu130-1a2b3c4d5e6f")
    assert pattern.fullmatch("candidate-cu130-sglang0510-1a2b3c4d5e6f")
    assert not pattern.fullmatch("0.5.9-cu130")


def test_repository_parsing():
    assert str(parse_repository("127.0.0.1:5000/sglstack/sglang")) == "127.0.0.1:5000/sglstack/sglang"
    assert parse_repository("127.0.0.1:5000/sglstack/sglang").registry == "127.0.0.1:5000"
    assert parse_repository("lmsysorg/sglang").registry == "docker.io"
    assert parse_repository("ubuntu").path == "library/ubuntu"
    assert parse_repository("localhost/x").registry == "localhost"
    with pytest.raises(ConfigError, match="not a valid repository"):
        parse_repository("ghcr.io/Team/Image")
    ref = parse_image_reference("127.0.0.1:5000/a/b@sha256:" + "0" * 64)
    assert ref.digest == "sha256:" + "0" * 64 and ref.tag is None and ref.repository.path == "a/b"
    assert parse_image_reference("127.0.0.1:5000/a/b:cu130").tag == "cu130"


@pytest.mark.parametrize(
    ("ref", "canonical"),
    [
        ("ubuntu", "docker.io/library/ubuntu"),
        ("lmsysorg/sglang:v0.5.9-cu130", "docker.io/lmsysorg/sglang:v0.5.9-cu130"),
        ("localhost:5000/x:1", "localhost:5000/x:1"),
        ("[::1]:5000/a/b@sha256:" + "a" * 64, "[::1]:5000/a/b@sha256:" + "a" * 64),
        ("127.0.0.1:5000/a/b:t@sha256:" + "b" * 64, "127.0.0.1:5000/a/b:t@sha256:" + "b" * 64),
    ],
)
def test_one_reference_parser_round_trips(ref, canonical):
    assert str(parse_image_reference(ref)) == canonical


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("a..b/x", "invalid registry host 'a..b'"),
        ("host-.example/x", "invalid registry host"),
        ("r.example/a/b@sha256:short", "invalid digest"),
        ("r.example/a/b@md5:" + "0" * 32, "invalid digest"),
        ("r.example/a/b:-bad", "invalid tag '-bad'"),
        ("r.example/Team/b", "not a valid repository"),
    ],
)
def test_bad_references_are_one_line_errors_naming_the_key(ref, needle):
    with pytest.raises(ConfigError) as err:
        parse_image_reference(ref, stack="cu130", key="--image")
    assert needle in str(err.value) and "key '--image'" in str(err.value) and "\n" not in str(err.value)


def test_is_digest_is_sha256_only():
    assert is_digest("sha256:" + "0" * 64)
    assert not is_digest("sha256:" + "0" * 63) and not is_digest("sha256:" + "A" * 64) and not is_digest("1a2b3c")


def test_registry_option_overrides_host_or_whole_repository(stacks):
    stack = stacks.get("cu130")
    assert str(target_repository(stack, None)) == "127.0.0.1:5000/sglstack/sglang"
    assert str(target_repository(stack, "registry.example.com:443")) == "registry.example.com:443/sglstack/sglang"
    assert str(target_repository(stack, "ghcr.io/team/sglang")) == "ghcr.io/team/sglang"


def test_smoke_opts_parse_into_smoke_overrides():
    got = parse_smoke_opts(["gpus=0", "env=A=1", "env=B=x=y", "mounts=/a:/b", "mounts=/c:/d", "min-speedup=1.2"])
    assert got == {"gpus": "0", "env": {"A": "1", "B": "x=y"}, "mounts": ["/a:/b", "/c:/d"], "min_speedup": "1.2"}
    with pytest.raises(PublishError, match="not KEY=VALUE"):
        parse_smoke_opts(["gpus"])
    with pytest.raises(PublishError, match="env=NAME=VALUE"):
        parse_smoke_opts(["env=oops"])


def test_smoke_opts_are_accepted_by_the_smoke_options(stacks):
    from sglstack.smoke import smoke_options

    opts = smoke_options(stacks.get("cu130"), **parse_smoke_opts(["gpus=0", "tp=1", "env=K=V", "min_speedup=1.5"]))
    assert opts.gpus == 0 and opts.tp == 1 and opts.env["K"] == "V" and opts.gates.min_speedup == 1.5
