#!/usr/bin/env bash
# Copies the CustomResourceDefinitions of a pinned Velero release into a
# directory. The release is fetched as a Go module (github.com/vmware-tanzu/velero)
# through the Go module proxy and verified against the checksum database, so
# nothing but the Go toolchain is needed.
#
# usage: hack/velero-crds.sh [DEST]    (default ${CLUSTER_DIR:-.cluster}/velero-crds)
# env:   VELERO_VERSION (default v1.18.3), GO (default go)
set -euo pipefail

dest=${1:-${CLUSTER_DIR:-.cluster}/velero-crds}
version=${VELERO_VERSION:-v1.18.3}
go=${GO:-go}
module=github.com/vmware-tanzu/velero

if [[ -f "$dest/.version" && "$(cat "$dest/.version")" == "$version" ]] &&
	compgen -G "$dest/velero.io_*.yaml" >/dev/null; then
	exit 0
fi

# Run outside any module so that no go.mod/go.work of the caller interferes.
json=$(cd / && GOWORK=off GOFLAGS=-mod=mod "$go" mod download -json "$module@$version") || {
	echo "velero-crds: go mod download $module@$version failed" >&2
	printf '%s\n' "$json" >&2
	exit 1
}
dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [[ -z "$dir" || ! -d "$dir/config/crd" ]]; then
	echo "velero-crds: no config/crd in the module download of $module@$version" >&2
	printf '%s\n' "$json" >&2
	exit 1
fi

shopt -s nullglob
crds=("$dir"/config/crd/v1/bases/velero.io_*.yaml "$dir"/config/crd/v2alpha1/bases/velero.io_*.yaml)
if ((${#crds[@]} == 0)); then
	echo "velero-crds: no velero.io_*.yaml under $dir/config/crd" >&2
	exit 1
fi

mkdir -p "$dest"
rm -f "$dest"/velero.io_*.yaml "$dest/.version"
# Module cache files are read-only; give the copies normal permissions.
install -m 0644 "${crds[@]}" "$dest/"
printf '%s\n' "$version" >"$dest/.version"
echo "velero-crds: ${#crds[@]} CRDs of Velero $version in $dest"
