#!/usr/bin/env bash
# Runs a real Velero server (with its AWS object-store plugin) and a real S3 server (versitygw, posix backend)
# beside the local control plane of $CLUSTER_DIR, as unprivileged processes on 127.0.0.1. hack/cluster-up.sh
# calls it unless VELERO_MODE=fake; hack/cluster-down.sh stops both.
#
# usage: hack/velero-up.sh             start S3 + Velero for the running cluster (idempotent)
#        hack/velero-up.sh --restart   stop Velero and start it again (same bucket, same BSL): Velero syncs
#                                      backups from the bucket at start, a test's way to force a backup sync
#                                      (of each location it has not synced within the last minute: it skips
#                                      the others until its next tick, a minute on)
#        hack/velero-up.sh --restart-unvalidated   as --restart, but ready once the server starts its controllers,
#                                      not once it has validated the BSL: the S3 server may be paused or gone
#                                      (a fault test starts Velero over it)
#        hack/velero-up.sh --stop-velero   stop Velero only (Backups wait in phase New until --restart)
#        hack/velero-up.sh --stop      stop Velero and the S3 server
#
# env: CLUSTER_DIR (default <repo>/.cluster), VELERO_NAMESPACE (default openshift-adp), BIN_DIR,
#      VELERO_READY_TIMEOUT (seconds until the BSL is Available, default 60)
#
# In the cluster: the volume-snapshot CRDs (Velero's restores warn without them), the credentials Secret
# `cloud-credentials`, the BackupStorageLocation `default` (bucket `velero`, prefix `nac`, s3Url of the local
# server; its Available phase is Velero's own validation), and a stand-in Deployment `velero` with 0 replicas
# (Velero's restore item actions read its image; without it every restore ends PartiallyFailed).
#
# Under $CLUSTER_DIR: s3/ (the bucket as plain files: s3/velero/nac/backups/<name>/...), velero/{home,tmp,
# plugins, credentials}, velero.log, versitygw.log; appended to env: VELERO_MODE=real, S3_*, VELERO_PID, VELERO_LOG, ...
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp}
VELERO_READY_TIMEOUT=${VELERO_READY_TIMEOUT:-60}
ENV_FILE=$CLUSTER_DIR/env
S3_DIR=$CLUSTER_DIR/s3
VDIR=$CLUSTER_DIR/velero
S3_BUCKET=velero
S3_PREFIX=nac
S3_REGION=us-east-1
# Test credentials of a loopback-only server; Velero reads them from the Secret below.
S3_ACCESS_KEY=nac-velero
S3_SECRET_KEY=nac-velero-secret

[[ -f $ENV_FILE ]] || die "no running cluster in $CLUSTER_DIR (make cluster-up)"
# With a node (NODE=1), Velero runs in pods and the S3 server listens on the node address, which the host's
# processes and the pods both reach (Velero's data-path pods do not use the host network).
NODE=$(env_get NODE)
S3_HOST=127.0.0.1
[[ $NODE == 1 ]] && S3_HOST=$(env_get NODE_IP)
KUBECONFIG_FILE=$(env_get KUBECONFIG)
kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# stop NAME PIDKEY TIMEOUT: the recorded process, then any other NAME process naming this cluster's directory.
stop() {
	local pid
	for pid in $(env_get "$2") $(pids_of_cluster "$1"); do stop_pid "$1" "$pid" "$3"; done
	return 0
}
stop_velero() { stop velero VELERO_PID 20; }
stop_s3() { stop versitygw S3_PID 10; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# s3 ARGS...: a signed request to the local S3 server (versitygw wants the payload hash header, which curl's
# --aws-sigv4 does not send; this is the SHA-256 of an empty body).
s3() {
	curl -sS --fail-with-body --max-time 10 --aws-sigv4 "aws:amz:$S3_REGION:s3" \
		--user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
		-H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' "$@"
}

start_s3() {
	local pid port i
	pid=$(env_get S3_PID)
	if pid_is versitygw "$pid"; then
		return 0
	fi
	mkdir -p "$S3_DIR"
	# Started again (it died or was killed): on its old port first, where every storage location points.
	local prev
	prev=$(env_get S3_PORT)
	for _ in 1 2 3; do
		port=${prev:-$(free_port)}
		prev=
		ROOT_ACCESS_KEY_ID=$S3_ACCESS_KEY ROOT_SECRET_ACCESS_KEY=$S3_SECRET_KEY \
			setsid "$BIN_DIR/versitygw" --port "$S3_HOST:$port" --quiet posix "$S3_DIR" \
			</dev/null >"$CLUSTER_DIR/versitygw.log" 2>&1 &
		pid=$!
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			if curl -s -o /dev/null --max-time 2 "http://$S3_HOST:$port/"; then
				env_set "S3_PID=$pid" "S3_PORT=$port" "S3_URL=http://$S3_HOST:$port" "S3_DATA_DIR=$S3_DIR" \
					"S3_BUCKET=$S3_BUCKET" "S3_PREFIX=$S3_PREFIX" "S3_REGION=$S3_REGION" \
					"S3_ACCESS_KEY=$S3_ACCESS_KEY" "S3_SECRET_KEY=$S3_SECRET_KEY" \
					"S3_LOG=$CLUSTER_DIR/versitygw.log"
				if [[ ! -d $S3_DIR/$S3_BUCKET ]]; then
					s3 -X PUT "http://$S3_HOST:$port/$S3_BUCKET" >/dev/null || die "could not create bucket $S3_BUCKET"
				fi
				log "S3 server (versitygw) on $S3_HOST:$port, bucket $S3_BUCKET in $S3_DIR/$S3_BUCKET"
				return 0
			fi
			sleep 0.05
		done
		kill -TERM "$pid" 2>/dev/null || true
		grep -q 'address already in use' "$CLUSTER_DIR/versitygw.log" && continue
		log "error: versitygw did not start; last lines of $CLUSTER_DIR/versitygw.log:"
		tail -n 20 "$CLUSTER_DIR/versitygw.log" >&2
		exit 1
	done
	die "no free port for versitygw after 3 attempts"
}

# The cluster objects Velero needs beyond its CRDs (hack/cluster-up.sh installed those and the namespace).
# Velero in a process reads the default location's credentials from a file of its own (start_velero), not through
# `spec.credential`: Velero rewrites a location's credential file (truncate, then write) each time it uses the
# location, and a plugin starting at that moment reads it empty and asks EC2 IMDS instead ("no EC2 IMDS role
# found"), failing that backup, restore or download. Velero in pods keeps `spec.credential`, as OADP sets it.
apply_velero_objects() {
	install_snapshot_crds
	local credential=''
	[[ $NODE == 1 ]] && credential='credential: {name: cloud-credentials, key: cloud}'
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: Secret
		metadata: {name: cloud-credentials, namespace: $VELERO_NAMESPACE}
		type: Opaque
		stringData:
		  cloud: |
		    [default]
		    aws_access_key_id = $S3_ACCESS_KEY
		    aws_secret_access_key = $S3_SECRET_KEY
		---
		apiVersion: velero.io/v1
		kind: BackupStorageLocation
		metadata: {name: default, namespace: $VELERO_NAMESPACE}
		spec:
		  provider: aws
		  default: true
		  objectStorage: {bucket: $S3_BUCKET, prefix: $S3_PREFIX}
		  $credential
		  config: {region: $S3_REGION, s3ForcePathStyle: "true", s3Url: "http://$S3_HOST:$(env_get S3_PORT)"}
	EOF
	# Velero's restore item actions read the image of the Deployment `velero`; with a node it is the real one.
	[[ $NODE == 1 ]] && return 0
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: apps/v1
		kind: Deployment
		metadata: {name: velero, namespace: $VELERO_NAMESPACE, labels: {component: velero}}
		spec:
		  replicas: 0
		  selector: {matchLabels: {deploy: velero}}
		  template:
		    metadata: {labels: {deploy: velero}}
		    spec: {containers: [{name: velero, image: "velero/velero:$(env_get VELERO_VERSION)"}]}
	EOF
}

# Velero's own identity, as in a real installation (ServiceAccount velero, cluster-admin): a kubeconfig with a
# token of it. With the admin's kubeconfig Velero's writes would look like nac's (the same user), and nac's guard
# on Velero's objects, which tells them apart by user, could not refuse what Velero's backup sync creates.
velero_kubeconfig() {
	local kc=$VDIR/kubeconfig token
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: ServiceAccount
		metadata: {name: velero, namespace: $VELERO_NAMESPACE}
		---
		apiVersion: rbac.authorization.k8s.io/v1
		kind: ClusterRoleBinding
		metadata: {name: velero-server}
		roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
		subjects: [{kind: ServiceAccount, name: velero, namespace: $VELERO_NAMESPACE}]
	EOF
	token=$(kubectl -n "$VELERO_NAMESPACE" create token velero --duration=8760h) || die "no token for ServiceAccount velero"
	(
		umask 077
		cat >"$kc" <<-EOF
			apiVersion: v1
			kind: Config
			clusters: [{name: local, cluster: {server: "$(env_get KUBE_APISERVER_URL)", certificate-authority: "$(env_get CA_CERT)"}}]
			users: [{name: velero, user: {token: "$token"}}]
			contexts: [{name: velero, context: {cluster: local, user: velero, namespace: $VELERO_NAMESPACE}}]
			current-context: velero
		EOF
	)
	echo "$kc"
}

# start_velero [validated|started]: ready once this Velero has validated the BSL (the default), or once it has
# started its controllers.
start_velero() {
	local pid metrics profiler deadline offset kc ready='BackupStorageLocations is valid, marking as available'
	[[ ${1:-validated} == started ]] && ready='Server starting\.\.\.'
	pid=$(env_get VELERO_PID)
	if pid_is velero "$pid"; then
		return 0
	fi
	mkdir -p "$VDIR/home" "$VDIR/tmp" "$VDIR/plugins"
	# The default location's credentials, written once (see apply_velero_objects); the plugins inherit the variable.
	printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$S3_ACCESS_KEY" "$S3_SECRET_KEY" \
		>"$VDIR/credentials"
	chmod 600 "$VDIR/credentials"
	# Velero starts plugins from --plugin-dir; only the one object-store plugin is wanted there.
	ln -sfn "$BIN_DIR/velero-plugin-for-aws" "$VDIR/plugins/velero-plugin-for-aws"
	read -r metrics profiler < <(python3 -c '
import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
	# HOME: the velero command reads ~/.config/velero; TMPDIR: it copies the BSL credentials there. Both are
	# per cluster. The server re-validates the BSL every 10 s, checks every minute for backups to sync, and
	# collects expired backups every 20 s (default: hourly), so a short TTL is seen to expire.
	# Velero's argv[0] must be absolute: it starts its built-in plugins as `argv[0] run-plugins`.
	touch "$CLUSTER_DIR/velero.log"
	offset=$(stat -c %s "$CLUSTER_DIR/velero.log")
	kc=$(velero_kubeconfig)
	HOME=$VDIR/home TMPDIR=$VDIR/tmp KUBECONFIG=$kc AWS_SHARED_CREDENTIALS_FILE=$VDIR/credentials \
		setsid "$BIN_DIR/velero" server --namespace "$VELERO_NAMESPACE" --plugin-dir "$VDIR/plugins" \
		--metrics-address "127.0.0.1:$metrics" --profiler-address "127.0.0.1:$profiler" \
		--backup-sync-period 1m --store-validation-frequency 10s --garbage-collection-frequency 20s --log-level info \
		</dev/null >>"$CLUSTER_DIR/velero.log" 2>&1 &
	pid=$!
	env_set "VELERO_MODE=real" "VELERO_PID=$pid" "VELERO_LOG=$CLUSTER_DIR/velero.log" \
		"VELERO_METRICS_URL=http://127.0.0.1:$metrics/metrics" "VELERO_BIN=$BIN_DIR/velero" \
		"VELERO_HOME=$VDIR/home" "VELERO_PLUGIN_DIR=$VDIR/plugins"
	# Ready when this Velero has validated the BSL against the bucket (a restart finds the phase Available
	# already, so the log of this run is what counts).
	deadline=$((SECONDS + VELERO_READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "error: velero exited; last lines of $CLUSTER_DIR/velero.log:"
			tail -n 30 "$CLUSTER_DIR/velero.log" >&2
			exit 1
		fi
		if tail -c "+$((offset + 1))" "$CLUSTER_DIR/velero.log" | grep -q "$ready"; then
			if [[ ${1:-validated} == started ]]; then
				log "velero $(env_get VELERO_VERSION) (pid $pid) started (BSL not validated yet)"
			else
				log "velero $(env_get VELERO_VERSION) (pid $pid) up, BSL default Available (validated by Velero)"
			fi
			return 0
		fi
		sleep 0.2
	done
	log "error: velero not ready within ${VELERO_READY_TIMEOUT}s (no \"$ready\" in its log); last lines of the velero log:"
	tail -n 30 "$CLUSTER_DIR/velero.log" >&2
	exit 1
}

# --- with a node: Velero as an admin installs it ----------------------------------------------------------
# `velero install` renders the manifests (ServiceAccount, ClusterRoleBinding, Deployment `velero`, DaemonSet
# `node-agent`) for the images built here; the plugin comes in by its own image's init container, as upstream's.
# What this environment changes in them: the kubelet's root directory (the node's, under $CLUSTER_DIR), the local
# images never pulled, a 10 s BSL validation (tests see a restored S3 server quickly), and two concurrent backups.
# Velero 1.18's queue counts a backup as running until just after it has written its next phase; the write wakes the
# queue, which, with one backup allowed, may still count the finished one and leave the next queued until its
# 1-minute recheck (a burst of 24 backups of one namespace took over 7 minutes). With two allowed, that count no
# longer blocks; backups of one namespace still run one at a time (Velero's namespace check). CSI is enabled (Velero's
# built-in CSI support still needs the feature flag): the node's host-path driver (hack/node-csi.sh) snapshots
# claims, and the node agent is the data mover (DataUploads, DataDownloads) besides file-system backup.
start_velero_pods() {
	local image plugin_image manifests
	image=$(cat "$NAC_ROOT/bin/images/velero.name")
	plugin_image=$(cat "$NAC_ROOT/bin/images/velero-plugin-for-aws.name")
	manifests=$CLUSTER_DIR/velero-install.json
	mkdir -p "$VDIR/home"
	HOME=$VDIR/home KUBECONFIG=$KUBECONFIG_FILE "$BIN_DIR/velero" install --dry-run -o json --namespace "$VELERO_NAMESPACE" \
		--image "$image" --plugins "$plugin_image" --no-default-backup-location --no-secret \
		--use-node-agent --kubelet-root-dir "$(env_get NODE_DIR)/kubelet" --uploader-type kopia \
		--use-volume-snapshots=false --features=EnableCSI --wait=false \
		>"$manifests.tmp" || die "velero install --dry-run failed"
	python3 - "$manifests.tmp" "$(env_get NODE_DIR)/kubelet" >"$manifests" <<-'PY'
		import json, sys
		doc = json.load(open(sys.argv[1]))
		kubelet_root = sys.argv[2]
		items = doc["items"] if doc.get("kind") == "List" else [doc]
		out = []
		for o in items:
		    kind = o.get("kind")
		    if kind in ("CustomResourceDefinition", "Namespace"):
		        continue  # installed by cluster-up (the pinned CRDs) already
		    if kind in ("Deployment", "DaemonSet"):
		        spec = o["spec"]["template"]["spec"]
		        for c in spec.get("containers", []) + spec.get("initContainers", []):
		            c["imagePullPolicy"] = "IfNotPresent"
		            if kind == "Deployment" and c["name"] == "velero":
		                c["args"] = c.get("args", []) + ["--store-validation-frequency=10s", "--concurrent-backups=2"]
		        for v in spec.get("volumes", []):
		            hp = v.get("hostPath")
		            if hp and hp.get("path", "").startswith("/var/lib/kubelet"):
		                hp["path"] = kubelet_root + hp["path"][len("/var/lib/kubelet"):]
		    out.append(o)
		json.dump({"apiVersion": "v1", "kind": "List", "items": out}, sys.stdout)
	PY
	rm -f "$manifests.tmp"
	kubectl apply -f "$manifests" >/dev/null
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: v1
		kind: ConfigMap
		metadata:
		  name: fs-restore-action-config
		  namespace: $VELERO_NAMESPACE
		  labels: {velero.io/plugin-config: "", velero.io/pod-volume-restore: RestoreItemAction}
		data: {image: "$image"}
	EOF
	env_set "VELERO_MODE=real" "VELERO_IN_PODS=1" "VELERO_BIN=$BIN_DIR/velero" "VELERO_HOME=$VDIR/home" \
		"VELERO_IMAGE=$image"
	kubectl -n "$VELERO_NAMESPACE" rollout status deployment/velero --timeout="${VELERO_READY_TIMEOUT}s" >/dev/null ||
		die "Deployment velero not available; kubectl -n $VELERO_NAMESPACE logs deploy/velero"
	kubectl -n "$VELERO_NAMESPACE" rollout status daemonset/node-agent --timeout="${VELERO_READY_TIMEOUT}s" >/dev/null ||
		die "DaemonSet node-agent not ready"
	local deadline=$((SECONDS + VELERO_READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if [[ $(kubectl -n "$VELERO_NAMESPACE" get backupstoragelocation default -o jsonpath='{.status.phase}') == Available ]]; then
			log "velero $(env_get VELERO_VERSION) up in pods (Deployment velero, DaemonSet node-agent), BSL default Available"
			return 0
		fi
		sleep 1
	done
	die "the BSL did not become Available within ${VELERO_READY_TIMEOUT}s"
}

scale_velero() {
	kubectl -n "$VELERO_NAMESPACE" scale deployment/velero --replicas="$1" >/dev/null
	if (($1 == 0)); then
		kubectl -n "$VELERO_NAMESPACE" wait --for=delete pod -l deploy=velero --timeout=60s >/dev/null 2>&1 || true
	else
		kubectl -n "$VELERO_NAMESPACE" rollout status deployment/velero --timeout=120s >/dev/null
	fi
}

case ${1:-} in
--stop)
	[[ $NODE == 1 ]] || stop_velero
	stop_s3
	exit 0
	;;
--stop-velero)
	if [[ $NODE == 1 ]]; then scale_velero 0; else
		stop_velero
		env_set VELERO_PID=
	fi
	exit 0
	;;
--restart)
	if [[ $NODE == 1 ]]; then
		scale_velero 0
		scale_velero 1
	else
		stop_velero
		env_set VELERO_PID=
		start_velero
	fi
	exit 0
	;;
--restart-unvalidated)
	[[ $NODE == 1 ]] && die "--restart-unvalidated: the node environment runs Velero in pods (use --restart)"
	stop_velero
	env_set VELERO_PID=
	start_velero started
	exit 0
	;;
'') ;;
*) die "usage: $0 [--restart | --restart-unvalidated | --stop-velero | --stop]" ;;
esac

missing=()
for b in velero velero-plugin-for-aws versitygw; do
	[[ -x $BIN_DIR/$b ]] || missing+=("$b")
done
if ((${#missing[@]})); then
	[[ $BIN_DIR == "$NAC_ROOT/bin" ]] || die "missing in $BIN_DIR: ${missing[*]}"
	log "building ${missing[*]} (a few minutes on a cold cache)"
	"$NAC_ROOT/hack/go-tools.sh" "${missing[@]}"
fi

ok=false
trap '$ok || { stop_velero; stop_s3; }' EXIT
start_s3
apply_velero_objects
if [[ $NODE == 1 ]]; then
	start_velero_pods
else
	start_velero
fi
ok=true
