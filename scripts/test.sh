#!/usr/bin/env bash
# Set up everything the tests need (idempotent) and run them: Python deps, a real Docker engine with
# BuildKit, Compose v1, the distribution registry, a seeded debian:bookworm-slim; then ruff, mypy and pytest
# (hadolint runs inside pytest: tests/cli/test_render.py lints every rendered Dockerfile).
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/provision.sh
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
# The checkout's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, each `python -m invoke` the tests
# start would compile sglstack's modules again (~0.1 s of CPU a process). inimage/ goes into images as source.
python3 -m compileall -q -x '/inimage/' sglstack tasks.py tests/lib

# The docker CLI first on PATH may be a newer one without buildx; the tests use Debian's 20.10 CLI.
export SGLSTACK_DOCKER_CLI="${SGLSTACK_DOCKER_CLI:-/usr/bin/docker}"

echo "== ruff"
ruff check .
echo "== mypy"
mypy
echo "== pytest"
set +e
# -n 2 --dist loadgroup --no-loadscope-reorder: sglstack.cli.testing.ALL_TIERS_XDIST (the engine's tests in two
# ordered groups, one per worker from the start, the bisect ones beside the rest, and the fast tier after and
# between them; tests/unit/test_tiers.py holds the two the same).
python3 -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --no-loadscope-reorder --durations=15 "$@"
code=$?
set -e
# pytest exits 5 when it collected no tests: that is a broken suite here, not a pass.
if [ "$code" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$code"
