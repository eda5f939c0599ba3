#!/usr/bin/env bash
# A real node beside the local control plane (hack/cluster-up.sh with NODE=1): containerd and runc from Debian
# packages, kubelet, kube-proxy and kube-scheduler built from the pinned Kubernetes module, pod networking on a
# bridge with the node address 10.244.0.1, images imported from OCI archives (hack/images.sh; no registry), and
# CSI volumes and snapshots (hack/node-csi.sh: the project's host-path driver, the external provisioner,
# csi-snapshotter and the snapshot controller).
# Needs root. One node per machine: the bridge, the kubelet's ports and a few host paths are machine-wide.
#
# usage: hack/node-up.sh --network   create the bridge cni0 (10.244.0.1/24) and enable forwarding; cluster-up
#                                    does this before the API server starts, which binds to the node address
#        hack/node-up.sh             start containerd, import the images, start kube-scheduler, kubelet and
#                                    kube-proxy, wait until the node is Ready (the control plane must run), then
#                                    its CSI driver and snapshot machinery (hack/node-csi.sh)
#        hack/node-up.sh --stop      delete every pod, stop the node's processes and restore the machine: no
#                                    process, mount, iptables chain, netns, cgroup, sysctl or host path is left
#        hack/node-up.sh --import FILE...   import OCI archives into the node's containerd
#
# env: CLUSTER_DIR (default <repo>/.cluster), BIN_DIR
#
# Under $CLUSTER_DIR/node: containerd/ (config, root, state, socket), kubelet/ (its root dir), pki/ (kubelet
# and kube-proxy certificates), cni/ (config, IPAM state), pod-logs/, *.log; host-wide state lives in
# /var/lib/kubelet (device plugins), /run/containerd (shims), /var/run/netns, /var/lib/cni and the cgroups
# /kubepods, all removed by --stop. $NODE_OWNER records which cluster directory owns the node.
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
NODE_NAME=nac-node
NODE_DIR=$CLUSTER_DIR/node
NODE_OWNER=/run/nac-node.owner
SYSCTL_SAVE=/run/nac-node.sysctl
ENV_FILE=$CLUSTER_DIR/env
CTR_SOCK=$NODE_DIR/containerd/containerd.sock
NODE_READY_TIMEOUT=${NODE_READY_TIMEOUT:-120}
DEBIAN_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack musl-tools busybox-static)

kubectl() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }
ctr() { command ctr --address "$CTR_SOCK" -n k8s.io "$@"; }

need_root() { ((EUID == 0)) || die "the node needs root (containerd, kubelet, iptables); without it use the process-only environment (NODE=0)"; }

# The Debian packages the node runs on; installed when missing (apt-get, as root).
ensure_packages() {
	local missing=() p
	for p in "${DEBIAN_PACKAGES[@]}"; do
		[[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == 'install ok installed' ]] || missing+=("$p")
	done
	((${#missing[@]} == 0)) && return 0
	log "installing Debian packages: ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

claim_node() {
	if [[ -f $NODE_OWNER ]]; then
		local owner
		owner=$(cat "$NODE_OWNER")
		[[ $owner == "$CLUSTER_DIR" ]] && return 0
		if [[ -f $owner/env ]] && grep -q '^export NODE=1' "$owner/env"; then
			die "the node is in use by the environment in $owner (stop it first: CLUSTER_DIR=$owner make cluster-down)"
		fi
	fi
	echo "$CLUSTER_DIR" >"$NODE_OWNER"
}

# remember_sysctl KEY: the machine's value before the node's first change, restored by --stop.
remember_sysctl() {
	grep -q "^$1=" "$SYSCTL_SAVE" 2>/dev/null || echo "$1=$(sysctl -n "$1")" >>"$SYSCTL_SAVE"
}

sysctl_set() {
	remember_sysctl "$1"
	[[ $(sysctl -n "$1") == "$2" ]] || sysctl -qw "$1=$2"
}

network_up() {
	need_root
	claim_node
	if ! ip link show cni0 >/dev/null 2>&1; then
		ip link add cni0 type bridge
	fi
	[[ $(ip -4 -o addr show dev cni0) == *" $NODE_IP/"* ]] || ip addr add "$NODE_IP/24" dev cni0
	ip link set cni0 up
	modprobe br_netfilter 2>/dev/null || true
	sysctl_set net.ipv4.ip_forward 1
	# The kubelet sets these itself (protectKernelDefaults=false).
	for k in vm.overcommit_memory kernel.panic kernel.panic_on_oops; do remember_sysctl "$k"; done
}

kubeconfig_for() {
	local out=$1 cert=$2 key=$3
	(
		umask 077
		cat >"$out" <<-EOF
			apiVersion: v1
			kind: Config
			clusters: [{name: local, cluster: {server: "$(env_get KUBE_APISERVER_URL)", certificate-authority: "$CLUSTER_DIR/pki/ca.crt"}}]
			users: [{name: u, user: {client-certificate: "$cert", client-key: "$key"}}]
			contexts: [{name: c, context: {cluster: local, user: u}}]
			current-context: c
		EOF
	)
}

write_configs() {
	local pki=$NODE_DIR/pki
	mkdir -p "$pki" "$NODE_DIR/containerd" "$NODE_DIR/cni/net.d" "$NODE_DIR/cni/ipam" "$NODE_DIR/kubelet" \
		"$NODE_DIR/pod-logs"
	(
		umask 077
		new_cert "$CLUSTER_DIR/pki" "$pki/kubelet-client" "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
		new_cert "$CLUSTER_DIR/pki" "$pki/kubelet-serving" "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
		new_cert "$CLUSTER_DIR/pki" "$pki/kube-proxy" "/CN=system:kube-proxy" clientAuth
		new_cert "$CLUSTER_DIR/pki" "$pki/kube-scheduler" "/CN=system:kube-scheduler" clientAuth
	)
	kubeconfig_for "$NODE_DIR/kubelet.kubeconfig" "$pki/kubelet-client.crt" "$pki/kubelet-client.key"
	kubeconfig_for "$NODE_DIR/kube-proxy.kubeconfig" "$pki/kube-proxy.crt" "$pki/kube-proxy.key"
	kubeconfig_for "$NODE_DIR/kube-scheduler.kubeconfig" "$pki/kube-scheduler.crt" "$pki/kube-scheduler.key"

	cat >"$NODE_DIR/containerd/config.toml" <<-EOF
		version = 2
		root = "$NODE_DIR/containerd/root"
		state = "$NODE_DIR/containerd/state"
		[grpc]
		  address = "$CTR_SOCK"
		[ttrpc]
		  address = "$CTR_SOCK.ttrpc"
		[debug]
		  address = "$NODE_DIR/containerd/debug.sock"
		[plugins."io.containerd.grpc.v1.cri"]
		  sandbox_image = "localhost/pause:local"
		  enable_selinux = false
		  # No CAP_SYS_RESOURCE on this kind of machine: the pause container's negative oom_score_adj would
		  # fail every pod sandbox; this clamps it to containerd's own.
		  restrict_oom_score_adj = true
		  [plugins."io.containerd.grpc.v1.cri".containerd]
		    snapshotter = "overlayfs"
		    default_runtime_name = "runc"
		    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
		      runtime_type = "io.containerd.runc.v2"
		      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
		        SystemdCgroup = false
		        BinaryName = "$(command -v runc)"
		  [plugins."io.containerd.grpc.v1.cri".cni]
		    bin_dir = "/usr/lib/cni"
		    conf_dir = "$NODE_DIR/cni/net.d"
	EOF
	cat >"$NODE_DIR/cni/net.d/10-nac.conflist" <<-EOF
		{
		  "cniVersion": "1.0.0",
		  "name": "nacpods",
		  "plugins": [
		    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
		     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
		              "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$NODE_DIR/cni/ipam"}},
		    {"type": "portmap", "capabilities": {"portMappings": true}}
		  ]
		}
	EOF
	cat >"$NODE_DIR/kubelet.yaml" <<-EOF
		apiVersion: kubelet.config.k8s.io/v1beta1
		kind: KubeletConfiguration
		failCgroupV1: false
		cgroupDriver: cgroupfs
		containerRuntimeEndpoint: unix://$CTR_SOCK
		address: $NODE_IP
		port: 10250
		readOnlyPort: 0
		healthzBindAddress: 127.0.0.1
		podLogsDir: $NODE_DIR/pod-logs
		tlsCertFile: $pki/kubelet-serving.crt
		tlsPrivateKeyFile: $pki/kubelet-serving.key
		authentication: {anonymous: {enabled: false}, webhook: {enabled: true}, x509: {clientCAFile: $CLUSTER_DIR/pki/ca.crt}}
		authorization: {mode: Webhook}
		clusterDomain: cluster.local
		resolvConf: /etc/resolv.conf
		registerNode: true
		rotateCertificates: false
		serializeImagePulls: false
		# The machines this runs on share their disk with builds, whose peaks are not the pods' doing: evict only
		# when the disk is all but full, and never collect images (the local ones cannot be pulled again).
		evictionHard: {memory.available: 100Mi, nodefs.available: 100Mi, imagefs.available: 100Mi, nodefs.inodesFree: 1%}
		imageGCHighThresholdPercent: 100
		imageGCLowThresholdPercent: 99
		shutdownGracePeriod: 0s
	EOF
	cat >"$NODE_DIR/kube-proxy.yaml" <<-EOF
		apiVersion: kubeproxy.config.k8s.io/v1alpha1
		kind: KubeProxyConfiguration
		clientConnection: {kubeconfig: $NODE_DIR/kube-proxy.kubeconfig}
		mode: iptables
		hostnameOverride: $NODE_NAME
		clusterCIDR: $POD_CIDR
		bindAddress: 127.0.0.1
		healthzBindAddress: 127.0.0.1:10256
		metricsBindAddress: 127.0.0.1:10249
		iptables: {localhostNodePorts: false}
		# Leave the machine's conntrack sysctls alone.
		conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
	EOF
}

# start NAME PIDKEY LOG ARGS...: a node process in its own session, recorded in the env file.
start_proc() {
	local name=$1 key=$2 logf=$3 pid
	shift 3
	pid=$(env_get "$key")
	if pid_is "$name" "$pid"; then return 0; fi
	setsid "$@" </dev/null >"$logf" 2>&1 &
	pid=$!
	env_set "$key=$pid"
	sleep 0.5
	kill -0 "$pid" 2>/dev/null || {
		tail -n 30 "$logf" >&2
		die "$name exited at start (log: $logf)"
	}
}

import_images() {
	local f
	for f in "$@"; do
		[[ -f $f ]] || die "no image archive $f"
		ctr images import "$f" >/dev/null || die "ctr images import $f failed"
	done
}

# The node's disk: its images, volumes of up to 1 GiB (tests/e2e_node.rs), their snapshots and their copies in
# the bucket take about 4 GiB at the node suite's peak (measured by df every 10 s during `make test`). Short of
# that, the kubelet evicts pods and the S3 server refuses writes, and tests time out for reasons that do not name
# the disk: said here instead.
check_disk() {
	local need=${NODE_MIN_FREE_GIB:-5} free
	free=$(($(df -Pk "$CLUSTER_DIR" | awk 'NR == 2 {print $4}') / 1048576))
	((free >= need)) || die "the node needs about $need GiB free on the file system of $CLUSTER_DIR (its images, volumes, snapshots and the bucket's copies); $free GiB are free (NODE_MIN_FREE_GIB sets the need)"
}

start_node() {
	need_root
	[[ -f $ENV_FILE ]] || die "no running cluster in $CLUSTER_DIR"
	check_disk
	ensure_packages
	network_up
	local b missing=()
	for b in kubelet kube-proxy kube-scheduler; do
		[[ -x $BIN_DIR/$b ]] || missing+=("$b")
	done
	((${#missing[@]} == 0)) || "$NAC_ROOT/hack/go-tools.sh" "${missing[@]}"
	write_configs
	env_set NODE=1 "NODE_IP=$NODE_IP" "NODE_NAME=$NODE_NAME" "NODE_DIR=$NODE_DIR" "CONTAINERD_SOCK=$CTR_SOCK"

	start_proc containerd CONTAINERD_PID "$NODE_DIR/containerd.log" containerd --config "$NODE_DIR/containerd/config.toml"
	local i
	for ((i = 0; i < 100; i++)); do
		ctr version >/dev/null 2>&1 && break
		sleep 0.1
	done
	ctr version >/dev/null 2>&1 || die "containerd does not answer on $CTR_SOCK"
	[[ -f $NAC_ROOT/bin/images/velero-plugin-for-aws.tar && -f $NAC_ROOT/bin/images/velero.tar ]] || "$NAC_ROOT/hack/images.sh" node
	import_images "$NAC_ROOT"/bin/images/{pause,toolbox,velero,velero-plugin-for-aws}.tar

	start_proc kube-scheduler SCHEDULER_PID "$NODE_DIR/kube-scheduler.log" "$BIN_DIR/kube-scheduler" \
		--kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" --authentication-kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" \
		--authorization-kubeconfig="$NODE_DIR/kube-scheduler.kubeconfig" --leader-elect=false \
		--bind-address=127.0.0.1 --secure-port=0 --v=1
	start_proc kubelet KUBELET_PID "$NODE_DIR/kubelet.log" "$BIN_DIR/kubelet" --config="$NODE_DIR/kubelet.yaml" \
		--kubeconfig="$NODE_DIR/kubelet.kubeconfig" --root-dir="$NODE_DIR/kubelet" --hostname-override="$NODE_NAME" \
		--node-ip="$NODE_IP" --v=1
	start_proc kube-proxy KUBE_PROXY_PID "$NODE_DIR/kube-proxy.log" "$BIN_DIR/kube-proxy" \
		--config="$NODE_DIR/kube-proxy.yaml" --v=1

	local deadline=$((SECONDS + NODE_READY_TIMEOUT))
	while ((SECONDS < deadline)); do
		if [[ $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; then
			log "node $NODE_NAME Ready ($NODE_IP; containerd $(ctr version 2>/dev/null | sed -n 's/^ *Version: *//p' | tail -n 1))"
			"$NAC_ROOT/hack/node-csi.sh"
			return 0
		fi
		sleep 1
	done
	tail -n 30 "$NODE_DIR/kubelet.log" >&2
	die "node $NODE_NAME not Ready within ${NODE_READY_TIMEOUT}s (log: $NODE_DIR/kubelet.log)"
}

# stop_node: pods first (the kubelet unmounts their volumes, removes their network namespaces and cgroups),
# then the processes, then what they leave on the machine. Also after a failed or partial start.
stop_node() {
	local pid
	if [[ -f $ENV_FILE ]] && pid_is kubelet "$(env_get KUBELET_PID)" && apiserver_ready; then
		# Namespaces' pods go with their namespaces; what is left (DaemonSets, static objects) is deleted here.
		kubectl delete daemonsets,deployments,statefulsets,replicasets,jobs --all -A --wait=false >/dev/null 2>&1 || true
		kubectl delete pods --all -A --grace-period=5 --wait=false >/dev/null 2>&1 || true
		local deadline=$((SECONDS + 60))
		while ((SECONDS < deadline)); do
			[[ -z $(kubectl get pods -A -o name 2>/dev/null) ]] && [[ -z $(ctr tasks ls -q 2>/dev/null) ]] && break
			sleep 1
		done
		[[ -z $(kubectl get pods -A -o name 2>/dev/null) ]] || log "pods still there after 60s; stopping the node anyway"
	fi
	# The CSI driver after the pods (the kubelet unmounts their volumes through it), before the kubelet.
	if [[ -f $ENV_FILE ]]; then "$NAC_ROOT/hack/node-csi.sh" --stop || log "the CSI processes did not all stop"; fi
	for name in kube-proxy:KUBE_PROXY_PID kubelet:KUBELET_PID kube-scheduler:SCHEDULER_PID; do
		pid=''
		[[ -f $ENV_FILE ]] && pid=$(env_get "${name#*:}")
		for p in $pid $(pids_of_cluster "${name%%:*}"); do stop_pid "${name%%:*}" "$p" 20 || true; done
	done
	# Containers the kubelet did not get to: kill their tasks before containerd goes.
	if [[ -S $CTR_SOCK ]]; then
		for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks kill -s KILL "$t" >/dev/null 2>&1 || true; done
		sleep 1
		for t in $(ctr tasks ls -q 2>/dev/null); do ctr tasks delete -f "$t" >/dev/null 2>&1 || true; done
	fi
	pid=''
	[[ -f $ENV_FILE ]] && pid=$(env_get CONTAINERD_PID)
	for p in $pid $(pids_of_cluster containerd); do stop_pid containerd "$p" 20 || true; done
	# Shims outlive containerd; they name the node's state dir.
	for p in $(pgrep -f "containerd-shim.*$NODE_DIR" 2>/dev/null || true) $(pgrep -f "containerd-shim-runc-v2 -namespace k8s.io" 2>/dev/null || true); do
		kill -KILL "$p" 2>/dev/null || true
	done
	restore_machine
	[[ -f $ENV_FILE ]] && env_set NODE=0 CONTAINERD_PID= KUBELET_PID= KUBE_PROXY_PID= SCHEDULER_PID=
	log "node stopped; machine state restored"
}

restore_machine() {
	local t m
	# kube-proxy's and the kubelet's chains, the bridge plugin's CNI-* chains (the machine had none of its own
	# in these tables before: only chains with these prefixes are removed).
	if [[ -x $BIN_DIR/kube-proxy ]]; then "$BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true; fi
	for ipt in iptables ip6tables; do
		command -v "$ipt" >/dev/null || continue
		for t in nat filter mangle; do
			for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}'); do
				"$ipt" -t "$t" -S 2>/dev/null | awk -v c="$chain" '$1 == "-A" && $0 ~ ("-j " c "( |$)") {sub("^-A", "-D"); print}' |
					while read -r rule; do eval "$ipt -t $t $rule" 2>/dev/null || true; done
			done
			for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}'); do
				"$ipt" -t "$t" -F "$chain" 2>/dev/null || true
			done
			for chain in $("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}'); do
				"$ipt" -t "$t" -X "$chain" 2>/dev/null || true
			done
		done
	done
	# Mounts under the node's directories (the kubelet's rshared self-bind, volumes of pods that did not stop).
	for m in $(awk -v d="$NODE_DIR" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	for m in $(awk 'index($2, "/run/containerd") == 1 || index($2, "/var/run/netns") == 1 || index($2, "/run/netns") == 1 {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	for ns in /var/run/netns/cni-*; do [[ -e $ns ]] && ip netns delete "${ns##*/}" 2>/dev/null; done
	ip link del cni0 2>/dev/null || true
	for v in $(ip -o link show type veth 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^veth' || true); do
		ip link del "$v" 2>/dev/null || true
	done
	if [[ -f $SYSCTL_SAVE ]]; then
		while IFS='=' read -r k v; do [[ -n $k ]] && sysctl -qw "$k=$v" 2>/dev/null || true; done <"$SYSCTL_SAVE"
		rm -f "$SYSCTL_SAVE"
	fi
	# Pod cgroups in every hierarchy, deepest first.
	for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods /sys/fs/cgroup/*/k8s.io; do
		[[ -d $d ]] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	done
	# Only what this node's containerd and kubelet put there (another containerd on the machine keeps its own).
	rm -rf /var/lib/kubelet /var/lib/cni /run/containerd/s /run/containerd/fifo /run/containerd/runc/k8s.io \
		/run/containerd/io.containerd.runtime.v2.task/k8s.io
	rmdir /run/containerd/runc /run/containerd/io.containerd.runtime.v2.task /run/containerd 2>/dev/null || true
	rmdir /var/run/netns 2>/dev/null || true
	rm -rf "$NODE_DIR/containerd/root" "$NODE_DIR/containerd/state" "$NODE_DIR/kubelet" "$NODE_DIR/cni/ipam" "$NODE_DIR/csi"
	if [[ -f $NODE_OWNER && $(cat "$NODE_OWNER") == "$CLUSTER_DIR" ]]; then rm -f "$NODE_OWNER"; fi
}

case ${1:-} in
--network) network_up ;;
--stop) stop_node ;;
--import)
	shift
	import_images "$@"
	;;
'') start_node ;;
*) die "usage: $0 [--network | --stop | --import FILE...]" ;;
esac
