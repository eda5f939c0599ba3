#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint, unit and handler tests, then the end-to-end tests against a
# local control plane started here (its own state dir, so a `make run` cluster is left alone) and stopped on
# exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

export CLUSTER_DIR=${TEST_CLUSTER_DIR:-$PWD/.cluster-test}
started=0
cleanup() {
	status=$?
	if [[ $started == 1 ]]; then
		hack/cluster-down.sh || true
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== lint"
cargo fmt --all -- --check
cargo clippy --all-targets --features e2e -- -D warnings

echo "== build"
cargo build --bins --tests --features e2e
make --no-print-directory helm

echo "== control plane ($CLUSTER_DIR)"
if ! hack/cluster-up.sh --status >/dev/null 2>&1; then
	started=1
fi
make --no-print-directory cluster-up
hack/install-crds.sh "${CARGO_TARGET_DIR:-target}/debug/nac"

echo "== tests (unit, handler, end-to-end)"
results=$(mktemp)
cargo test --features e2e 2>&1 | tee "$results"

echo "== Helm chart (its own control plane in .cluster-chart)"
CLUSTER_DIR="$PWD/.cluster-chart" SKIP_BUILD=1 hack/chart-test.sh

# One closing line for the whole run (cargo prints one per test binary, the last being the empty doc tests).
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$results" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$results" | awk '{s += $1} END {print s + 0}')
rm -f "$results"
echo "tests: $passed passed, $failed failed"
