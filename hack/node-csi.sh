#!/usr/bin/env bash
# CSI volumes and snapshots on the local node (hack/node-up.sh starts and stops it): the project's host-path driver
# (tools/csi-hostpath: volumes are directories under $CLUSTER_DIR/node/csi, a snapshot is a copy), registered with
# the kubelet through its plugin registration socket; beside it the external provisioner and csi-snapshotter
# sidecars, and the snapshot controller, all host processes as the node's other parts are. In the cluster: the
# volume-snapshot CRDs, the CSIDriver (no attach step), the StorageClass `csi-hostpath` and the
# VolumeSnapshotClass `csi-hostpath`, labelled for Velero's CSI support.
#
# usage: hack/node-csi.sh           start (the node must be Ready); ready once the kubelet lists the driver
#        hack/node-csi.sh --stop    stop the processes (after the node's pods are gone: the kubelet needs the
#                                   driver to unmount their volumes); the volumes' directories go with the node's
#        hack/node-csi.sh --stop-snapshot-controller | --start-snapshot-controller   (fault tests)
#
# env: CLUSTER_DIR (default <repo>/.cluster), BIN_DIR
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

ENV_FILE=$CLUSTER_DIR/env
[[ -f $ENV_FILE ]] || die "no environment in $CLUSTER_DIR"
DRIVER=hostpath.csi.nac.local
CLASS=csi-hostpath
NODE_DIR=$CLUSTER_DIR/node
NODE_NAME=$(env_get NODE_NAME)
CSI_DIR=$NODE_DIR/csi
# Where the kubelet (root dir $NODE_DIR/kubelet) looks for plugins, and where CSI drivers keep their sockets.
REG_DIR=$NODE_DIR/kubelet/plugins_registry
SOCK=$NODE_DIR/kubelet/plugins/$DRIVER/csi.sock
CSI_READY_TIMEOUT=${CSI_READY_TIMEOUT:-60}
# name:env key, in the order they start (and stop in reverse).
PROCS=(csi-hostpath:CSI_DRIVER_PID csi-provisioner:CSI_PROVISIONER_PID csi-snapshotter:CSI_SNAPSHOTTER_PID
	snapshot-controller:SNAPSHOT_CONTROLLER_PID)

kubectl() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }

# The sidecars' identities: one client certificate each, so the API server's audit names who did what. They act
# for the cluster's admin (claims, volumes, snapshots of every namespace), as their upstream RBAC lets them.
kubeconfig_for() {
	local name=$1 pki=$NODE_DIR/pki out=$NODE_DIR/$1.kubeconfig
	(
		umask 077
		new_cert "$CLUSTER_DIR/pki" "$pki/$name" "/O=system:masters/CN=system:nac-node:$name" clientAuth
		cat >"$out" <<-EOF
			apiVersion: v1
			kind: Config
			clusters: [{name: local, cluster: {server: "$(env_get KUBE_APISERVER_URL)", certificate-authority: "$CLUSTER_DIR/pki/ca.crt"}}]
			users: [{name: u, user: {client-certificate: "$pki/$name.crt", client-key: "$pki/$name.key"}}]
			contexts: [{name: c, context: {cluster: local, user: u}}]
			current-context: c
		EOF
	)
	echo "$out"
}

# start NAME KEY ARGS...: a process in its own session, its log $NODE_DIR/NAME.log, recorded in the env file.
start() {
	local name=$1 key=$2 pid logf=$NODE_DIR/$1.log
	shift 2
	pid=$(env_get "$key")
	pid_is "$name" "$pid" && return 0
	setsid "$BIN_DIR/$name" "$@" </dev/null >"$logf" 2>&1 &
	pid=$!
	env_set "$key=$pid"
	sleep 0.5
	kill -0 "$pid" 2>/dev/null || {
		tail -n 30 "$logf" >&2
		die "$name exited at start (log: $logf)"
	}
}

start_snapshot_controller() {
	start snapshot-controller SNAPSHOT_CONTROLLER_PID --kubeconfig="$(kubeconfig_for snapshot-controller)" \
		--leader-election=false --v=2
}

stop_one() {
	local name=${1%%:*} key=${1#*:} p
	for p in $(env_get "$key") $(pids_of_cluster "$name"); do stop_pid "$name" "$p" 20 || true; done
	env_set "$key="
}

start_csi() {
	[[ -n $NODE_NAME ]] || die "no node in $CLUSTER_DIR (hack/node-up.sh first)"
	local missing=() p
	for p in "${PROCS[@]}"; do [[ -x $BIN_DIR/${p%%:*} ]] || missing+=("${p%%:*}"); done
	((${#missing[@]} == 0)) || "$NAC_ROOT/hack/go-tools.sh" "${missing[@]}"
	# A unix socket's path has at most 107 bytes.
	((${#REG_DIR} + ${#DRIVER} + 10 <= 107)) || die "the kubelet's directory $NODE_DIR/kubelet is too long a path for its sockets (a shorter CLUSTER_DIR)"
	mkdir -p "$CSI_DIR"

	install_snapshot_crds
	kubectl apply -f - >/dev/null <<-EOF
		apiVersion: storage.k8s.io/v1
		kind: CSIDriver
		metadata: {name: $DRIVER}
		spec:
		  attachRequired: false
		  podInfoOnMount: false
		  # The driver's directories take the pod's fsGroup as any directory does.
		  fsGroupPolicy: File
		  volumeLifecycleModes: [Persistent]
		---
		apiVersion: storage.k8s.io/v1
		kind: StorageClass
		metadata: {name: $CLASS}
		provisioner: $DRIVER
		reclaimPolicy: Delete
		volumeBindingMode: Immediate
		---
		apiVersion: snapshot.storage.k8s.io/v1
		kind: VolumeSnapshotClass
		metadata:
		  name: $CLASS
		  # Velero's CSI support takes the class of a driver that carries this label.
		  labels: {velero.io/csi-volumesnapshot-class: "true"}
		driver: $DRIVER
		deletionPolicy: Delete
	EOF

	start csi-hostpath CSI_DRIVER_PID --driver-name="$DRIVER" --endpoint="$SOCK" --registration-dir="$REG_DIR" \
		--state-dir="$CSI_DIR" --node-id="$NODE_NAME"
	start csi-provisioner CSI_PROVISIONER_PID --csi-address="$SOCK" --kubeconfig="$(kubeconfig_for csi-provisioner)" \
		--leader-election=false --extra-create-metadata --v=2
	start csi-snapshotter CSI_SNAPSHOTTER_PID --csi-address="$SOCK" --kubeconfig="$(kubeconfig_for csi-snapshotter)" \
		--leader-election=false --extra-create-metadata --v=2
	start_snapshot_controller
	env_set "CSI_DRIVER=$DRIVER" "CSI_STORAGE_CLASS=$CLASS" "CSI_SNAPSHOT_CLASS=$CLASS" "CSI_DIR=$CSI_DIR"

	# Ready once the kubelet has registered the driver (its CSINode lists it): pods can mount its volumes.
	local deadline=$((SECONDS + CSI_READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if [[ $(kubectl get csinode "$NODE_NAME" -o jsonpath='{.spec.drivers[*].name}' 2>/dev/null) == *"$DRIVER"* ]]; then
			log "CSI driver $DRIVER registered on $NODE_NAME; StorageClass and VolumeSnapshotClass $CLASS"
			return 0
		fi
		sleep 0.5
	done
	tail -n 20 "$NODE_DIR/csi-hostpath.log" >&2
	die "the kubelet did not register CSI driver $DRIVER within ${CSI_READY_TIMEOUT}s (logs: $NODE_DIR/csi-hostpath.log, kubelet.log)"
}

stop_csi() {
	local i
	for ((i = ${#PROCS[@]} - 1; i >= 0; i--)); do stop_one "${PROCS[i]}"; done
}

case ${1:-} in
'') start_csi ;;
--stop) stop_csi ;;
--stop-snapshot-controller) stop_one snapshot-controller:SNAPSHOT_CONTROLLER_PID ;;
--start-snapshot-controller) start_snapshot_controller ;;
*) die "usage: $0 [--stop | --stop-snapshot-controller | --start-snapshot-controller]" ;;
esac
