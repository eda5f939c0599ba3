#!/usr/bin/env bash
# `make run`: a local control plane (or the cluster KUBECONFIG points at), nac's CRDs, the strict example
# policy, a demo tenant, and nac itself in the foreground. Ctrl-C stops nac and the control plane it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

POLICY=${POLICY:-policies/strict.yaml}
DEMO_NS=${DEMO_NS:-demo}
DEMO_USER=${DEMO_USER:-demo-user}
NAC_NS=nac-system

started_cluster=0
nac_pid=
cleanup() {
	trap - EXIT INT TERM
	if [[ -n $nac_pid ]] && kill -0 "$nac_pid" 2>/dev/null; then
		kill -TERM "$nac_pid" 2>/dev/null || true
		wait "$nac_pid" 2>/dev/null || true
	fi
	if [[ -n ${KUBECTL:-} && -n ${KUBECONFIG:-} ]]; then
		"$KUBECTL" delete mutatingwebhookconfiguration nac-mutating --ignore-not-found >/dev/null 2>&1 || true
		"$KUBECTL" delete validatingwebhookconfiguration nac-validating --ignore-not-found >/dev/null 2>&1 || true
	fi
	if [[ $started_cluster == 1 ]]; then
		hack/cluster-down.sh || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --bins
NAC=${CARGO_TARGET_DIR:-$ROOT/target}/debug/nac

if [[ -n ${KUBECONFIG:-} ]]; then
	echo "run: using the cluster in KUBECONFIG=$KUBECONFIG"
	make --no-print-directory bin/kubectl >/dev/null
	KUBECTL=$ROOT/bin/kubectl
	certs=$(mktemp -d)
	"$NAC" certs --out "$certs" --host 127.0.0.1 --host localhost >/dev/null
	WEBHOOK_CA_CERT=$certs/ca.crt WEBHOOK_TLS_CERT=$certs/tls.crt WEBHOOK_TLS_KEY=$certs/tls.key
	VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp}
else
	export CLUSTER_DIR=${CLUSTER_DIR:-$ROOT/.cluster}
	if ! hack/cluster-up.sh --status >/dev/null 2>&1; then started_cluster=1; fi
	make --no-print-directory cluster-up
	# shellcheck source=/dev/null
	. "$CLUSTER_DIR/env"
fi
export KUBECONFIG KUBECTL

hack/install-crds.sh "$NAC"
"$KUBECTL" create namespace "$NAC_NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" apply -f "$POLICY" >/dev/null
"$KUBECTL" create namespace "$DEMO_NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" apply -f hack/demo-rbac.yaml >/dev/null
"$KUBECTL" -n "$DEMO_NS" create rolebinding "$DEMO_USER-nab-editor" --clusterrole=nonadminbackup-editor-role \
	--user="$DEMO_USER" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null

# Not NAC_*: nac reads every NAC_* variable as a setting and refuses unknown ones.
port=${RUN_WEBHOOK_PORT:-9443}
metrics_port=${RUN_METRICS_PORT:-8080}
NAC_WEBHOOK__LISTEN=127.0.0.1:$port NAC_METRICS__LISTEN=127.0.0.1:$metrics_port \
NAC_WEBHOOK__CERT_FILE=$WEBHOOK_TLS_CERT NAC_WEBHOOK__KEY_FILE=$WEBHOOK_TLS_KEY \
NAC_POLICY__NAMESPACE=$NAC_NS NAC_CONTROLLERS__VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp} \
	"$NAC" serve &
nac_pid=$!

for _ in $(seq 1 100); do
	if curl -fsS "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; then break; fi
	kill -0 "$nac_pid" 2>/dev/null || { echo "run: nac exited" >&2; exit 1; }
	sleep 0.2
done
"$NAC" webhook-config --url "https://127.0.0.1:$port" --ca-file "$WEBHOOK_CA_CERT" --namespace "$NAC_NS" |
	"$KUBECTL" apply -f - >/dev/null

cat <<TXT

==============================================================================
 nac is running: webhooks https://127.0.0.1:$port, metrics http://127.0.0.1:$metrics_port/metrics
 policy: $POLICY (ConfigMap $NAC_NS/nac-policy; edit it live with kubectl edit)

 Act as a namespace user who has only the nonadminbackup-editor-role in "$DEMO_NS":
   export KUBECONFIG=$KUBECONFIG
   $KUBECTL --as $DEMO_USER -n $DEMO_NS apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: first}
   spec: {backupSpec: {}}
   EOF
   $KUBECTL --as $DEMO_USER -n $DEMO_NS get nab first -o yaml
 Play Velero (no Velero runs here):
   $KUBECTL -n ${VELERO_NAMESPACE:-openshift-adp} patch backups.velero.io NAME --type=merge -p '{"status":{"phase":"Completed"}}'
 Ctrl-C stops nac$( [[ $started_cluster == 1 ]] && echo " and the control plane" ).
==============================================================================

TXT
wait "$nac_pid"
