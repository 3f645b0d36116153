"""Pure tag policy and option parsing: no Docker, no registry."""

from __future__ import annotations

import datetime as dt

import pytest

from sglstack.config.imageref import is_digest, parse_image_reference, parse_repository
from sglstack.config.matrix import load_matrix
from sglstack.core.errors import ConfigError
from sglstack.publish import PublishError, parse_smoke_opts, target_repository
from sglstack.publish.tags import candidate_tag_pattern, immutable_tag_pattern, release_tags, validate_template

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
    from sglstack.config.schema import SGLangSource

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
    got = parse_smoke_opts(["gpus=0", "env=A=1", "env=B=x=y", "mount=/a:/b", "mount=/c:/d", "min-speedup=1.2"])
    assert got == {"gpus": "0", "env": {"A": "1", "B": "x=y"}, "mounts": ["/a:/b", "/c:/d"], "min_speedup": "1.2"}
    with pytest.raises(PublishError, match="expected KEY=VALUE"):
        parse_smoke_opts(["gpus"])
    with pytest.raises(PublishError, match="env=NAME=VALUE"):
        parse_smoke_opts(["env=oops"])


def test_smoke_opts_are_accepted_by_the_smoke_options(stacks):
    from sglstack.smoke import smoke_options

    opts = smoke_options(stacks.get("cu130"), **parse_smoke_opts(["gpus=0", "tp=1", "env=K=V", "min_speedup=1.5"]))
    assert opts.gpus == 0 and opts.tp == 1 and opts.env["K"] == "V" and opts.gates.min_speedup == 1.5


# ---- the exact one-line errors: every message names its stack and key ------------------------------

KNOWN = "(known: {sglang}, {stack}, {date}, {confighash8}, {confighash12})"
CHARS = "(allowed: letters, digits, '_', '.', '-')"
NEEDS_HASH = "must contain {confighash8} or {confighash12}: otherwise two configs could claim the same tag"


def config_error(call, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        call(*args, **kwargs)
    return str(err.value)


@pytest.mark.parametrize(
    ("template", "require_hash", "reason"),
    [
        ("{branch}", False, f"tag template '{{branch}}' has unknown placeholder '{{branch}}' {KNOWN}"),
        # `{{` is a literal brace: the placeholder after it is still checked, and named first.
        ("x{{{branch}-{confighash8}", False,
         f"tag template 'x{{{{{{branch}}-{{confighash8}}' has unknown placeholder '{{branch}}' {KNOWN}"),
        ("{stack!r}", False, "tag template '{stack!r}' uses a format spec; write plain '{stack}'"),
        ("{stack", False, "tag template '{stack' is malformed: expected '}' before end of string"),
        ("", False, "tag template is empty"),
        ("a b{confighash8}", False,
         f"tag template 'a b{{confighash8}}' has characters a docker tag cannot hold {CHARS}"),
        ("{stack}", True, f"tag template '{{stack}}' {NEEDS_HASH}"),
    ],
)
def test_template_errors_are_exact_lines(template, require_hash, reason):
    message = config_error(validate_template, template, stack="cu130", key="publish.moving_tags[0]",
                           require_hash=require_hash)
    assert message == f"stack 'cu130': key 'publish.moving_tags[0]': {reason}"


def test_a_template_without_a_hash_is_fine_where_none_is_required():
    validate_template("{sglang}-{stack}", key="publish.moving_tags[0]")
    validate_template("{stack}-{confighash12}", key="publish.candidate_tag", require_hash=True)


def with_publish(stack, **update):
    return stack.model_copy(update={"publish": stack.publish.model_copy(update=update)})


LONG = "x" * 120 + "-{confighash12}"  # passes the template check, renders to 133 characters
LONG_TAG = "x" * 120 + "-1a2b3c4d5e6f"


@pytest.mark.parametrize(
    ("update", "line"),
    [
        ({"repository": "Bad/x"}, "key 'publish.repository': 'Bad/x' is not a valid repository "
                                  "(lowercase path components like 'host:port/team/name')"),
        ({"immutable_tag": "{stack}"}, f"key 'publish.immutable_tag': tag template '{{stack}}' {NEEDS_HASH}"),
        ({"candidate_tag": "{stack}"}, f"key 'publish.candidate_tag': tag template '{{stack}}' {NEEDS_HASH}"),
        ({"moving_tags": ("ok", "a b")},
         f"key 'publish.moving_tags[1]': tag template 'a b' has characters a docker tag cannot hold {CHARS}"),
        ({"moving_tags": ("{stack}", "{stack}")},
         "key 'publish': candidate, immutable and moving tag templates must all differ"),
        ({"immutable_tag": "candidate-{stack}-{confighash12}"},
         "key 'publish': candidate, immutable and moving tag templates must all differ"),
        ({"candidate_tag": LONG}, f"key 'publish.candidate_tag': tag '{LONG_TAG}' from template '{LONG}' is not a "
                                  "valid docker tag (at most 128 characters, not starting with '.' or '-')"),
        ({"immutable_tag": LONG}, f"key 'publish.immutable_tag': tag '{LONG_TAG}' from template '{LONG}' is not a "
                                  "valid docker tag (at most 128 characters, not starting with '.' or '-')"),
        ({"moving_tags": ("ok", "y" * 129)},
         f"key 'publish.moving_tags[1]': tag '{'y' * 129}' from template '{'y' * 129}' is not a valid docker tag "
         "(at most 128 characters, not starting with '.' or '-')"),
    ],
)
def test_release_tags_errors_are_exact_lines(stacks, update, line):
    message = config_error(release_tags, with_publish(stacks.get("cu130"), **update), HASH, DAY)
    assert message == f"stack 'cu130': {line}"


def test_a_bad_config_hash_is_an_exact_line(stacks):
    assert config_error(release_tags, stacks.get("cu130"), "xyz", DAY) == (
        "stack 'cu130': config hash 'xyz' is not a hex digest of at least 12 characters")


def test_characters_a_tag_cannot_hold_become_one_dash(stacks):
    from sglstack.config.schema import SGLangSource

    stack = stacks.get("cu130").model_copy(update={"sglang": SGLangSource(version="0.5.9+Local")})
    tags = release_tags(stack, HASH, DAY)
    assert tags.immutable == "0.5.9-Local-cu130-20261202-1a2b3c4d"
    assert tags.moving == ("0.5.9-Local-cu130", "cu130")


def test_the_candidate_pattern_matches_every_candidate_release_tags_makes(stacks):
    from sglstack.config.schema import SGLangSource

    every = "c-{sglang}-{stack}-{date}-{confighash8}-{confighash12}"
    base = with_publish(stacks.get("cu130"), candidate_tag=every)
    pattern = candidate_tag_pattern(base.publish)
    for version in ("0.5.9", "0.5.9+Local", "0.5.10rc1"):
        stack = base.model_copy(update={"sglang": SGLangSource(version=version)})
        assert pattern.fullmatch(release_tags(stack, HASH, DAY).candidate)
    assert pattern.fullmatch("c-0.5.9-cu130-20261202-1a2b3c4d-1a2b3c4d5e6f")
    assert not pattern.fullmatch("c-0.5.9-cu130-2026120-1a2b3c4d-1a2b3c4d5e6f")  # a 7-digit date
    assert not pattern.fullmatch("c-0.5.9-cu130-20261202-1A2B3C4D-1a2b3c4d5e6f")  # upper-case hex
    assert not pattern.fullmatch("c-0.5.9-cu130-20261202-1a2b3c4d-1a2b3c4d5e6")  # 11 hex digits


def test_repository_refs_use_a_colon_for_tags_and_an_at_for_digests():
    repo = parse_repository("127.0.0.1:5000/sglstack/sglang")
    assert repo.ref("cu130") == "127.0.0.1:5000/sglstack/sglang:cu130"
    assert repo.ref("sha256:" + "c" * 64) == "127.0.0.1:5000/sglstack/sglang@sha256:" + "c" * 64


REPOSITORY = "is not a valid repository (lowercase path components like 'host:port/team/name')"


@pytest.mark.parametrize(
    ("repository", "reason"),
    [
        ("ghcr.io/Team/Image", f"'ghcr.io/Team/Image' {REPOSITORY}"),
        ("a..b/x", "'a..b/x' has an invalid registry host 'a..b'"),
        ("r.example/" + "a" * 246, f"'r.example/{'a' * 30}...' is longer than 255 characters"),
        # brackets without a colon are no IPv6 literal, so no host: a path component Docker refuses
        ("[ab]/x", f"'[ab]/x' {REPOSITORY}"),
    ],
)
def test_repository_errors_are_exact_lines(repository, reason):
    assert config_error(parse_repository, repository) == f"key 'repository': {reason}"
    assert config_error(parse_repository, repository, stack="cu130", key="publish.repository") == (
        f"stack 'cu130': key 'publish.repository': {reason}")


def test_a_repository_of_255_characters_is_the_longest():
    assert parse_repository("r.example/" + "a" * 245).path == "a" * 245


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("r/a@sha256:x", "'r/a@sha256:x' has an invalid digest (expected sha256:<64 hex>)"),
        ("r.example/a:-x", "'r.example/a:-x' has an invalid tag '-x' (letters, digits, '_', '.', '-'; at most 128)"),
        ("r.example/a:t]", "'r.example/a:t]' has an invalid tag 't]' (letters, digits, '_', '.', '-'; at most 128)"),
        ("r.example/A:x", f"'r.example/A' {REPOSITORY}"),
        # only the last path component can hold the tag: a colon before it is a bad component
        ("r.example/a:b/c", f"'r.example/a:b/c' {REPOSITORY}"),
        # a bracketed IPv6 host alone: no tag in it, and no repository either
        ("[::1]", f"'[::1]' {REPOSITORY}"),
    ],
)
def test_image_reference_errors_are_exact_lines(ref, reason):
    assert config_error(parse_image_reference, ref) == f"key 'image': {reason}"
    assert config_error(parse_image_reference, ref, stack="cu130", key="--image") == (
        f"stack 'cu130': key '--image': {reason}")


@pytest.mark.parametrize("moving", [("{sglang}-{stack}", "{stack}"), ("{stack}", "latest-{stack}", "{sglang}-{stack}")])
def test_the_release_tag_pattern_matches_every_release_tag_and_no_candidate(stacks, moving):
    """`publish-index --tag` refuses any release tag of the stack: each of its moving tags, not the first alone."""
    from sglstack.publish.tags import release_tag_pattern

    base = stacks.get("cu130")
    stack = base.model_copy(update={"publish": base.publish.model_copy(update={"moving_tags": moving})})
    pattern = release_tag_pattern(stack)
    tags = release_tags(stack, HASH, DAY)
    assert len(tags.moving) == len(moving)
    for tag in tags.release:
        assert pattern.fullmatch(tag), tag
    assert pattern.fullmatch(release_tags(stack, "f" * 64, dt.date(2027, 1, 31)).immutable)
    assert not pattern.fullmatch(tags.candidate)
    assert not pattern.fullmatch("cu130-latest")
