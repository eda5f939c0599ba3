# shellcheck shell=bash
# Shared by the scripts of the local environment (cluster-up/down, node-up, velero-up, install-crds, ...).
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

# env_get KEY: KEY's value in the environment's env file ($ENV_FILE, default $CLUSTER_DIR/env).
env_get() { sed -n "s/^export $1=//p" "${ENV_FILE:-$CLUSTER_DIR/env}" | tail -n 1; }

# env_set K=V...: replace (or add) these keys in the env file, atomically.
env_set() {
	local file=${ENV_FILE:-$CLUSTER_DIR/env} kv keys=()
	for kv in "$@"; do keys+=("${kv%%=*}"); done
	grep -v -E "^export ($(
		IFS='|'
		echo "${keys[*]}"
	))=" "$file" >"$file.tmp" || true
	for kv in "$@"; do printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}" >>"$file.tmp"; done
	mv -f "$file.tmp" "$file"
}

# new_cert CADIR OUT SUBJECT EKU [SANS]: OUT.key, OUT.crt signed by CADIR/ca.*
new_cert() {
	local cadir=$1 out=$2 subj=$3 eku=$4 sans=${5:-} ext
	[[ -s $out.crt && -s $out.key ]] && return 0
	ext=$(mktemp)
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$eku"
		[[ -n $sans ]] && echo "subjectAltName=$sans"
	} >"$ext"
	openssl req -new -newkey rsa:2048 -nodes -sha256 -keyout "$out.key" \
		-out "$out.csr" -subj "$subj" 2>/dev/null
	openssl x509 -req -in "$out.csr" -sha256 -days 3650 -CA "$cadir/ca.crt" \
		-CAkey "$cadir/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
		-extfile "$ext" -out "$out.crt" 2>/dev/null
	rm -f "$out.csr" "$ext"
}

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

# install_snapshot_crds: the volume-snapshot CRDs (VolumeSnapshot, VolumeSnapshotContent, VolumeSnapshotClass and
# the group kinds) of the pinned external-snapshotter (module tools/csi-snapshotter: its client/v8 module), copied
# to $CLUSTER_DIR/snapshot-crds and applied. Velero's restores warn without them; the node's CSI stack needs them.
install_snapshot_crds() {
	local snap mod=github.com/kubernetes-csi/external-snapshotter/client/v8
	# Downloaded first: `go list -m` names the directory of a module only once it is in the module cache.
	snap=$(cd "$NAC_ROOT/tools/csi-snapshotter" && go mod download "$mod" && go list -m -f '{{.Dir}}' "$mod") &&
		[[ -d $snap/config/crd ]] || die "no snapshot CRDs from module $mod (go mod download in tools/csi-snapshotter)"
	mkdir -p "$CLUSTER_DIR/snapshot-crds"
	install -m 0644 "$snap"/config/crd/*storage.k8s.io_*.yaml "$CLUSTER_DIR/snapshot-crds/"
	"$NAC_ROOT/hack/install-crds.sh" -f "$CLUSTER_DIR/snapshot-crds"
}

# apiserver_ready: /readyz of the apiserver recorded in $CLUSTER_DIR/env answers ok.
apiserver_ready() {
	[[ -x $KUBECTL && -f $CLUSTER_DIR/kubeconfig ]] || return 1
	[[ $("$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" --request-timeout=5s \
		get --raw /readyz 2>/dev/null) == ok ]]
}
