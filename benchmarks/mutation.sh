#!/usr/bin/env bash
# Mutation score of the pure core, module by module, with mutmut (a benchmark, not a CI job).
#
#   benchmarks/mutation.sh                 # every module below
#   benchmarks/mutation.sh confighash tags # only these
#   MUTATION_JOBS=4 benchmarks/mutation.sh # more parallel mutants (default 2)
#
# Each module runs in its own scratch copy of the checkout (build/mutation/<module>/, git-ignored):
# mutmut 3 reads its settings from the pyproject.toml of the folder it runs in and writes mutants/
# there, so the per-module settings (which files to mutate, which tests to run) go into the copy's
# pyproject.toml; the checkout's own [tool.mutmut] holds what all modules share. Only the fast pure
# tests run (no Docker, nothing slow; the patch engine's tests read SGLang wheels from the local
# wheel cache, filled once from PyPI). Prints killed / total and the time per module, and leaves
# `mutmut results` / `mutmut show NAME` usable in each copy to read the survivors.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${MUTATION_WORKDIR:-$ROOT/build/mutation}
JOBS=${MUTATION_JOBS:-2}
PY=${PYTHON:-python3}

# name | files to mutate (globs) | test files. Tests that start a child Python (an `invoke` task, the
# patch engine as the in-image tool runs it under `python -S`) are deselected: the child cannot import
# mutmut's trampolines, and what they check of the pure core the in-process tests check too.
MODULES=(
  "patchkit|sglstack/inimage/patchkit/engine.py sglstack/inimage/patchkit/structure.py sglstack/inimage/patchkit/files.py sglstack/inimage/patchkit/spec.py sglstack/inimage/patchkit/source.py sglstack/inimage/patchkit/versions.py|tests/e2e/test_patch_engine.py tests/unit/test_patch_bad_inputs.py tests/unit/test_patch_versions.py tests/unit/test_patch_spec.py tests/unit/test_patch_structure.py tests/unit/test_patch_apply.py tests/unit/test_patch_verify.py"
  "smoke|sglstack/smoke/gates.py sglstack/smoke/history.py sglstack/smoke/measure.py sglstack/smoke/since.py|tests/unit/test_smoke_gates.py tests/unit/test_smoke_since.py"
  "confighash|sglstack/render/confighash.py|tests/unit/test_confighash.py"
  "tags|sglstack/publish/tags.py sglstack/config/tagtemplates.py|tests/unit/test_publish_tags.py"
  "matrix|sglstack/config/matrix.py|tests/cli/test_matrix.py tests/cli/test_bad_inputs.py"
  "conflicts|sglstack/lock/conflicts.py|tests/unit/test_conflicts.py"
  "coverage|sglstack/coverage/rules.py|tests/unit/test_coverage_rules.py"
  "lock|sglstack/lockfile/model.py sglstack/lockfile/text.py sglstack/lockfile/current.py sglstack/lock/trust.py sglstack/diff/compare.py|tests/unit/test_lock_file.py tests/cli/test_lock_trust.py tests/cli/test_diff.py"
  "bisect-stats|sglstack/bisect/stats.py|tests/unit/test_bisect_stats.py"
  "serving|sglstack/serving/spec.py sglstack/serving/derive.py|tests/unit/test_serving.py tests/unit/test_promises.py tests/cli/test_smoke_plan.py tests/unit/test_compose_render.py tests/unit/test_compose_render_files.py tests/unit/test_k8s_render.py"
  "bisect-planner|sglstack/bisect/planner.py|tests/unit/test_bisect_planner.py"
  "smoke-plan|sglstack/smoke/plan.py sglstack/smoke/overrides.py sglstack/smoke/launch.py|tests/cli/test_smoke_plan.py tests/unit/test_smoke_options.py tests/unit/test_promises.py tests/unit/test_serving.py"
  "upgrade-plan|sglstack/upgrade/plan.py|tests/unit/test_upgrade_plan.py tests/unit/test_upgrade_coverage.py"
  "size-report|sglstack/size/report.py|tests/unit/test_image_size.py"
  "records|sglstack/core/records.py sglstack/core/clock.py|tests/unit/test_records_core.py tests/cli/test_files_and_records.py tests/unit/test_promises.py tests/cli/test_build_root.py tests/unit/test_store_not_a_file.py"
  "compose|sglstack/render/compose.py|tests/unit/test_compose_render.py tests/unit/test_compose_render_files.py tests/unit/test_promises.py tests/unit/test_serving.py"
  "k8s|sglstack/render/k8s.py sglstack/render/k8s_lws.py|tests/unit/test_k8s_render.py tests/unit/test_promises.py"
  "render|sglstack/render/dockerfile.py|tests/cli/test_render.py tests/unit/test_confighash.py tests/unit/test_promises.py tests/unit/test_serving_stage.py tests/unit/test_lock_plan.py"
  "imageref|sglstack/config/imageref.py sglstack/config/names.py|tests/unit/test_publish_tags.py tests/cli/test_matrix.py tests/unit/test_one_home.py"
  "bisect-driver|sglstack/bisect/driver.py sglstack/bisect/refs.py|tests/unit/test_bisect_session.py tests/unit/test_bisect_session_skips.py tests/cli/test_bisect_driver.py"
  "cudacopies|sglstack/size/cudacopies.py sglstack/config/cudaimages.py|tests/unit/test_cuda_copies.py"
  "verify|sglstack/imagebuild/verify.py sglstack/imagebuild/judge.py|tests/unit/test_image_checks.py tests/unit/test_jit_toolchain.py tests/unit/test_kernel_package.py tests/cli/test_lock_trust.py tests/unit/test_verify.py"
  "lock-flow|sglstack/lock/plan.py sglstack/lock/flow.py sglstack/lock/entries.py|tests/unit/test_lock_flow.py tests/unit/test_lock_flow_sources.py tests/unit/test_lock_flow_retries.py tests/unit/test_lock_plan.py tests/unit/test_kernel_package.py tests/unit/test_conflicts.py tests/unit/test_lock_resolver.py"
  "trust|sglstack/core/quoting.py sglstack/core/credentials.py|tests/unit/test_quoting_and_credentials.py tests/cli/test_credentials.py tests/cli/test_credentials_tools.py"
  "smoke-subject|sglstack/smoke/options.py sglstack/smoke/subject.py|tests/unit/test_smoke_subject.py tests/unit/test_smoke_options.py tests/cli/test_smoke_plan.py tests/unit/test_one_home.py"
  "safefiles|sglstack/core/safefiles.py sglstack/core/folderlock.py|tests/unit/test_safefiles.py tests/cli/test_files_and_records.py tests/unit/test_one_home.py tests/cli/test_build_root.py tests/unit/test_folder_lock.py"
  "promotion|sglstack/publish/promotion.py|tests/unit/test_publish_promotion.py tests/unit/test_publish_tags.py tests/unit/test_publish_promotion_records.py"
  "preflight|sglstack/inimage/preflight/checks.py sglstack/inimage/preflight/parse.py|tests/unit/test_preflight_checks.py tests/unit/test_preflight_parse.py tests/unit/test_coverage_preflight.py tests/unit/test_preflight_checks_whole.py"
  "attest|sglstack/attest/signing.py sglstack/attest/provenance.py sglstack/inventory/model.py sglstack/inventory/sbom.py|tests/cli/test_attest.py tests/cli/test_attest_trust.py tests/unit/test_attest_documents.py tests/unit/test_attest_signing_mutation.py tests/unit/test_attest_verification.py tests/unit/test_index_signing.py tests/unit/test_kernel_cache_registry.py tests/unit/test_attest_signers.py tests/unit/test_attest_keys_mutation.py tests/unit/test_attest_verify_mutation.py tests/unit/test_attest_provenance_mutation.py"
  "config|sglstack/config/schema.py sglstack/config/settings.py sglstack/config/strict.py sglstack/config/fields.py sglstack/config/yamlsrc.py|tests/cli/test_matrix.py tests/cli/test_bad_inputs.py tests/cli/test_foreign_values.py tests/cli/test_credentials.py tests/unit/test_kernel_package.py"
  "diff-sources|sglstack/diff/snapshots.py sglstack/diff/sources.py|tests/cli/test_tracebacks_left.py tests/unit/test_diff_sources.py tests/unit/test_diff_sources_registry.py"
  "coverage-report|sglstack/coverage/report.py sglstack/coverage/devicecode.py|tests/unit/test_coverage_rules.py tests/unit/test_kernel_package.py tests/unit/test_coverage_devicecode.py"
  "upgrade-sources|sglstack/upgrade/releases.py sglstack/upgrade/argv_probe.py|tests/unit/test_upgrade_releases.py tests/unit/test_upgrade_argv.py tests/unit/test_upgrade_plan.py"
  "upgrade-text|sglstack/upgrade/report.py sglstack/upgrade/stacksfile.py sglstack/upgrade/argv.py|tests/unit/test_upgrade_report.py tests/unit/test_upgrade_stacksfile.py tests/unit/test_upgrade_argv.py tests/unit/test_upgrade_plan.py"
  "upgrade-command|sglstack/upgrade/command.py sglstack/upgrade/engines.py sglstack/upgrade/inputs.py sglstack/upgrade/world.py sglstack/upgrade/planning.py sglstack/upgrade/edit.py sglstack/upgrade/locks.py|tests/unit/test_upgrade_command.py tests/unit/test_upgrade_command_mutation.py tests/unit/test_upgrade_plan.py tests/unit/test_upgrade_platforms.py tests/unit/test_upgrade_write.py tests/unit/test_upgrade_speculative.py"
  "upgrade-edits|sglstack/upgrade/renames.py sglstack/upgrade/speculative.py sglstack/upgrade/splice.py|tests/unit/test_upgrade_renames.py tests/unit/test_upgrade_edits_mutation.py tests/unit/test_upgrade_speculative.py tests/unit/test_upgrade_stacksfile.py tests/unit/test_upgrade_command.py tests/unit/test_upgrade_write.py"
  "registry|sglstack/registry/client.py sglstack/registry/session.py sglstack/registry/transport.py sglstack/registry/auth.py|tests/unit/test_registry_client.py tests/unit/test_registry_client_api.py tests/unit/test_registry_credentials.py tests/unit/test_registry_transport.py tests/unit/test_registry_platforms.py tests/unit/test_registry_client_auth.py tests/unit/test_registry_client_calls.py"
  "registry-transport|sglstack/registry/session.py sglstack/registry/transport.py|tests/unit/test_registry_transport.py tests/unit/test_registry_transport_mutation.py tests/unit/test_registry_client_auth.py tests/unit/test_registry_client_calls.py"
  "deploy-flow|sglstack/deploy/flow.py sglstack/deploy/deployment.py sglstack/deploy/restore.py sglstack/deploy/lifecycle.py|tests/unit/test_deploy_flow.py tests/unit/test_deploy_wait_limit.py tests/cli/test_deploy_store_trust.py tests/cli/test_deploy_records.py tests/unit/test_deploy_flow_failed.py tests/unit/test_deploy_flow_records.py"
  "deploy-k8s|sglstack/deploy/k8s_flow.py|tests/unit/test_deploy_k8s_flow.py tests/unit/test_k8s_rollout_state.py tests/unit/test_deploy_wait_limit.py tests/cli/test_deploy_k8s.py tests/unit/test_deploy_k8s_flow_rollback.py"
  "process-adapter|sglstack/adapters/process.py sglstack/smoke/processenv.py|tests/unit/test_process_adapter.py tests/unit/test_process_adapter_mutation.py tests/unit/test_secret_holes.py"
  "smoke-runner|sglstack/smoke/runner.py sglstack/smoke/server.py sglstack/smoke/measured.py|tests/unit/test_smoke_runner_inproc.py tests/unit/test_smoke_runner_caches.py tests/unit/test_smoke_runner_docker_seam.py tests/unit/test_smoke_runner_refusals.py tests/unit/test_smoke_server_seams.py tests/unit/test_smoke_measured_clock.py tests/unit/test_smoke_measured_phases.py tests/unit/test_smoke_server_log.py tests/cli/test_smoke_plan.py tests/unit/test_smoke_runner_docker_more.py tests/unit/test_smoke_runner_process_more.py"
  "size-measure|sglstack/size/measure.py|tests/unit/test_image_size.py tests/unit/test_size_measure.py"
  "attest-store|sglstack/attest/release.py sglstack/attest/store.py sglstack/attest/verify.py sglstack/inventory/listing.py sglstack/imagebuild/identity.py|tests/cli/test_attest.py tests/cli/test_attest_trust.py tests/unit/test_attest_documents.py tests/unit/test_attest_verification.py tests/unit/test_attest_image.py tests/unit/test_index_signing.py tests/unit/test_kernel_cache_registry.py tests/unit/test_attest_signers.py tests/unit/test_attest_store_mutation.py tests/unit/test_attest_verify_mutation.py tests/unit/test_attest_release_mutation.py tests/unit/test_attest_ensure_signed_mutation.py tests/unit/test_attest_index_signed_mutation.py tests/unit/test_attest_shapes_mutation.py"
)

if ! "$PY" -c "import mutmut" 2>/dev/null; then
  echo "installing mutmut (the 'mutation' extra)" >&2
  "$PY" -m pip install -q "mutmut>=3.8,<4"
fi

selected=("$@")
wanted() {
  [ ${#selected[@]} -eq 0 ] && return 0
  local s
  for s in "${selected[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}

printf '%-14s %8s %8s %8s %8s %8s\n' module killed survived no_tests total seconds
for spec in "${MODULES[@]}"; do
  IFS='|' read -r name files tests <<<"${spec//$'\n'/ }"
  wanted "$name" || continue
  dest="$WORK/$name"
  rm -rf "$dest"
  mkdir -p "$dest"
  # The checkout as git sees it (tracked and new, not ignored files), links kept as links.
  (cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$dest"
  deselect=()
  CHILD='run_invoke\\(|subprocess\\.|sys\\.executable|_patchkit_as_user\\('
  for f in $tests; do
    # Two passes over the file: the first finds the helpers that start a child, the second the tests
    # that start one themselves or through such a helper.
    while read -r t; do deselect+=("--deselect=$f::$t"); done < <(awk -v CHILD="$CHILD" '
      /^(async )?def / { n = split($0, w, /[ (]+/); name = (w[1] == "def" ? w[2] : w[3]) }
      /^[^ \t#@]/ && !/^(async )?def / { name = "" }
      FNR == NR { if (name != "" && name !~ /^test_/ && $0 ~ CHILD) helper[name] = 1; next }
      name ~ /^test_/ {
        if ($0 ~ CHILD) { print name; next }
        for (h in helper) if (index($0, h "(")) { print name; next }
      }' "$ROOT/$f" "$ROOT/$f" | sort -u)
  done
  "$PY" - "$dest/pyproject.toml" "$files" "$tests ${deselect[*]}" <<'EOF'
import json, sys, tomllib
path, files, tests = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
text = open(path, encoding="utf-8").read()
shared = tomllib.loads(text)["tool"]["mutmut"]
head, _, rest = text.partition("[tool.mutmut]")
# drop the shared section (up to the next table) and write it back with this module's keys
tail = rest[rest.find("\n[") + 1:] if "\n[" in rest else ""
settings = dict(shared, only_mutate=files, pytest_add_cli_args_test_selection=tests,
                use_git_change_detection=False)
section = "[tool.mutmut]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
open(path, "w", encoding="utf-8").write(head + section + "\n" + tail)
EOF
  start=$(date +%s)
  (cd "$dest" && "$PY" -m mutmut run --max-children "$JOBS" >"$dest/mutmut-run.log" 2>&1) || {
    echo "$name: mutmut run failed, see $dest/mutmut-run.log" >&2; tail -20 "$dest/mutmut-run.log" >&2; continue; }
  seconds=$(( $(date +%s) - start ))
  (cd "$dest" && "$PY" -m mutmut export-cicd-stats >/dev/null)
  "$PY" - "$dest/mutants/mutmut-cicd-stats.json" "$name" "$seconds" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]:<14} {s['killed'] + s['timeout']:>8} {s['survived']:>8} {s['no_tests']:>8} {s['total']:>8} "
      f"{sys.argv[3]:>8}")
EOF
done
