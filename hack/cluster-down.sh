#!/usr/bin/env bash
# Stops the local environment started by hack/cluster-up.sh: the node (NODE=1), Velero and the S3
# server, kube-controller-manager, then the API server (it hangs on shutdown
# once etcd is gone), then etcd. Waits for each to exit, SIGKILLs after a
# timeout, and leaves no process of this cluster behind.
#
# usage: hack/cluster-down.sh           stop; keep $CLUSTER_DIR (pki, logs, CRDs)
#        hack/cluster-down.sh --clean   stop, then remove $CLUSTER_DIR
# env:   CLUSTER_DIR (default <repo>/.cluster)
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

clean=false
case ${1:-} in
--clean) clean=true ;;
'') ;;
*) die "usage: $0 [--clean]" ;;
esac

ENV_FILE=$CLUSTER_DIR/env
APISERVER_PID='' ETCD_PID='' KCM_PID='' VELERO_PID='' S3_PID=''
if [[ -f $ENV_FILE ]]; then
	# Only the pids are needed; read them without sourcing everything.
	pid_of() { sed -n "s/^export $1=//p" "$ENV_FILE" | tail -n 1; }
	APISERVER_PID=$(pid_of APISERVER_PID)
	ETCD_PID=$(pid_of ETCD_PID)
	KCM_PID=$(pid_of KCM_PID)
	VELERO_PID=$(pid_of VELERO_PID)
	S3_PID=$(pid_of S3_PID)
fi

status=0
# A node first, while the API server runs: its pods are deleted (the kubelet unmounts their volumes and removes
# their networks), then its processes are stopped and the machine state it changed is restored.
if [[ -f $ENV_FILE && $(sed -n 's/^export NODE=//p' "$ENV_FILE" | tail -n 1) == 1 ]] ||
	[[ -f /run/nac-node.owner && $(cat /run/nac-node.owner) == "$CLUSTER_DIR" ]]; then
	"$NAC_ROOT/hack/node-up.sh" --stop || status=1
fi
# The recorded pids, then any other server still naming this directory
# (an env file lost or overwritten by a failed start). Velero first: it writes
# to the bucket and the API server until it stops.
for p in $VELERO_PID $(pids_of_cluster velero); do
	stop_pid velero "$p" 20 || status=1
done
for p in $S3_PID $(pids_of_cluster versitygw); do
	stop_pid versitygw "$p" 10 || status=1
done
for p in $KCM_PID $(pids_of_cluster kube-controller-manager); do
	stop_pid kube-controller-manager "$p" 20 || status=1
done
for p in $APISERVER_PID $(pids_of_cluster kube-apiserver); do
	stop_pid kube-apiserver "$p" 30 || status=1
done
for p in $ETCD_PID $(pids_of_cluster etcd); do
	stop_pid etcd "$p" 15 || status=1
done
((status == 0)) || die "some processes of $CLUSTER_DIR could not be stopped"
rm -f "$ENV_FILE"

if $clean && [[ -d $CLUSTER_DIR ]]; then
	# Refuse to remove anything that does not look like a cluster directory.
	case $CLUSTER_DIR in
	/ | "$HOME" | "$NAC_ROOT") die "refusing to remove $CLUSTER_DIR" ;;
	esac
	if [[ -d $CLUSTER_DIR/pki || -d $CLUSTER_DIR/etcd || -d $CLUSTER_DIR/velero-crds || -z $(ls -A "$CLUSTER_DIR") ]]; then
		rm -rf -- "$CLUSTER_DIR"
		log "removed $CLUSTER_DIR"
	else
		die "$CLUSTER_DIR does not look like a cluster directory; not removing it"
	fi
fi
log "cluster in $CLUSTER_DIR is down"
