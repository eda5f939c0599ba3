#!/usr/bin/env bash
# Builds the local environment's Go binaries into bin/ from the pinned modules under tools/: one `go build` per
# module for all the binaries asked of it, so the packages they share are compiled once and links run beside
# compiles on both cores. Only binaries missing, or older than their module (go.mod, go.sum, its Go files), are
# built.
#
# usage: hack/go-tools.sh NAME...     NAME: a binary below, or a set:
#          control-plane  kube-apiserver kube-controller-manager kubectl etcd   (every environment)
#          node           kubelet kube-proxy kube-scheduler                    (NODE=1, root)
#          velero         velero velero-plugin-for-aws versitygw               (VELERO_MODE=real)
#          images         velero-restore-helper                                (the node's Velero image)
#          helm           helm                                                 (the chart tests, the node)
#          csi            snapshot-controller csi-snapshotter csi-provisioner  (the node's CSI snapshots)
#                         csi-hostpath (the node's own CSI driver, tools/csi-hostpath)
#          all            every one of them
# env:   GO (default go), BIN_DIR (default bin/)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GO=${GO:-go}
BIN_DIR=${BIN_DIR:-$ROOT/bin}

# name → module directory and main package.
declare -A MODULE=(
	[kube-apiserver]=tools [kube-controller-manager]=tools [kubectl]=tools [kubelet]=tools [kube-proxy]=tools
	[kube-scheduler]=tools [etcd]=tools
	[velero]=tools/velero [velero-restore-helper]=tools/velero [velero-plugin-for-aws]=tools/velero
	[versitygw]=tools/s3 [helm]=tools/helm
	[snapshot-controller]=tools/csi-snapshotter [csi-snapshotter]=tools/csi-snapshotter
	[csi-provisioner]=tools/csi-provisioner [csi-hostpath]=tools/csi-hostpath
)
declare -A PACKAGE=(
	[kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
	[kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
	[kubectl]=k8s.io/kubernetes/cmd/kubectl
	[kubelet]=k8s.io/kubernetes/cmd/kubelet
	[kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
	[kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
	[etcd]=go.etcd.io/etcd/server/v3
	[velero]=github.com/vmware-tanzu/velero/cmd/velero
	[velero-restore-helper]=github.com/vmware-tanzu/velero/cmd/velero-restore-helper
	[velero-plugin-for-aws]=github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws
	[versitygw]=github.com/versity/versitygw/cmd/versitygw
	[helm]=helm.sh/helm/v3/cmd/helm
	[snapshot-controller]=github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller
	[csi-snapshotter]=github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter
	[csi-provisioner]=github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner
	[csi-hostpath]=nac.local/tools/csi-hostpath
)
declare -A SETS=(
	[control-plane]="kube-apiserver kube-controller-manager kubectl etcd"
	[node]="kubelet kube-proxy kube-scheduler"
	[velero]="velero velero-plugin-for-aws versitygw"
	[images]="velero-restore-helper"
	[helm]="helm"
	[csi]="snapshot-controller csi-snapshotter csi-provisioner csi-hostpath"
)
SETS[all]="${SETS[control-plane]} ${SETS[node]} ${SETS[velero]} ${SETS[images]} ${SETS[helm]} ${SETS[csi]}"

log() { printf 'go-tools: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

(($#)) || die "usage: $0 NAME... (binaries, or control-plane, node, velero, images, helm, csi, all)"
wanted=()
for arg in "$@"; do
	if [[ -n ${SETS[$arg]:-} ]]; then
		read -ra names <<<"${SETS[$arg]}"
		wanted+=("${names[@]}")
	elif [[ -n ${MODULE[$arg]:-} ]]; then
		wanted+=("$arg")
	else
		die "unknown tool '$arg'"
	fi
done

# modver DIR MODULE: the pinned version of MODULE in the module at DIR.
modver() { (cd "$1" && "$GO" list -m -f '{{.Version}}' "$2"); }

# ldflags DIR: the link flags of the module at DIR: stripped, and the version each binary reports stamped in.
ldflags() {
	case $1 in
	tools)
		# /version of kube-apiserver and kubectl report the pinned release (etcd reports its own).
		local v date kv flags='-s -w' major minor
		v=$(modver tools k8s.io/kubernetes)
		date=$(cd tools && "$GO" list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)
		IFS=. read -r major minor _ <<<"${v#v}"
		for kv in "gitVersion=$v" "gitMajor=$major" "gitMinor=$minor" \
			gitCommit=0000000000000000000000000000000000000000 gitTreeState=clean "buildDate=$date"; do
			flags+=" -X k8s.io/component-base/version.$kv -X k8s.io/client-go/pkg/version.$kv"
		done
		echo "$flags"
		;;
	tools/velero)
		# controller-runtime's own metrics listener binds *:8080 unconditionally (not Velero's --metrics-address):
		# "0" turns it off, so several Velero servers, and nac's metrics, can share the machine.
		echo "-s -w -X github.com/vmware-tanzu/velero/pkg/buildinfo.Version=$(modver tools/velero github.com/vmware-tanzu/velero)" \
			"-X github.com/vmware-tanzu/velero/pkg/buildinfo.GitTreeState=clean" \
			"-X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=0"
		;;
	tools/helm)
		local v k8s_minor p flags
		v=$(modver tools/helm helm.sh/helm/v3)
		k8s_minor=$(modver tools/helm k8s.io/client-go | cut -d. -f2)
		flags="-s -w -X helm.sh/helm/v3/internal/version.version=$v -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
		for p in pkg/lint/rules pkg/chartutil; do
			flags+=" -X helm.sh/helm/v3/$p.k8sVersionMajor=1 -X helm.sh/helm/v3/$p.k8sVersionMinor=$k8s_minor"
		done
		echo "$flags"
		;;
	tools/csi-snapshotter)
		echo "-s -w -X main.version=$(modver tools/csi-snapshotter github.com/kubernetes-csi/external-snapshotter/v8)"
		;;
	tools/csi-provisioner)
		echo "-s -w -X main.version=$(modver tools/csi-provisioner github.com/kubernetes-csi/external-provisioner/v6)"
		;;
	*) echo "-s -w" ;;
	esac
}

# The name `go build -o DIR/` gives a main package's binary: its last path element, or the one before a
# major-version suffix (go.etcd.io/etcd/server/v3 → server).
exec_name() {
	local p=$1 last=${1##*/}
	if [[ $last =~ ^v[0-9]+$ ]]; then p=${p%/*}; fi
	echo "${p##*/}"
}

# Group what is out of date by module, in a fixed order.
declare -A todo=()
for name in "${wanted[@]}"; do
	dir=${MODULE[$name]}
	out=$BIN_DIR/$name
	# Up to date: nothing of its module is newer (go.mod, go.sum, and the sources of the project's own tools;
	# depth 1: tools/ holds other modules below it).
	if [[ -x $out && -z $(find "$dir" -maxdepth 1 -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) \
		-newer "$out" -print -quit) ]]; then continue; fi
	[[ " ${todo[$dir]:-} " == *" $name "* ]] || todo[$dir]+=" $name"
done
mkdir -p "$BIN_DIR"
for dir in tools tools/velero tools/s3 tools/helm tools/csi-snapshotter tools/csi-provisioner tools/csi-hostpath; do
	[[ -n ${todo[$dir]:-} ]] || continue
	read -ra names <<<"${todo[$dir]}"
	pkgs=()
	for name in "${names[@]}"; do pkgs+=("${PACKAGE[$name]}"); done
	log "building ${names[*]} (module $dir)"
	tmp=$(mktemp -d "$BIN_DIR/.go-tools.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	flags=$(ldflags "$dir")
	(cd "$dir" && CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=false -ldflags "$flags" -o "$tmp/" "${pkgs[@]}")
	for name in "${names[@]}"; do
		mv -f "$tmp/$(exec_name "${PACKAGE[$name]}")" "$BIN_DIR/$name"
	done
	rm -rf "$tmp"
	trap - EXIT
done
