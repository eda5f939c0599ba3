# shellcheck shell=bash
# Shared by hack/cluster-up.sh, hack/cluster-down.sh and hack/install-crds.sh.
# Sourced, not executed. Sets:
#   NAC_ROOT     repository root
#   BIN_DIR      where kube-apiserver, etcd and kubectl live (default $NAC_ROOT/bin)
#   CLUSTER_DIR  absolute state directory (default $NAC_ROOT/.cluster; a
#                relative CLUSTER_DIR is taken relative to the current directory)
#   KUBECTL      path of the kubectl binary

NAC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
BIN_DIR=${BIN_DIR:-$NAC_ROOT/bin}
CLUSTER_DIR=${CLUSTER_DIR:-$NAC_ROOT/.cluster}
case $CLUSTER_DIR in
/*) ;;
*) CLUSTER_DIR=$PWD/$CLUSTER_DIR ;;
esac
# Normalise (no symlink resolution needed; just drop ./ and trailing /).
CLUSTER_DIR=$(realpath -m -- "$CLUSTER_DIR")
KUBECTL=${KUBECTL:-$BIN_DIR/kubectl}

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

# pid_is NAME PID: PID is alive and runs the binary NAME (guards against pid
# reuse after a reboot or a crash).
pid_is() {
	local name=$1 pid=$2 exe
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	exe=${exe% (deleted)}
	[[ ${exe##*/} == "$name" ]]
}

# wait_reaped PID: give the parent (init, for a server started with setsid by
# a script that has exited) up to 5s to reap the exited PID, so that no
# <defunct> entry lingers in ps/pgrep output.
wait_reaped() {
	local pid=$1 i
	for ((i = 0; i < 50; i++)); do
		[[ -e /proc/$pid ]] || return 0
		sleep 0.1
	done
	return 0
}

# stop_pid NAME PID [TIMEOUT]: SIGTERM the process group led by PID (the
# scripts start every server with setsid), wait, then SIGKILL.
stop_pid() {
	local name=$1 pid=$2 timeout=${3:-30} i
	pid_is "$name" "$pid" || return 0
	log "stopping $name (pid $pid)"
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < timeout * 10; i++)); do
		pid_is "$name" "$pid" || {
			wait_reaped "$pid"
			return 0
		}
		sleep 0.1
	done
	log "$name (pid $pid) still running after ${timeout}s, killing it"
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		pid_is "$name" "$pid" || {
			wait_reaped "$pid"
			return 0
		}
		sleep 0.1
	done
	log "error: $name (pid $pid) survived SIGKILL"
	return 1
}

# pids_of_cluster NAME: pids of NAME processes whose command line names
# $CLUSTER_DIR (for a cluster whose env file was lost).
pids_of_cluster() {
	local name=$1 p cmd
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		pid_is "$name" "$p" || continue
		cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
		[[ $cmd == *"$CLUSTER_DIR/"* ]] && printf '%s\n' "$p"
	done
	return 0
}

# apiserver_ready: /readyz of the apiserver recorded in $CLUSTER_DIR/env answers ok.
apiserver_ready() {
	[[ -x $KUBECTL && -f $CLUSTER_DIR/kubeconfig ]] || return 1
	[[ $("$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" --request-timeout=5s \
		get --raw /readyz 2>/dev/null) == ok ]]
}
