#!/usr/bin/env bash
# Admission benchmark (tests/admission_bench.rs): NonAdminBackup creates through the API server with no admission,
# nac's webhook (and variants: two calls, HTTP/1.1, rights off, another build), the least a webhook call costs, and
# in-process CEL policies, interleaved. On a control plane of its own (fake Velero: nothing but the API server
# matters here), started here and always stopped again.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_DIR=${ADMISSION_CLUSTER_DIR:-$PWD/.cluster-admission}
started=0
if ! hack/cluster-up.sh --status >/dev/null 2>&1; then
	started=1
fi
cleanup() {
	status=$?
	[[ $started == 1 ]] && hack/cluster-down.sh || true
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cargo build --release --bins
VELERO_MODE=fake make --no-print-directory cluster-up
hack/install-crds.sh "${CARGO_TARGET_DIR:-target}/release/nac"
cargo test --release --features e2e,scale --test admission_bench -- --nocapture
