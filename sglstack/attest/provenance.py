"""Provenance: an in-toto Statement v1 with an SLSA provenance v1 predicate, from a build record (pure).

The subject is the image as the registry knows it (its manifest digest, known only once pushed); the
predicate says from what and by whom it was built: the stack's config hash, the lock's content sha256,
the base image digest, each patch's sha256, the SGLang source (a PyPI version or a git commit),
sglstack's own version and commit, the builder and the build time. BuildKit's own provenance
(`--attest type=provenance`, buildx only) is not attached: the classic builder cannot make it, and
buildx's `--load` exporter drops attestations; ours records what BuildKit could not know anyway.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config.schema import Stack
from ..core.errors import one_line
from ..core.inputs import loads
from .errors import AttestationError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
PROVENANCE_MEDIA_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "https://sglstack.dev/build/stack-image/v1"  # an identifier of our build's shape, not a URL to fetch


def _sglang_dependency(sglang: Mapping[str, Any], lock_commit: str | None) -> dict[str, Any]:
    git = sglang.get("git") or None
    if git:
        commit = str(git.get("ref") or lock_commit or "")
        return {"name": "sglang", "uri": f"git+{git.get('repo')}@{commit}", "digest": {"gitCommit": commit}}
    version = sglang.get("version")
    return {"name": "sglang", "uri": f"pkg:pypi/sglang@{version}"}


def provenance_statement(record: Mapping[str, Any], *, repository: str, digest: str) -> bytes:
    """The statement's canonical JSON bytes for the image `repository@digest` built as `record` says."""
    if not digest.startswith("sha256:"):
        raise AttestationError(f"provenance: '{digest}' is not a sha256 digest")
    try:
        facts = record["provenance"]
        base = record["base_image"]
        deps: list[dict[str, Any]] = []
        if base.get("digest"):
            deps.append({"name": "base-image", "uri": f"pkg:docker/{base['name']}",
                         "digest": {"sha256": str(base["digest"]).removeprefix("sha256:")}})
        if (record.get("lock") or {}).get("content_sha256"):
            deps.append({"name": "lock", "digest": {"sha256": record["lock"]["content_sha256"]}})
        for pid, sha in sorted((facts.get("patches") or {}).items()):
            deps.append({"name": f"patch:{pid}", "digest": {"sha256": sha}})
        deps.append(_sglang_dependency(record.get("sglang") or {}, facts.get("lock_sglang_commit")))
        builder = record.get("builder") or {}
        own = facts.get("sglstack") or {}
        predicate = {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"stack": record["stack"], "target": record["target"],
                                       "config_hash": record["config_hash"]},
                "internalParameters": {"pins": record.get("pins") or {}, "image_id": record["image_id"]},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": f"https://sglstack.dev/builder/{builder.get('kind', 'unknown')}",
                            "version": {"sglstack": str(own.get("version")),
                                        "sglstack-commit": str(own.get("commit")),
                                        "buildkit-client": str(builder.get("client_version"))}},
                "metadata": {"invocationId": f"{record['stack']}-{record['config_hash'][:12]}",
                             "startedOn": facts.get("started_at") or record["built_at"],
                             "finishedOn": record["built_at"]},
            },
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise AttestationError(f"the build record has no provenance facts ({exc}): rebuild with this "
                               f"sglstack to attest it") from None
    statement = {"_type": STATEMENT_TYPE, "predicateType": SLSA_PROVENANCE_V1,
                 "subject": [{"name": repository, "digest": {"sha256": digest.removeprefix("sha256:")}}],
                 "predicate": predicate}
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()


def _statement(body: bytes) -> dict[str, Any]:
    try:
        doc = loads(body)
        if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE \
                or doc.get("predicateType") != SLSA_PROVENANCE_V1:
            raise ValueError("not an in-toto SLSA provenance statement")
        return doc
    except ValueError as exc:
        raise AttestationError(f"the provenance is not an in-toto statement this tool wrote ({exc})") from None


def statement_subjects(body: bytes) -> list[str]:
    """The `sha256:` digests a statement's subjects name (what `verify-image` compares)."""
    doc = _statement(body)
    try:
        return [one_line(f"sha256:{s['digest']['sha256']}"[:71]) for s in doc["subject"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise AttestationError(f"the provenance is not an in-toto statement this tool wrote ({exc})") from None


# ---- what a signature binds: the stack, its config, its SGLang release ----------------------------------

@dataclass(frozen=True)
class BuildIdentity:
    """What a build is, as a provenance names it (found) or as the command line and the matrix say (expected):
    the stack, its config hash and the SGLang release (`pkg:pypi/sglang@V` or `git+REPO@COMMIT`). None
    in an expected identity: not asked (a config hash a git source's tree would be needed for)."""

    stack: str | None
    config_hash: str | None = None
    sglang: str | None = None

    @classmethod
    def of_stack(cls, stack: Stack, config_hash: str | None) -> BuildIdentity:
        """The identity `invoke build` would give `stack` now: its config hash as computed by the caller."""
        return cls(stack.name, config_hash, _sglang_dependency(stack.sglang.model_dump(mode="json"), None)["uri"])

    def as_dict(self) -> dict[str, str | None]:
        return {"stack": self.stack, "config_hash": self.config_hash, "sglang": self.sglang}

    def describe(self) -> str:
        """One phrase for a person: `stack 'cu130', config 1a2b3c4d5e6f, SGLang pkg:pypi/sglang@0.5.9`."""
        config = self.config_hash[:12] if self.config_hash else "unknown"
        return f"stack '{self.stack}', config {config}, SGLang {self.sglang or 'unknown'}"


def statement_identity(body: bytes) -> BuildIdentity:
    """The stack, config hash and SGLang release a provenance statement names (None where it names none)."""
    doc = _statement(body)
    predicate = doc.get("predicate")
    definition = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
    params = definition.get("externalParameters") if isinstance(definition, dict) else None
    deps = definition.get("resolvedDependencies") if isinstance(definition, dict) else None
    params = params if isinstance(params, dict) else {}
    sglang = next((d.get("uri") for d in deps if isinstance(d, dict) and d.get("name") == "sglang"), None) \
        if isinstance(deps, list) else None

    def text(value: Any) -> str | None:  # signed, still outside text: printed, so escaped and short
        return one_line(value[:200]) if isinstance(value, str) else None

    return BuildIdentity(text(params.get("stack")), text(params.get("config_hash")), text(sglang))


IDENTITY_FIELDS = (("stack", "stack"), ("config_hash", "config hash"), ("sglang", "SGLang release"))


def identity_differences(expected: BuildIdentity, found: BuildIdentity) -> list[str]:
    """Each field the signed provenance names otherwise than expected, as `FIELD: expected A, found B`
    (empty: it is this build). A field the expectation leaves None is not compared. The one rule of
    `verify-image --stack`, `deploy --verify-key`, `render --verify-key` and `publish --signing-key`."""
    out = []
    for name, label in IDENTITY_FIELDS:
        want, got = getattr(expected, name), getattr(found, name)
        if want is not None and want != got:
            shown = "nothing" if got is None else repr(got[:80])
            out.append(f"{label}: expected {want!r}, found {shown}")
    return out
