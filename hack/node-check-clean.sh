#!/usr/bin/env bash
# Checks that no trace of a local node is left on the machine (after `make cluster-down` of a NODE=1
# environment): no node process (its CSI driver and sidecars included) or container shim, no mount of the kubelet
# or containerd, no kube-proxy, kubelet or CNI iptables chain, no bridge cni0 or pod network namespace, no pod
# cgroup, none of the kubelet's and containerd's host paths, and the sysctls the node changes back at their values
# before it started.
#
# usage: hack/node-check-clean.sh --snapshot FILE   record the sysctls now (before the node starts)
#        hack/node-check-clean.sh [FILE]            check; exit 1 naming every leftover
set -euo pipefail
SYSCTLS=(net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops)

if [[ ${1:-} == --snapshot ]]; then
	for k in "${SYSCTLS[@]}"; do echo "$k=$(sysctl -n "$k")"; done >"$2"
	exit 0
fi

left=()
for name in containerd kubelet kube-proxy kube-scheduler csi-hostpath csi-provisioner csi-snapshotter snapshot-controller; do
	# The kernel keeps 15 characters of a process's name.
	pgrep -x "${name:0:15}" >/dev/null && left+=("process $name ($(pgrep -x "${name:0:15}" | tr '\n' ' '))")
done
pgrep -f '^[^ ]*containerd-shim' >/dev/null && left+=("containerd shims ($(pgrep -f '^[^ ]*containerd-shim' | tr '\n' ' '))")
while read -r _ mnt _; do
	case $mnt in */kubelet* | /run/containerd* | /var/run/netns* | /run/netns* | */containerd/*) left+=("mount $mnt") ;; esac
done </proc/mounts
for ipt in iptables ip6tables; do
	command -v "$ipt" >/dev/null || continue
	for t in nat filter mangle; do
		chains=$("$ipt" -t "$t" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE-|CNI-)/ {print $2}' | tr '\n' ' ')
		[[ -z $chains ]] || left+=("$ipt -t $t chains: $chains")
	done
done
ip link show cni0 >/dev/null 2>&1 && left+=("bridge cni0")
compgen -G '/var/run/netns/cni-*' >/dev/null && left+=("pod network namespaces in /var/run/netns")
for d in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do [[ -d $d ]] && left+=("cgroup $d"); done
for p in /var/lib/kubelet /run/containerd /var/lib/cni /run/nac-node.owner; do [[ -e $p ]] && left+=("path $p"); done
if [[ -n ${1:-} && -f $1 ]]; then
	while IFS='=' read -r k v; do
		now=$(sysctl -n "$k")
		[[ $now == "$v" ]] || left+=("sysctl $k=$now (was $v)")
	done <"$1"
fi
if ((${#left[@]})); then
	printf 'node-check-clean: left on the machine: %s\n' "${left[@]}" >&2
	exit 1
fi
echo "node-check-clean: no trace of the node left"
