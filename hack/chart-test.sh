#!/usr/bin/env bash
# Tests the Helm chart (charts/nac):
#   1. helm lint and helm template for each certificate mode; wrong values are refused by values.schema.json;
#   2. the rendered manifests of each mode validate against the local control plane's API server
#      (server-side dry-run, strict field validation), with the real cert-manager and ServiceMonitor CRDs;
#   3. helm install (certs.mode=selfSigned) into the local control plane, the webhooks pointed by URL at a local
#      `nac serve` that runs as the chart's ServiceAccount (so the chart's RBAC is what nac has) with the
#      certificate the chart generated; a namespace user with only the chart's editor role is mutated and denied
#      as the policy says; Velero objects appear; the policy webhook refuses a broken policy;
#   4. helm upgrade keeps the self-signed certificate and applies a new policy live; a changed host list
#      re-issues the serving certificate from the same CA;
#   5. helm uninstall leaves no webhook configuration (nor RBAC) behind;
#   6. certs.mode=existing with a Secret from certs/make-dev-certs.sh and webhook.url + webhook.caBundle
#      pointing at nac serving the control plane's pki/webhook certificate.
#
# usage: hack/chart-test.sh [--static]      (--static: steps 1 only, no cluster)
# env:   CLUSTER_DIR   control plane state dir (default .cluster-chart: its own cluster, started here if not
#                      running and then stopped again; never share one with the e2e tests, whose webhooks and
#                      roles have the same names)
#        NAC_BIN       nac binary (default ${CARGO_TARGET_DIR:-target}/debug/nac, built with cargo if missing
#                      or stale; SKIP_BUILD=1 to use it as is)
#        HELM          helm binary (default bin/helm, built with `make helm` if missing)
#        CERT_MANAGER_VERSION, PROMETHEUS_OPERATOR_VERSION   releases whose CRDs validate the optional kinds
#                      (fetched as Go modules, like the Velero CRDs); SKIP_THIRDPARTY_CRDS=1 skips those kinds
#        KEEP_LOGS=1   keep the work directory (nac logs, rendered manifests) also on success
#
# Every wait is bounded; nac and a cluster started here are stopped on exit, also on failure or Ctrl-C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
export CLUSTER_DIR=${CLUSTER_DIR:-$ROOT/.cluster-chart}
# The chart is about nac's own objects; the Velero objects it checks are only created and deleted.
export VELERO_MODE=fake
# shellcheck source=hack/lib/cluster.sh
. "$ROOT/hack/lib/cluster.sh"

STATIC_ONLY=0
case ${1:-} in
--static) STATIC_ONLY=1 ;;
'') ;;
*) die "usage: $0 [--static]" ;;
esac

CHART=$ROOT/charts/nac
HELM=${HELM:-$ROOT/bin/helm}
NAC_BIN=${NAC_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/nac}
CERT_MANAGER_VERSION=${CERT_MANAGER_VERSION:-v1.19.1}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
NS=nac-system      # release namespace
RELEASE=nac
TENANT=chart-team-$$ # tenant namespaces cannot be deleted here (no namespace controller): unique per run
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nac-chart-test.XXXXXX")

# free_ports: two free loopback TCP ports.
free_ports() {
	if command -v python3 >/dev/null; then
		python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(*[x.getsockname()[1] for x in s])'
	else
		local a b
		while :; do
			a=$((20000 + RANDOM % 40000)) b=$((20000 + RANDOM % 40000))
			((a != b)) || continue
			(exec 3<>"/dev/tcp/127.0.0.1/$a") 2>/dev/null && continue
			(exec 3<>"/dev/tcp/127.0.0.1/$b") 2>/dev/null && continue
			echo "$a $b"
			return
		done
	fi
}

# start_nac CERT KEY: runs `nac serve` on $NAC_PORT/$METRICS_PORT as the release's ServiceAccount, with the
# controllers and leader election on, like a pod of the Deployment would.
NAC_PORT='' METRICS_PORT=''
start_nac() {
	local cert=$1 key=$2 token
	token=$(kubectl -n "$NS" create token "$RELEASE" --duration=1h)
	cat >"$WORK/nac.kubeconfig" <<-EOF
		apiVersion: v1
		kind: Config
		clusters: [{name: local, cluster: {server: "$KUBE_APISERVER_URL", certificate-authority: "$CA_CERT"}}]
		users: [{name: nac, user: {token: "$token"}}]
		contexts: [{name: nac, context: {cluster: local, user: nac, namespace: "$NS"}}]
		current-context: nac
	EOF
	env KUBECONFIG="$WORK/nac.kubeconfig" POD_NAMESPACE="$NS" \
		NAC_WEBHOOK__LISTEN="127.0.0.1:$NAC_PORT" NAC_METRICS__LISTEN="127.0.0.1:$METRICS_PORT" \
		NAC_WEBHOOK__CERT_FILE="$cert" NAC_WEBHOOK__KEY_FILE="$key" \
		NAC_WEBHOOK__PRIVILEGED_USERS="system:serviceaccount:$NS:$RELEASE" \
		NAC_POLICY__NAMESPACE="$NS" NAC_POLICY__CONFIGMAP=nac-policy \
		NAC_CONTROLLERS__ENABLED=true NAC_CONTROLLERS__VELERO_NAMESPACE="$VELERO_NAMESPACE" \
		NAC_CONTROLLERS__LEADER_ELECTION__ENABLED=true NAC_CONTROLLERS__LEADER_ELECTION__IDENTITY="chart-test-$$" \
		NAC_LOG__LEVEL=info,nac=debug \
		"$NAC_BIN" serve >>"$WORK/nac.log" 2>&1 &
	nac_pid=$!
	local deadline=$((SECONDS + 60))
	until curl -fsS "http://127.0.0.1:$METRICS_PORT/readyz" >/dev/null 2>&1; do
		kill -0 "$nac_pid" 2>/dev/null || fail "nac exited"
		((SECONDS < deadline)) || fail "nac not ready after 60s"
		sleep 0.25
	done
}
stop_nac() {
	[[ -n $nac_pid ]] || return 0
	if kill -0 "$nac_pid" 2>/dev/null; then
		kill -TERM "$nac_pid" 2>/dev/null || true
		local i
		for ((i = 0; i < 100; i++)); do
			kill -0 "$nac_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$nac_pid" 2>/dev/null || true
	fi
	wait "$nac_pid" 2>/dev/null || true
	nac_pid=''
}

started_cluster=0
nac_pid=''
failed=1
cleanup() {
	local status=$?
	trap - EXIT INT TERM
	stop_nac
	if [[ $started_cluster == 1 ]]; then
		"$ROOT/hack/cluster-down.sh" >/dev/null 2>&1 || log "warning: cluster-down failed"
	fi
	if [[ $failed == 1 || ${KEEP_LOGS:-} == 1 ]]; then
		log "work directory kept: $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
fail() {
	log "FAIL: $*"
	if [[ -n $nac_pid && -f $WORK/nac.log ]]; then
		log "last lines of the nac log ($WORK/nac.log):"
		tail -n 30 "$WORK/nac.log" >&2
	fi
	exit 1
}

# wait_until SECONDS WHAT CMD...: retries CMD every 0.25 s until it succeeds; fails after SECONDS.
wait_until() {
	local secs=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || fail "timed out after ${secs}s waiting for $what"
		sleep 0.25
	done
}

helm() { timeout 180 "$HELM" "$@"; }
kubectl() { timeout 60 "$KUBECTL" --kubeconfig "$KUBECONFIG" --request-timeout=30s "$@"; }

# --- tools -------------------------------------------------------------------
if [[ ! -x $HELM ]]; then
	[[ $HELM == "$ROOT/bin/helm" ]] || die "no helm at $HELM"
	make --no-print-directory helm >&2
fi
for tool in openssl base64 sha256sum curl; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

# --- 1. lint, template, schema ------------------------------------------------
step "helm lint and helm template, each certificate mode"
PEM_CA=$WORK/dummy-ca.crt
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=dummy-ca \
	-keyout "$WORK/dummy-ca.key" -out "$PEM_CA" 2>/dev/null
declare -A MODE_ARGS=(
	[selfSigned]="--set certs.mode=selfSigned"
	[certManager]="--set certs.mode=certManager"
	[certManagerIssuer]="--set certs.mode=certManager --set certs.certManager.issuerRef.name=corp-ca --set certs.certManager.issuerRef.kind=ClusterIssuer"
	[existing]="--set certs.mode=existing --set certs.existing.secretName=my-tls --set-file certs.existing.caBundle=$PEM_CA"
	[localUrl]="--set webhook.url=https://127.0.0.1:9443 --set-file webhook.caBundle=$PEM_CA"
)
EXTRAS=(--set metrics.serviceMonitor.enabled=true --set metrics.dashboard.enabled=true
	--set metrics.prometheusRule.enabled=true)
for mode in selfSigned certManager certManagerIssuer existing localUrl; do
	# shellcheck disable=SC2086
	helm lint --strict "$CHART" --namespace "$NS" ${MODE_ARGS[$mode]} "${EXTRAS[@]}" >"$WORK/lint-$mode.log" 2>&1 ||
		{ cat "$WORK/lint-$mode.log" >&2; fail "helm lint ($mode)"; }
	# shellcheck disable=SC2086
	helm template "$RELEASE" "$CHART" --namespace "$NS" --include-crds ${MODE_ARGS[$mode]} "${EXTRAS[@]}" \
		>"$WORK/$mode.yaml" 2>"$WORK/template-$mode.log" || { cat "$WORK/template-$mode.log" >&2; fail "helm template ($mode)"; }
	ok "$mode: lint --strict, template ($(grep -c '^kind:' "$WORK/$mode.yaml") objects)"
done
# Plain defaults render too (what `helm install nac charts/nac` does).
helm template "$RELEASE" "$CHART" --namespace "$NS" >"$WORK/defaults.yaml" || fail "helm template with defaults"
ok "defaults render"

step "wrong values are refused at install time"
refuse() {
	local why=$1 expect=$2
	shift 2
	if helm template "$RELEASE" "$CHART" --namespace "$NS" "$@" >"$WORK/refused.yaml" 2>"$WORK/refused.log"; then
		fail "accepted values that should be refused ($why): $*"
	fi
	grep -q -- "$expect" "$WORK/refused.log" || { cat "$WORK/refused.log" >&2; fail "$why: message lacks '$expect'"; }
	ok "$why"
}
refuse "unknown certificate mode" "certs/mode" --set certs.mode=letsEncrypt
refuse "misspelt key" "webhok" --set webhok.url=https://x
refuse "timeout above the API server's 30 s" "timeoutSeconds" --set webhook.timeoutSeconds=60
refuse "replica count as text" "replicaCount" --set replicaCount=two
refuse "webhook URL without https" "webhook/url" --set webhook.url=http://127.0.0.1:9443
refuse "existing mode without a Secret" "secretName" --set certs.mode=existing
refuse "existing mode without a CA bundle" "caBundle" --set certs.mode=existing --set certs.existing.secretName=x
refuse "lease renewal slower than half the lease" "renewIntervalSeconds" \
	--set controllers.leaderElection.renewIntervalSeconds=10
refuse "several replicas without leader election" "leaderElection" \
	--set controllers.leaderElection.enabled=false
refuse "bad log format" "log/format" --set log.format=xml
refuse "a policy ConfigMap manifest as the policy" "not a ConfigMap manifest" --set-file policy="$ROOT/policies/strict.yaml"

if [[ $STATIC_ONLY == 1 ]]; then
	failed=0
	step "static chart checks passed"
	exit 0
fi

# --- the control plane and nac ------------------------------------------------
step "local control plane ($CLUSTER_DIR)"
if ! "$ROOT/hack/cluster-up.sh" --status >/dev/null 2>&1; then
	started_cluster=1
fi
make --no-print-directory cluster-up >&2
# shellcheck source=/dev/null
. "$CLUSTER_DIR/env"
export KUBECONFIG
if [[ ${SKIP_BUILD:-} != 1 ]]; then
	cargo build --bin nac >&2
fi
[[ -x $NAC_BIN ]] || die "no nac binary at $NAC_BIN"
kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name | grep -q . &&
	fail "the cluster in $CLUSTER_DIR already has webhook configurations: use a fresh CLUSTER_DIR"
"$ROOT/hack/install-crds.sh" -f "$CHART/crds" >&2

# thirdparty_crds DEST: the cert-manager, ServiceMonitor and PrometheusRule CRDs of the pinned releases, as Go
# modules.
thirdparty_crds() {
	local dest=$1 json dir
	mkdir -p "$dest"
	if [[ -f $dest/.versions && $(cat "$dest/.versions") == "$CERT_MANAGER_VERSION $PROMETHEUS_OPERATOR_VERSION rules" ]]; then
		return 0
	fi
	rm -f "$dest"/*.yaml
	json=$(cd / && GOWORK=off GOFLAGS=-mod=mod timeout 300 "${GO:-go}" mod download -json \
		"github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION") || return 1
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	install -m 0644 "$dir"/deploy/crds/cert-manager.io_{certificates,issuers,clusterissuers,certificaterequests}.yaml "$dest/" || return 1
	json=$(cd / && GOWORK=off GOFLAGS=-mod=mod timeout 300 "${GO:-go}" mod download -json \
		"github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION") || return 1
	dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
	install -m 0644 "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml \
		"$dest/" || return 1
	echo "$CERT_MANAGER_VERSION $PROMETHEUS_OPERATOR_VERSION rules" >"$dest/.versions"
}
THIRDPARTY=1
if [[ ${SKIP_THIRDPARTY_CRDS:-} == 1 ]]; then
	THIRDPARTY=0
	log "warning: SKIP_THIRDPARTY_CRDS=1: cert-manager and ServiceMonitor objects are not validated"
else
	thirdparty_crds "$CLUSTER_DIR/thirdparty-crds" ||
		fail "could not fetch the cert-manager $CERT_MANAGER_VERSION / prometheus-operator $PROMETHEUS_OPERATOR_VERSION CRDs (SKIP_THIRDPARTY_CRDS=1 to skip)"
	"$ROOT/hack/install-crds.sh" -f "$CLUSTER_DIR/thirdparty-crds" >&2
fi

# --- 2. server-side validation -----------------------------------------------
step "rendered manifests validate against the API server $(kubectl version -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1) (server-side dry-run, strict)"
kubectl get namespace "$NS" >/dev/null 2>&1 || kubectl create namespace "$NS" >/dev/null
for mode in selfSigned certManager certManagerIssuer existing localUrl; do
	file=$WORK/$mode.yaml
	if [[ $THIRDPARTY == 0 ]]; then
		# Without their CRDs, cert-manager and Prometheus Operator objects cannot be checked: leave them out.
		awk 'BEGIN{RS="\n---\n"; ORS="\n---\n"} !/apiVersion: (cert-manager.io|monitoring.coreos.com)\//' \
			"$file" >"$WORK/$mode.builtin.yaml"
		file=$WORK/$mode.builtin.yaml
	fi
	kubectl apply --server-side --force-conflicts --field-manager=nac-chart-test --dry-run=server \
		--validate=strict -f "$file" >"$WORK/dryrun-$mode.log" 2>&1 ||
		{ cat "$WORK/dryrun-$mode.log" >&2; fail "server-side validation ($mode)"; }
	! grep -i '^warning' "$WORK/dryrun-$mode.log" || fail "the API server warned about the $mode manifests"
	ok "$mode: $(grep -c 'server dry run' "$WORK/dryrun-$mode.log") objects accepted"
done
# helm's own server dry-run: renders with cluster access (lookup works) and checks against the server.
helm install "$RELEASE" "$CHART" -n "$NS" --dry-run=server >"$WORK/install-dry-run.yaml" 2>&1 ||
	{ cat "$WORK/install-dry-run.yaml" >&2; fail "helm install --dry-run=server"; }
ok "helm install --dry-run=server"

secret_field() { kubectl -n "$NS" get secret "$1" -o "jsonpath={.data.${2//./\\.}}"; }
webhook_ca_bundles() {
	kubectl get "mutatingwebhookconfiguration/$RELEASE-mutating" "validatingwebhookconfiguration/$RELEASE-validating" \
		-o jsonpath='{range .items[*].webhooks[*]}{.clientConfig.caBundle}{"\n"}{end}' | sort -u
}
# as USER VERB...: kubectl as an impersonated namespace user.
as() {
	local user=$1
	shift
	kubectl --as "$user" --as-group system:authenticated "$@"
}
nab() { # nab NAME BACKUP_SPEC_JSON
	printf '{"apiVersion":"oadp.openshift.io/v1alpha1","kind":"NonAdminBackup","metadata":{"name":"%s"},"spec":{"backupSpec":%s}}' "$1" "$2"
}

# --- 3. install ----------------------------------------------------------------
step "helm install (certs.mode=selfSigned, webhooks at a local nac by URL)"
# The URL's port is fixed before nac starts; nac reads the certificate the chart made.
read -r NAC_PORT METRICS_PORT < <(free_ports)
URL=https://127.0.0.1:$NAC_PORT
helm install "$RELEASE" "$CHART" -n "$NS" --create-namespace --wait=false --timeout 60s \
	--set webhook.url="$URL" --set 'certs.extraHosts={127.0.0.1,localhost}' \
	--set velero.namespace="$VELERO_NAMESPACE" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log" >&2; fail "helm install"; }
grep -q "Give namespace users the right" "$WORK/install.log" || fail "NOTES.txt not shown after install"
ok "installed; NOTES shown"
for obj in "mutatingwebhookconfiguration/$RELEASE-mutating" "validatingwebhookconfiguration/$RELEASE-validating" \
	clusterrole/nonadminbackup-editor-role clusterrole/nonadminbackup-viewer-role "clusterrole/$RELEASE" \
	"clusterrolebinding/$RELEASE"; do
	kubectl get "$obj" >/dev/null || fail "$obj missing after install"
done
kubectl -n "$VELERO_NAMESPACE" get "role/$RELEASE-velero" "rolebinding/$RELEASE-velero" >/dev/null || fail "Velero Role missing"
kubectl -n "$NS" get configmap/nac-policy "role/$RELEASE" deployment/"$RELEASE" service/"$RELEASE" \
	poddisruptionbudget/"$RELEASE" serviceaccount/"$RELEASE" secret/"$RELEASE-tls" >/dev/null || fail "namespaced objects missing"
ok "webhooks, RBAC, user roles, policy ConfigMap, Deployment, Service, PDB, Secret exist"

for k in ca.crt tls.crt tls.key; do secret_field "$RELEASE-tls" "$k" | base64 -d >"$WORK/$k"; done
openssl verify -CAfile "$WORK/ca.crt" "$WORK/tls.crt" >/dev/null || fail "the chart's serving certificate does not verify against its CA"
openssl x509 -in "$WORK/tls.crt" -noout -ext subjectAltName | grep -q "DNS:$RELEASE.$NS.svc" || fail "SAN $RELEASE.$NS.svc missing"
openssl x509 -in "$WORK/tls.crt" -noout -ext subjectAltName | grep -q "IP Address:127.0.0.1" || fail "SAN 127.0.0.1 missing"
[[ $(webhook_ca_bundles) == "$(secret_field "$RELEASE-tls" ca.crt)" ]] || fail "webhook caBundle differs from the Secret's ca.crt"
ok "self-signed certificate verifies, names the Service and 127.0.0.1; every webhook carries its CA"

step "nac as the chart's ServiceAccount, webhooks called by the API server"
start_nac "$WORK/tls.crt" "$WORK/tls.key"
ok "nac ready on $URL (metrics :$METRICS_PORT)"

sa=system:serviceaccount:$NS:$RELEASE
can() { [[ $(kubectl auth can-i --as "$sa" "$@" 2>/dev/null) == yes ]]; }
for a in "watch nonadminbackups.oadp.openshift.io -A" "update nonadminbackups.oadp.openshift.io --subresource=status -A" \
	"create backups.velero.io -n $VELERO_NAMESPACE" "create deletebackuprequests.velero.io -n $VELERO_NAMESPACE" \
	"watch datauploads.velero.io -n $VELERO_NAMESPACE" "update leases.coordination.k8s.io -n $NS" \
	"watch configmaps -n $NS" "create events -n default" "create nonadminbackups.oadp.openshift.io -n default" "watch namespaces" \
	"create backupstoragelocations.velero.io -n $VELERO_NAMESPACE" "create secrets -n $VELERO_NAMESPACE" "get secrets -n default" \
	"update nonadminbackupstoragelocations.oadp.openshift.io --subresource=status -A" \
	"update nonadminbackupstoragelocationrequests.oadp.openshift.io -n $VELERO_NAMESPACE" \
	"create downloadrequests.velero.io -n $VELERO_NAMESPACE" "delete nonadmindownloadrequests.oadp.openshift.io -A" \
	"update nonadmindownloadrequests.oadp.openshift.io --subresource=status -A" \
	"create schedules.velero.io -n $VELERO_NAMESPACE" "patch nonadminschedules.oadp.openshift.io -A" \
	"update nonadminschedules.oadp.openshift.io --subresource=status -A"; do
	# shellcheck disable=SC2086
	can $a || fail "nac's ServiceAccount cannot: $a"
done
for a in "create backups.velero.io -n default" "update configmaps -n $NS" \
	"create nonadminrestores.oadp.openshift.io -n default" "create secrets -n default" "update secrets -n $NS" \
	"create backupstoragelocations.velero.io -n default" "create nonadminbackupstoragelocations.oadp.openshift.io -n default" \
	"watch configmaps -n default" "create datauploads.velero.io -n $VELERO_NAMESPACE" "delete namespaces" \
	"create downloadrequests.velero.io -n default" "create nonadmindownloadrequests.oadp.openshift.io -n default" \
	"create schedules.velero.io -n default" "create nonadminschedules.oadp.openshift.io -n default"; do
	# shellcheck disable=SC2086
	! can $a || fail "nac's ServiceAccount should not be able to: $a"
done
ok "least privilege: nac's ServiceAccount has what nac uses, nothing more (35 checks)"

kubectl create namespace "$TENANT" >/dev/null
kubectl -n "$TENANT" create rolebinding alice-nac-editor --clusterrole=nonadminbackup-editor-role --user=alice >/dev/null
kubectl -n "$TENANT" create rolebinding bob-nac-viewer --clusterrole=nonadminbackup-viewer-role --user=bob >/dev/null
wait_until 10 "alice's RoleBinding to apply" as alice auth can-i create nonadminbackups.oadp.openshift.io -n "$TENANT"
[[ $(as alice auth can-i create backups.velero.io -n "$VELERO_NAMESPACE" 2>/dev/null) == no ]] ||
	fail "the editor role lets users create Velero Backups"
[[ $(as bob auth can-i create nonadminbackups.oadp.openshift.io -n "$TENANT" 2>/dev/null) == no ]] ||
	fail "the viewer role lets users create NonAdminBackups"

nab first '{}' | as alice -n "$TENANT" create -f - -o json >"$WORK/first.json" 2>"$WORK/first.err" ||
	{ cat "$WORK/first.err" >&2; fail "alice (editor) could not create a NonAdminBackup"; }
got=$(kubectl -n "$TENANT" get nab first -o jsonpath='{.spec.backupSpec.includedNamespaces}')
[[ $got == "[\"$TENANT\"]" ]] || { cat "$WORK/first.json" >&2; fail "NonAdminBackup not mutated: includedNamespaces is $got, not [$TENANT]"; }
[[ -n $(kubectl -n "$TENANT" get nab first -o jsonpath='{.metadata.labels.openshift\.io/oadp-nab-origin-nacuuid}') ]] ||
	fail "NonAdminBackup got no identity label"
ok "alice's NonAdminBackup is mutated: includedNamespaces=[$TENANT], identity label stamped"

if nab escape '{"includedNamespaces":["kube-system"]}' | as alice -n "$TENANT" create -f - >/dev/null 2>"$WORK/deny.err"; then
	fail "a NonAdminBackup of another namespace was admitted"
fi
if ! grep -q "denied the request" "$WORK/deny.err" || ! grep -q "spec.backupSpec.includedNamespaces" "$WORK/deny.err"; then
	cat "$WORK/deny.err" >&2
	fail "denial does not name the field"
fi
ok "a NonAdminBackup naming kube-system is denied, naming spec.backupSpec.includedNamespaces"
as bob -n "$TENANT" get nab first >/dev/null || fail "bob (viewer) cannot read the NonAdminBackup"
ok "bob (viewer) reads it and cannot create"

first_uuid=$(kubectl -n "$TENANT" get nab first -o jsonpath='{.metadata.labels.openshift\.io/oadp-nab-origin-nacuuid}')
first_backup=''
velero_backup() {
	first_backup=$(kubectl -n "$VELERO_NAMESPACE" get backups.velero.io -l "openshift.io/oadp-nab-origin-nacuuid=$first_uuid" -o name)
	[[ -n $first_backup ]]
}
velero_backup_named() { kubectl -n "$VELERO_NAMESPACE" get "$1" >/dev/null 2>&1; }
lease_held() { kubectl -n "$NS" get lease nac-leader -o jsonpath='{.spec.holderIdentity}' | grep -qx "chart-test-$$"; }
wait_until 30 "nac to take the leader Lease $NS/nac-leader (no Lease: nac did not start its controllers; is controller::run wired into server::run?)" lease_held
wait_until 30 "the Velero Backup of NonAdminBackup first" velero_backup
velero_backup
! grep -qi 'forbidden' "$WORK/nac.log" || { grep -i forbidden "$WORK/nac.log" | head -5 >&2; fail "nac was refused by RBAC"; }
ok "the controller (leader via Lease $NS/nac-leader) created the Velero Backup; no RBAC refusal in nac's log"
as alice -n "$TENANT" delete nab first --wait=false >/dev/null || fail "alice cannot delete her NonAdminBackup"
nab_gone() { ! kubectl -n "$TENANT" get nab first >/dev/null 2>&1; }
wait_until 30 "NonAdminBackup first to go (nac cleans up its Velero objects, then drops its finalizer)" nab_gone
! velero_backup_named "$first_backup" || fail "the Velero Backup of a deleted NonAdminBackup is still there"
ok "deleting it as alice: nac removed the Velero Backup and its finalizer"

bad_policy() {
	kubectl -n "$NS" get configmap nac-policy -o json |
		sed 's/"policy.yaml": "[^"]*"/"policy.yaml": "backup:\\n  maxTtl: not-a-duration\\n"/' |
		kubectl apply -f - >/dev/null 2>"$WORK/badpolicy.err"
}
if bad_policy; then fail "a broken policy was accepted by the policy webhook"; fi
grep -q "denied the request" "$WORK/badpolicy.err" || { cat "$WORK/badpolicy.err" >&2; fail "broken policy refused for another reason"; }
ok "a broken policy edit is refused by the policy webhook"

# --- 4. upgrade ------------------------------------------------------------------
step "helm upgrade keeps the self-signed certificate and applies the policy live"
secret_sum() { kubectl -n "$NS" get secret "$RELEASE-tls" -o jsonpath='{.data}' | sha256sum; }
before=$(secret_sum)
ca_before=$(webhook_ca_bundles)
sed -n '/^  policy.yaml: |$/,$p' "$ROOT/policies/strict.yaml" | tail -n +2 | sed 's/^    //' >"$WORK/strict-policy.yaml"
grep -q 'ttl: 720h0m0s' "$WORK/strict-policy.yaml" || fail "could not extract the policy of policies/strict.yaml"
helm upgrade "$RELEASE" "$CHART" -n "$NS" --reuse-values --set-file policy="$WORK/strict-policy.yaml" \
	--wait=false --timeout 60s >"$WORK/upgrade.log" 2>&1 || { cat "$WORK/upgrade.log" >&2; fail "helm upgrade"; }
[[ $(secret_sum) == "$before" ]] || fail "helm upgrade changed the self-signed Secret"
[[ $(webhook_ca_bundles) == "$ca_before" ]] || fail "helm upgrade changed the webhooks' caBundle"
ok "Secret data and caBundle unchanged after upgrade"
strict_nab() {
	nab "strict-$((++n))" '{}' | as alice -n "$TENANT" create -f - -o jsonpath='{.spec.backupSpec.ttl}' 2>/dev/null | grep -qx '720h0m0s'
}
n=0
wait_until 15 "the upgraded (strict) policy to apply to new NonAdminBackups" strict_nab
ok "new NonAdminBackups get the strict policy's ttl 720h0m0s (policy from values, applied live)"

step "helm upgrade with new host names re-issues the serving certificate from the same CA"
helm upgrade "$RELEASE" "$CHART" -n "$NS" --reuse-values --set 'certs.extraHosts={127.0.0.1,localhost,nac.example.test}' \
	--wait=false --timeout 60s >"$WORK/upgrade2.log" 2>&1 || { cat "$WORK/upgrade2.log" >&2; fail "helm upgrade (hosts)"; }
[[ $(secret_field "$RELEASE-tls" ca.crt) == "$(base64 -w0 <"$WORK/ca.crt")" ]] || fail "the CA changed"
[[ $(webhook_ca_bundles) == "$ca_before" ]] || fail "the caBundle changed"
secret_field "$RELEASE-tls" tls.crt | base64 -d >"$WORK/tls2.crt"
cmp -s "$WORK/tls.crt" "$WORK/tls2.crt" && fail "the serving certificate was not re-issued for the new host"
openssl x509 -in "$WORK/tls2.crt" -noout -ext subjectAltName | grep -q "DNS:nac.example.test" || fail "new SAN missing"
openssl verify -CAfile "$WORK/ca.crt" "$WORK/tls2.crt" >/dev/null || fail "re-issued certificate does not verify"
nab after-reissue '{}' | as alice -n "$TENANT" create -f - >/dev/null 2>"$WORK/after-reissue.err" ||
	{ cat "$WORK/after-reissue.err" >&2; fail "webhooks broken after re-issue"; }
ok "new leaf with nac.example.test, same CA and caBundle; webhooks keep working"

# --- 5. uninstall ----------------------------------------------------------------
step "helm uninstall leaves no webhook configuration behind"
helm uninstall "$RELEASE" -n "$NS" --wait --timeout 60s >"$WORK/uninstall.log" 2>&1 || { cat "$WORK/uninstall.log" >&2; fail "helm uninstall"; }
left=$(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name)
[[ -z $left ]] || fail "left behind: $left"
left=$(kubectl get clusterroles,clusterrolebindings -l "app.kubernetes.io/instance=$RELEASE" -o name)
[[ -z $left ]] || fail "left behind: $left"
left=$(kubectl -n "$VELERO_NAMESPACE" get roles,rolebindings -l "app.kubernetes.io/instance=$RELEASE" -o name)
[[ -z $left ]] || fail "left behind: $left"
kubectl get crd nonadminbackups.oadp.openshift.io >/dev/null || fail "the CRDs should stay (Helm never deletes crds/)"
ok "no webhook configuration, ClusterRole or Velero Role left; CRDs kept"
stop_nac
# The user roles went with the release: alice has no rights left.
nab after-uninstall '{}' | as alice -n "$TENANT" create -f - >/dev/null 2>&1 &&
	fail "alice still has rights after uninstall (the editor role should be gone)"
ok "the editor role went with the release"

# --- 6. existing Secret, webhook.url + webhook.caBundle ---------------------------
step "certs.mode=existing (Secret from certs/make-dev-certs.sh), webhook.url + webhook.caBundle (pki/webhook)"
"$ROOT/certs/make-dev-certs.sh" --nac "$NAC_BIN" --kubectl "$KUBECTL" -n "$NS" -s "$RELEASE" -o "$WORK/dev-certs" \
	-H 127.0.0.1 --secret nac-serving >"$WORK/make-dev-certs.log" 2>&1 || { cat "$WORK/make-dev-certs.log" >&2; fail "make-dev-certs.sh"; }
openssl verify -CAfile "$WORK/dev-certs/ca.crt" "$WORK/dev-certs/tls.crt" >/dev/null || fail "dev certificate does not verify"
[[ $(secret_field nac-serving tls.crt | base64 -d) == "$(cat "$WORK/dev-certs/tls.crt")" ]] || fail "Secret nac-serving does not hold the dev certificate"
read -r NAC_PORT METRICS_PORT < <(free_ports)
URL=https://127.0.0.1:$NAC_PORT
helm install "$RELEASE" "$CHART" -n "$NS" --wait=false --timeout 60s \
	--set certs.mode=existing --set certs.existing.secretName=nac-serving \
	--set-file certs.existing.caBundle="$WORK/dev-certs/ca.crt" \
	--set webhook.url="$URL" --set-file webhook.caBundle="$WEBHOOK_CA_CERT" \
	--set velero.namespace="$VELERO_NAMESPACE" >"$WORK/install2.log" 2>&1 || { cat "$WORK/install2.log" >&2; fail "helm install (existing)"; }
[[ $(webhook_ca_bundles) == "$(base64 -w0 <"$WEBHOOK_CA_CERT")" ]] || fail "webhook.caBundle did not override the mode's bundle"
kubectl -n "$NS" get deployment "$RELEASE" -o jsonpath='{.spec.template.spec.volumes[0].secret.secretName}' | grep -qx nac-serving ||
	fail "the Deployment does not mount the existing Secret"
start_nac "$WEBHOOK_TLS_CERT" "$WEBHOOK_TLS_KEY"
nab existing-mode '{}' | as alice -n "$TENANT" create -f - -o json >"$WORK/existing.json" 2>"$WORK/existing.err" ||
	{ cat "$WORK/existing.err" >&2; fail "NonAdminBackup through the existing-mode install"; }
grep -q 'openshift.io/oadp-nab-origin-nacuuid' "$WORK/existing.json" || fail "not mutated through the existing-mode install"
ok "webhooks verify nac by webhook.caBundle; the Deployment mounts the existing Secret; NonAdminBackup mutated"
helm uninstall "$RELEASE" -n "$NS" --wait --timeout 60s >/dev/null || fail "helm uninstall (existing)"
[[ -z $(kubectl get mutatingwebhookconfigurations,validatingwebhookconfigurations -o name) ]] || fail "webhooks left behind"
kubectl -n "$NS" get secret nac-serving >/dev/null || fail "helm uninstall deleted the admin's own Secret"
kubectl -n "$NS" delete secret nac-serving >/dev/null
stop_nac
ok "uninstalled: no webhook configuration left; the admin's Secret is untouched"

failed=0
step "chart tests passed"
