#!/usr/bin/env bash
# Starts a local Kubernetes control plane (etcd, kube-apiserver and
# kube-controller-manager; no scheduler, no kubelet) for nac's local runs and
# integration tests, as unprivileged processes on 127.0.0.1 with free ports,
# installs the Velero CRDs and the Velero namespace, and then, by default, a
# real S3 server and a real Velero server (hack/velero-up.sh).
#
# VELERO_MODE=real (default): Velero and versitygw run; the default
#   BackupStorageLocation points at the local bucket and Velero validates it.
# NODE=1 (root only): a real node too (hack/node-up.sh: containerd, kubelet, kube-proxy, kube-scheduler, pod
#   networking on the bridge cni0 with the node address 10.244.0.1). The API server binds to the node address
#   (pods reach it through the `kubernetes` Service), and Velero runs as an admin installs it: the server as
#   the Deployment `velero` and the node agent as a DaemonSet, from images built here (hack/images.sh), with
#   the S3 server on the node address. One such environment per machine.
# VELERO_MODE=fake: no Velero runs; the default BSL is given a written
#   status Available, and tests play Velero by patching Velero objects (for
#   what a real Velero cannot be made to do on demand: queue races, failures).
#
# usage: hack/cluster-up.sh            start (or report that it is running)
#        hack/cluster-up.sh --status   exit 0 if running, 1 if not
#
# env: CLUSTER_DIR       state directory (default <repo>/.cluster)
#      VELERO_MODE       real (default) or fake
#      VELERO_NAMESPACE  default openshift-adp
#      VELERO_VERSION    default v1.18.3
#      BIN_DIR           binaries (default <repo>/bin; missing ones are built)
#      READY_TIMEOUT     seconds to wait for /readyz (default 60)
#      NODE              1: start a real node (see above); default 0
#      APISERVER_PROFILING  true: the API server serves /debug/pprof (CPU profiles for the admission bench)
#
# Writes, under $CLUSTER_DIR:
#   env               shell-sourceable: `. .cluster/env` exports KUBECONFIG etc.
#   kubeconfig        admin (system:masters) kubeconfig, credentials embedded
#   pki/              ca.{crt,key} apiserver.{crt,key} admin.{crt,key} sa.{key,pub}
#   pki/webhook/      ca.{crt,key} tls.{crt,key}: nac's webhook serving cert
#                     (SANs 127.0.0.1, ::1, localhost)
#   etcd/             etcd data (wiped at every fresh start)
#   etcd.log kube-apiserver.log kube-controller-manager.log
#   velero-crds/      the CRDs of the pinned Velero release
#   real mode: s3/ (the bucket as plain files), velero/, velero.log,
#              versitygw.log (see hack/velero-up.sh)
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp}
VELERO_MODE=${VELERO_MODE:-real}
case $VELERO_MODE in real | fake) ;; *) die "VELERO_MODE must be real or fake, not '$VELERO_MODE'" ;; esac
VELERO_VERSION=${VELERO_VERSION:-v1.18.3}
READY_TIMEOUT=${READY_TIMEOUT:-60}
NODE=${NODE:-0}
case $NODE in 0 | 1) ;; *) die "NODE must be 0 or 1, not '$NODE'" ;; esac
# Where the API server listens: loopback, or the node address that pods reach too.
API_HOST=127.0.0.1
[[ $NODE == 1 ]] && API_HOST=10.244.0.1
SERVICE_CIDR=10.0.0.0/24
PKI=$CLUSTER_DIR/pki
ENV_FILE=$CLUSTER_DIR/env
KUBECONFIG_FILE=$CLUSTER_DIR/kubeconfig

# running: the cluster recorded in $ENV_FILE is up. A subshell, so that the
# sourced variables do not leak into the servers started below.
running() (
	[[ -f $ENV_FILE ]] || exit 1
	ETCD_PID='' APISERVER_PID='' KCM_PID=''
	# shellcheck disable=SC1090
	. "$ENV_FILE"
	pid_is etcd "$ETCD_PID" && pid_is kube-apiserver "$APISERVER_PID" && pid_is kube-controller-manager "$KCM_PID" &&
		apiserver_ready
)

# apiserver_stopped: the cluster in $CLUSTER_DIR runs but for its API server (stopped, or stopping).
apiserver_stopped() (
	[[ -f $ENV_FILE ]] || exit 1
	ETCD_PID='' KCM_PID=''
	# shellcheck disable=SC1090
	. "$ENV_FILE"
	pid_is etcd "$ETCD_PID" && pid_is kube-controller-manager "$KCM_PID" && ! apiserver_ready
)

# running_mode: the VELERO_MODE of the cluster recorded in $ENV_FILE.
running_mode() { sed -n 's/^export VELERO_MODE=//p' "$ENV_FILE" | tail -n 1; }

restart_apiserver=false
if [[ ${1:-} == --restart-apiserver ]]; then
	# Tests of watch recovery: stop the API server, keep it down RESTART_DOWN_SECS, start it again on the same
	# port with the same etcd (nothing is lost). Also starts an API server a test stopped by itself.
	running || apiserver_stopped || die "no running cluster in $CLUSTER_DIR to restart"
	restart_apiserver=true
elif [[ ${1:-} == --status ]]; then
	if running; then
		echo "cluster in $CLUSTER_DIR is running: $(grep '^export KUBE_APISERVER_URL=' "$ENV_FILE" | cut -d= -f2-)"
		exit 0
	fi
	echo "cluster in $CLUSTER_DIR is not running"
	exit 1
elif [[ $# -gt 0 ]]; then
	die "usage: $0 [--status | --restart-apiserver]"
fi

if ! $restart_apiserver && running; then
	mode=$(running_mode)
	[[ $mode == "$VELERO_MODE" ]] ||
		die "the cluster in $CLUSTER_DIR runs with VELERO_MODE=${mode:-?}, not $VELERO_MODE: stop it first (make cluster-down)"
	# Velero or the S3 server may have died or been stopped: velero-up starts what is missing.
	[[ $VELERO_MODE == fake ]] || "$NAC_ROOT/hack/velero-up.sh"
	log "cluster in $CLUSTER_DIR is already running (KUBECONFIG=$KUBECONFIG_FILE, VELERO_MODE=$VELERO_MODE)"
	exit 0
fi

# Leftovers of a crashed or half-stopped cluster in the same directory.
if ! $restart_apiserver && { [[ -f $ENV_FILE ]] || [[ -n $(pids_of_cluster etcd) ]] || [[ -n $(pids_of_cluster kube-apiserver) ]] ||
	[[ -n $(pids_of_cluster kube-controller-manager) ]]; }; then
	log "cleaning up a stale cluster in $CLUSTER_DIR"
	"$NAC_ROOT/hack/cluster-down.sh"
fi

for tool in openssl curl base64 setsid; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

# --- binaries ---------------------------------------------------------------
missing=()
for b in kube-apiserver kube-controller-manager etcd kubectl; do
	[[ -x $BIN_DIR/$b ]] || missing+=("$b")
done
if ((${#missing[@]})); then
	[[ $BIN_DIR == "$NAC_ROOT/bin" ]] || die "missing in $BIN_DIR: ${missing[*]}"
	log "building ${missing[*]} (several minutes on a cold cache)"
	"$NAC_ROOT/hack/go-tools.sh" "${missing[@]}"
fi

mkdir -p "$CLUSTER_DIR" "$PKI/webhook"
# A fresh cluster gets a fresh bucket: Velero would otherwise sync an earlier run's backups into it. A restart of
# the API server keeps them: the bucket and Velero's working files belong to the running Velero and S3 server.
$restart_apiserver || rm -rf "$CLUSTER_DIR/s3" "$CLUSTER_DIR/velero"

# --- certificates -----------------------------------------------------------
# new_ca DIR CN: DIR/ca.key, DIR/ca.crt
new_ca() {
	local dir=$1 cn=$2
	[[ -s $dir/ca.crt && -s $dir/ca.key ]] && return 0
	openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
		-keyout "$dir/ca.key" -out "$dir/ca.crt" -subj "/CN=$cn" \
		-addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

(
	umask 077
	new_ca "$PKI" nac-test-ca
	new_cert "$PKI" "$PKI/apiserver" /CN=kube-apiserver serverAuth \
		"IP:127.0.0.1,IP:::1,DNS:localhost,IP:10.0.0.1,IP:10.244.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	new_cert "$PKI" "$PKI/admin" "/O=system:masters/CN=admin" clientAuth
	# The API server's client certificate towards kubelets (logs, exec, port-forward).
	new_cert "$PKI" "$PKI/apiserver-kubelet-client" "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
	if [[ ! -s $PKI/sa.key || ! -s $PKI/sa.pub ]]; then
		openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>/dev/null
		openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
	# nac's admission webhook runs as a local process; the apiserver calls it
	# at https://127.0.0.1:PORT with caBundle = pki/webhook/ca.crt.
	new_ca "$PKI/webhook" nac-webhook-ca
	new_cert "$PKI/webhook" "$PKI/webhook/tls" /CN=nac-webhook serverAuth \
		"IP:127.0.0.1,IP:::1,DNS:localhost"
)
# Certificates are readable by the user only; the public parts by anyone.
chmod 0644 "$PKI"/*.crt "$PKI/sa.pub" "$PKI"/webhook/*.crt

# --- ports ------------------------------------------------------------------
# free_ports N: N distinct loopback TCP ports that are free right now.
free_ports() {
	if command -v python3 >/dev/null; then
		python3 - "$1" <<-'PY'
			import socket, sys
			socks = []
			for _ in range(int(sys.argv[1])):
			    s = socket.socket()
			    s.bind(("127.0.0.1", 0))
			    socks.append(s)
			print(" ".join(str(s.getsockname()[1]) for s in socks))
		PY
	else
		local ports=() p
		while ((${#ports[@]} < $1)); do
			p=$((20000 + RANDOM % 40000))
			[[ " ${ports[*]} " == *" $p "* ]] && continue
			(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
			ports+=("$p")
		done
		echo "${ports[*]}"
	fi
}

# --- start ------------------------------------------------------------------
ETCD_PID='' APISERVER_PID='' KCM_PID='' KCM_PORT=''
started_ok=false
on_exit() {
	if ! $started_ok; then
		[[ -f $ENV_FILE ]] && "$NAC_ROOT/hack/velero-up.sh" --stop 2>/dev/null
		[[ $NODE == 1 ]] && "$NAC_ROOT/hack/node-up.sh" --stop
		[[ -n $KCM_PID ]] && stop_pid kube-controller-manager "$KCM_PID" 20
		[[ -n $APISERVER_PID ]] && stop_pid kube-apiserver "$APISERVER_PID" 20
		[[ -n $ETCD_PID ]] && stop_pid etcd "$ETCD_PID" 10
		rm -f "$ENV_FILE"
	fi
	return 0
}
trap on_exit EXIT

write_env() {
	local tmp=$ENV_FILE.tmp
	{
		echo "# Written by hack/cluster-up.sh; source it: . $ENV_FILE"
		local kv keys=''
		for kv in \
			"CLUSTER_DIR=$CLUSTER_DIR" \
			"KUBECONFIG=$KUBECONFIG_FILE" \
			"KUBECTL=$KUBECTL" \
			"KUBE_APISERVER_URL=https://$API_HOST:$APISERVER_PORT" \
			"API_HOST=$API_HOST" \
			"NODE=$NODE" \
			"APISERVER_PORT=$APISERVER_PORT" \
			"APISERVER_PID=$APISERVER_PID" \
			"APISERVER_LOG=$CLUSTER_DIR/kube-apiserver.log" \
			"ETCD_CLIENT_PORT=$ETCD_CLIENT_PORT" \
			"ETCD_PEER_PORT=$ETCD_PEER_PORT" \
			"ETCD_ENDPOINT=http://127.0.0.1:$ETCD_CLIENT_PORT" \
			"ETCD_PID=$ETCD_PID" \
			"ETCD_LOG=$CLUSTER_DIR/etcd.log" \
			"ETCD_DATA_DIR=$CLUSTER_DIR/etcd" \
			"KCM_PID=$KCM_PID" \
			"KCM_PORT=$KCM_PORT" \
			"KCM_LOG=$CLUSTER_DIR/kube-controller-manager.log" \
			"PKI_DIR=$PKI" \
			"CA_CERT=$PKI/ca.crt" \
			"ADMIN_CERT=$PKI/admin.crt" \
			"ADMIN_KEY=$PKI/admin.key" \
			"WEBHOOK_CA_CERT=$PKI/webhook/ca.crt" \
			"WEBHOOK_TLS_CERT=$PKI/webhook/tls.crt" \
			"WEBHOOK_TLS_KEY=$PKI/webhook/tls.key" \
			"VELERO_MODE=$VELERO_MODE" \
			"VELERO_NAMESPACE=$VELERO_NAMESPACE" \
			"VELERO_VERSION=$VELERO_VERSION" \
			"VELERO_CRDS_DIR=$CLUSTER_DIR/velero-crds"; do
			printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}"
			keys+="|${kv%%=*}"
		done
		# Keys written by others (hack/velero-up.sh) survive an API server restart.
		[[ -f $ENV_FILE ]] && grep -E '^export [A-Z0-9_]+=' "$ENV_FILE" | grep -v -E "^export (${keys#|})=" || true
	} >"$tmp"
	mv -f "$tmp" "$ENV_FILE"
}

write_kubeconfig() {
	local tmp=$KUBECONFIG_FILE.tmp
	(
		umask 077
		cat >"$tmp" <<-EOF
			apiVersion: v1
			kind: Config
			clusters:
			- name: nac-test
			  cluster:
			    server: https://$API_HOST:$APISERVER_PORT
			    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
			users:
			- name: admin
			  user:
			    client-certificate-data: $(base64 -w0 <"$PKI/admin.crt")
			    client-key-data: $(base64 -w0 <"$PKI/admin.key")
			contexts:
			- name: nac-test
			  context:
			    cluster: nac-test
			    user: admin
			current-context: nac-test
		EOF
	)
	mv -f "$tmp" "$KUBECONFIG_FILE"
}

# start_etcd: 0 when etcd serves, 2 when its ports were taken (retry), 1 otherwise.
start_etcd() {
	rm -rf "$CLUSTER_DIR/etcd"
	mkdir -m 0700 "$CLUSTER_DIR/etcd"
	# etcd reads every ETCD_* environment variable as a flag and dies when one
	# conflicts with a command-line flag: start it without any (a caller may
	# have sourced $ENV_FILE, which has ETCD_PID, ETCD_DATA_DIR, ...).
	local unset_etcd=() v
	for v in $(compgen -e); do
		[[ $v == ETCD_* ]] && unset_etcd+=(-u "$v")
	done
	# setsid: own session and process group, so the server outlives this
	# script and cluster-down can signal the whole group.
	env "${unset_etcd[@]}" setsid "$BIN_DIR/etcd" \
		--name=nac-test \
		--data-dir="$CLUSTER_DIR/etcd" \
		--listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster="nac-test=http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster-state=new \
		--unsafe-no-fsync \
		--log-level=warn \
		</dev/null >"$CLUSTER_DIR/etcd.log" 2>&1 &
	ETCD_PID=$!
	local i
	for ((i = 0; i < 200; i++)); do
		if ! kill -0 "$ETCD_PID" 2>/dev/null; then
			ETCD_PID=''
			grep -q 'address already in use' "$CLUSTER_DIR/etcd.log" && return 2
			return 1
		fi
		# /health answers once etcd has elected itself leader.
		if [[ $(curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null) == *'"health":"true"'* ]]; then
			return 0
		fi
		sleep 0.1
	done
	return 1
}

# wait_serving PIDVAR LOG CHECK: waits up to READY_TIMEOUT for CHECK to pass while the process in $PIDVAR
# runs. 0 when it passes, 2 when the process died on a taken port, 1 otherwise ($PIDVAR is cleared when it died).
wait_serving() {
	local -n pid_ref=$1
	local log=$2 check=$3 deadline=$((SECONDS + READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if ! kill -0 "$pid_ref" 2>/dev/null; then
			pid_ref=''
			grep -q 'address already in use' "$log" && return 2
			return 1
		fi
		"$check" && return 0
		sleep 0.3
	done
	return 1
}

# start_apiserver: 0 when /readyz is ok, 2 when its port was taken, 1 otherwise.
start_apiserver() {
	# With a node: the `kubernetes` Service's endpoint is published (pods reach the API server by it), and the
	# API server talks to the kubelet (logs, exec). Without: no endpoint anything could reach.
	local node_flags=(--endpoint-reconciler-type=none --allow-privileged=false)
	[[ $NODE == 1 ]] && node_flags=(
		--allow-privileged=true
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
		--kubelet-client-key="$PKI/apiserver-kubelet-client.key"
		--kubelet-certificate-authority="$PKI/ca.crt"
		--kubelet-preferred-address-types=InternalIP
	)
	setsid "$BIN_DIR/kube-apiserver" \
		--bind-address="$API_HOST" \
		--secure-port="$APISERVER_PORT" \
		--advertise-address="$API_HOST" \
		"${node_flags[@]}" \
		--etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
		--tls-cert-file="$PKI/apiserver.crt" \
		--tls-private-key-file="$PKI/apiserver.key" \
		--client-ca-file="$PKI/ca.crt" \
		--authorization-mode=Node,RBAC \
		--service-account-issuer="https://$API_HOST:$APISERVER_PORT" \
		--service-account-key-file="$PKI/sa.pub" \
		--service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--profiling="${APISERVER_PROFILING:-false}" \
		--v=1 \
		</dev/null >"$CLUSTER_DIR/kube-apiserver.log" 2>&1 &
	APISERVER_PID=$!
	wait_serving APISERVER_PID "$CLUSTER_DIR/kube-apiserver.log" apiserver_ready
}

# start_kcm: 0 when kube-controller-manager's /healthz is ok, 2 when its port was taken, 1 otherwise. It runs
# the namespace controller (deleted namespaces go away), the garbage collector (owner references), the
# Deployment/ReplicaSet controllers (pods are created and stay Pending: no scheduler, no kubelet) and the
# ServiceAccount controllers, as the admin of the kubeconfig.
start_kcm() {
	# Without a node, the controllers for nodes and volumes have nothing to do.
	local controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route,-persistentvolume-binder,-attachdetach,-persistentvolume-expander,-ephemeral-volume,-taint-eviction-controller'
	[[ $NODE == 1 ]] && controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route'
	setsid "$BIN_DIR/kube-controller-manager" \
		--kubeconfig="$KUBECONFIG_FILE" \
		--authentication-kubeconfig="$KUBECONFIG_FILE" \
		--authorization-kubeconfig="$KUBECONFIG_FILE" \
		--authentication-skip-lookup=true \
		--bind-address=127.0.0.1 \
		--secure-port="$KCM_PORT" \
		--leader-elect=false \
		--use-service-account-credentials=false \
		--service-account-private-key-file="$PKI/sa.key" \
		--root-ca-file="$PKI/ca.crt" \
		--cluster-signing-cert-file="$PKI/ca.crt" \
		--cluster-signing-key-file="$PKI/ca.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--controllers="$controllers" \
		--profiling=false \
		--v=1 \
		</dev/null >"$CLUSTER_DIR/kube-controller-manager.log" 2>&1 &
	KCM_PID=$!
	wait_serving KCM_PID "$CLUSTER_DIR/kube-controller-manager.log" kcm_healthy
}

kcm_healthy() { [[ $(curl -sk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz" 2>/dev/null) == ok ]]; }

fail_with_log() {
	local name=$1 file=$2
	log "error: $name did not come up; last lines of $file:"
	tail -n 40 "$file" >&2 || true
	exit 1
}

if $restart_apiserver; then
	# shellcheck disable=SC1090
	. "$ENV_FILE"
	stop_pid kube-apiserver "$APISERVER_PID" 20
	sleep "${RESTART_DOWN_SECS:-2}"
	log "restarting kube-apiserver on https://$API_HOST:$APISERVER_PORT"
	rc=0
	start_apiserver || rc=$?
	((rc == 0)) || fail_with_log kube-apiserver "$CLUSTER_DIR/kube-apiserver.log"
	write_env
	started_ok=true
	log "apiserver ready again (pid $APISERVER_PID)"
	exit 0
fi

[[ $NODE == 1 ]] && "$NAC_ROOT/hack/node-up.sh" --network
for _ in 1 2 3; do
	read -r ETCD_CLIENT_PORT ETCD_PEER_PORT APISERVER_PORT < <(free_ports 3)
	log "starting etcd on 127.0.0.1:$ETCD_CLIENT_PORT (peer $ETCD_PEER_PORT)"
	rc=0
	start_etcd || rc=$?
	if ((rc == 2)); then
		log "etcd ports taken, retrying with others"
		continue
	fi
	((rc == 0)) || fail_with_log etcd "$CLUSTER_DIR/etcd.log"

	write_kubeconfig
	write_env
	log "starting kube-apiserver on https://$API_HOST:$APISERVER_PORT"
	rc=0
	start_apiserver || rc=$?
	if ((rc == 2)); then
		log "apiserver port taken, retrying with others"
		stop_pid etcd "$ETCD_PID" 10
		ETCD_PID=''
		continue
	fi
	((rc == 0)) || fail_with_log kube-apiserver "$CLUSTER_DIR/kube-apiserver.log"
	break
done
[[ -n $APISERVER_PID ]] || die "could not find free ports after 3 attempts"
write_env
log "apiserver ready (pid $APISERVER_PID), etcd pid $ETCD_PID"

for _ in 1 2 3; do
	read -r KCM_PORT < <(free_ports 1)
	rc=0
	start_kcm || rc=$?
	((rc == 2)) && continue
	((rc == 0)) || fail_with_log kube-controller-manager "$CLUSTER_DIR/kube-controller-manager.log"
	break
done
[[ -n $KCM_PID ]] || die "could not find a free port for kube-controller-manager after 3 attempts"
write_env
log "kube-controller-manager ready (pid $KCM_PID)"
if [[ $NODE == 1 ]]; then "$NAC_ROOT/hack/node-up.sh"; fi

# --- Velero -----------------------------------------------------------------
kubectl() { "$KUBECTL" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

VELERO_VERSION=$VELERO_VERSION "$NAC_ROOT/hack/velero-crds.sh" "$CLUSTER_DIR/velero-crds"
"$NAC_ROOT/hack/install-crds.sh" -f "$CLUSTER_DIR/velero-crds"

kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $VELERO_NAMESPACE
EOF

if [[ $VELERO_MODE == real ]]; then
	"$NAC_ROOT/hack/velero-up.sh"
	started_ok=true
	log "cluster up with real Velero: . $ENV_FILE   (KUBECONFIG=$KUBECONFIG_FILE, Velero namespace $VELERO_NAMESPACE)"
	exit 0
fi

# Fake mode: a BSL that nothing validates, Available by a written status.
kubectl apply -f - >/dev/null <<EOF
apiVersion: velero.io/v1
kind: BackupStorageLocation
metadata:
  name: default
  namespace: $VELERO_NAMESPACE
spec:
  provider: aws
  default: true
  objectStorage:
    bucket: nac-test
  config:
    region: us-east-1
EOF

# The Velero CRDs have no status subresource, so the status is written with
# the object itself. Fall back to the subresource should a release add one.
status_patch=$(printf '{"status":{"phase":"Available","lastValidationTime":"%s"}}' "$(date -u +%Y-%m-%dT%H:%M:%SZ)")
kubectl -n "$VELERO_NAMESPACE" patch backupstoragelocation default --type=merge -p "$status_patch" >/dev/null
if [[ $(kubectl -n "$VELERO_NAMESPACE" get backupstoragelocation default -o jsonpath='{.status.phase}') != Available ]]; then
	kubectl -n "$VELERO_NAMESPACE" patch backupstoragelocation default --subresource=status --type=merge -p "$status_patch" >/dev/null
fi
[[ $(kubectl -n "$VELERO_NAMESPACE" get backupstoragelocation default -o jsonpath='{.status.phase}') == Available ]] ||
	die "could not set the default BackupStorageLocation to Available"

started_ok=true
log "cluster up with fake Velero: . $ENV_FILE   (KUBECONFIG=$KUBECONFIG_FILE, Velero namespace $VELERO_NAMESPACE)"
