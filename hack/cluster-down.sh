#!/usr/bin/env bash
# Stops the local control plane started by hack/cluster-up.sh: the API server
# first (it hangs on shutdown once etcd is gone), then etcd. Waits for both to
# exit, SIGKILLs after a timeout, and leaves no process of this cluster behind.
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
APISERVER_PID='' ETCD_PID=''
if [[ -f $ENV_FILE ]]; then
	# Only the two pids are needed; read them without sourcing everything.
	APISERVER_PID=$(sed -n 's/^export APISERVER_PID=//p' "$ENV_FILE")
	ETCD_PID=$(sed -n 's/^export ETCD_PID=//p' "$ENV_FILE")
fi

status=0
# The recorded pids, then any other server still naming this directory
# (an env file lost or overwritten by a failed start).
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
