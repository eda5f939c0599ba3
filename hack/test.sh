#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint, unit and handler tests, then the end-to-end tests against two local
# environments started here, the Helm chart tests, and the end-to-end suite again against what the chart installs
# (another control plane). Each environment has its own state dir, so a `make run` cluster is left alone, and
# every one started here is stopped on exit, also on failure or Ctrl-C:
#   $CLUSTER_DIR         (.cluster-test)   VELERO_MODE=fake: tests that play Velero by patching status (queue
#                                          races, failures, HA, restarts) and the webhook/policy tests;
#   $VELERO_CLUSTER_DIR  (.cluster-velero) VELERO_MODE=real: the real Velero and S3 server (tests/e2e_velero.rs,
#                                          tests/e2e_rights_locations.rs: tenants' own locations within their rights;
#                                          tests/e2e_faults.rs kills its parts, one test binary at a time);
#   $NODE_CLUSTER_DIR    (.cluster-node)   NODE=1 (root): a real node, nac installed by Helm from its image,
#                                          Velero and its node agent in pods (tests/e2e_node.rs).
# The documentation check (hack/docs-check.sh) starts and stops a `make run` environment of its own (.cluster-docs),
# and hack/run-signals-check.sh four (.cluster-signals, one after the other) to stop them with signals.
set -euo pipefail
cd "$(dirname "$0")/.."

export CLUSTER_DIR=${TEST_CLUSTER_DIR:-$PWD/.cluster-test}
export VELERO_CLUSTER_DIR=${TEST_VELERO_CLUSTER_DIR:-$PWD/.cluster-velero}
E2E_CHART_CLUSTER_DIR=${TEST_E2E_CHART_CLUSTER_DIR:-$PWD/.cluster-e2e-chart}
NODE_CLUSTER_DIR=${TEST_NODE_CLUSTER_DIR:-$PWD/.cluster-node}
started=() # state dirs of the control planes started here
cleanup() {
	status=$?
	local dir
	for dir in ${started[@]+"${started[@]}"}; do
		CLUSTER_DIR=$dir hack/cluster-down.sh || true
	done
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# up DIR MODE: the environment in DIR, started (and later stopped) here unless it already runs.
up() {
	if ! CLUSTER_DIR=$1 hack/cluster-up.sh --status >/dev/null 2>&1; then
		started+=("$1")
	fi
	CLUSTER_DIR=$1 VELERO_MODE=$2 make --no-print-directory cluster-up
	CLUSTER_DIR=$1 hack/install-crds.sh "${CARGO_TARGET_DIR:-target}/debug/nac"
	# Velero learns the API's kinds when it starts: restarted, it backs up nac's kinds unless told not to, so
	# the tests that look for them in a backup's resource list can find them.
	if [[ $2 == real ]]; then CLUSTER_DIR=$1 hack/velero-up.sh --restart; fi
}

echo "== lint"
cargo fmt --all -- --check
cargo clippy --all-targets --features e2e,node -- -D warnings
hack/docs-check.sh links
hack/import-cycles.py src

echo "== build"
cargo build --bins --tests --features e2e
make --no-print-directory helm cluster-tools velero-tools

echo "== environments: $CLUSTER_DIR (fake Velero), $VELERO_CLUSTER_DIR (real Velero)"
up "$CLUSTER_DIR" fake
up "$VELERO_CLUSTER_DIR" real

echo "== tests (unit, handler, end-to-end)"
results=$(mktemp)
cargo test --features e2e 2>&1 | tee "$results"

echo "== documentation: the README's and the guides' command blocks against a make run environment (.cluster-docs)"
DOCS_CLUSTER_DIR=${TEST_DOCS_CLUSTER_DIR:-$PWD/.cluster-docs} hack/docs-check.sh blocks

echo "== make run stopped by Ctrl-C, SIGTERM, SIGHUP leaves nothing running (its own environments, .cluster-signals)"
SIGNALS_CLUSTER_DIR=${TEST_SIGNALS_CLUSTER_DIR:-$PWD/.cluster-signals} hack/run-signals-check.sh

echo "== Helm chart (its own control plane in .cluster-chart)"
CLUSTER_DIR="$PWD/.cluster-chart" SKIP_BUILD=1 hack/chart-test.sh

echo "== end-to-end suite against the installed Helm chart (its own control plane in $E2E_CHART_CLUSTER_DIR)"
# NAC_E2E_CHART=1: the harness installs charts/nac with `helm upgrade --install` (webhooks by URL at the local
# nac, the chart's RBAC, user roles and policy ConfigMap) and runs nac with a token of the chart's
# ServiceAccount. On a fresh control plane the chart installs the CRDs (crds/); on one left running, apply them
# first, as for an upgrade (Helm never upgrades crds/). e2e_restart is left out: it restarts the API server,
# which tests nac's watches, not anything the chart installs.
if CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR hack/cluster-up.sh --status >/dev/null 2>&1; then
	CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR hack/install-crds.sh -f charts/nac/crds
else
	started+=("$E2E_CHART_CLUSTER_DIR")
	CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR VELERO_MODE=fake make --no-print-directory cluster-up
fi
CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR NAC_E2E_CHART=1 cargo test --features e2e \
	--test e2e_webhooks --test e2e_controller --test e2e_policy --test e2e_ha 2>&1 | tee -a "$results"

echo "== nac as it ships: its image, Helm on a real node, file-system backup (its own environment in $NODE_CLUSTER_DIR)"
node_run=true
if ((EUID == 0)); then
	make --no-print-directory image
	hack/containerfile-check.sh
	machine_before=$(mktemp)
	hack/node-check-clean.sh --snapshot "$machine_before"
	if ! CLUSTER_DIR=$NODE_CLUSTER_DIR hack/cluster-up.sh --status >/dev/null 2>&1; then
		started+=("$NODE_CLUSTER_DIR")
	fi
	CLUSTER_DIR=$NODE_CLUSTER_DIR NODE=1 make --no-print-directory cluster-up
	NODE_CLUSTER_DIR=$NODE_CLUSTER_DIR cargo test --features e2e,node --test e2e_node -- --test-threads=1 2>&1 |
		tee -a "$results"
	# The node leaves the machine as it found it: checked here, so a later run (a developer's, CI's) starts clean.
	CLUSTER_DIR=$NODE_CLUSTER_DIR hack/cluster-down.sh
	kept=()
	for dir in "${started[@]}"; do [[ $dir == "$NODE_CLUSTER_DIR" ]] || kept+=("$dir"); done
	started=(${kept[@]+"${kept[@]}"})
	hack/node-check-clean.sh "$machine_before"
	rm -f "$machine_before"
else
	node_run=false
fi

# One closing line for the whole run (cargo prints one per test binary, the last being the empty doc tests).
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$results" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$results" | awk '{s += $1} END {print s + 0}')
rm -f "$results"
echo "tests: $passed passed, $failed failed"
if ! $node_run; then
	echo "test: the node suite (tests/e2e_node.rs) needs root (containerd, kubelet, iptables) and did not run" >&2
	exit 1
fi
