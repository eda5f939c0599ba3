#!/usr/bin/env bash
# Builds container images offline, as OCI archives (hack/lib/oci-image.py): no registry, no daemon, no base
# image. Each is one layer assembled from files built here, reproducible (same inputs, same digest).
#
# usage: hack/images.sh nac [BINARY]   nac's image from BINARY (default $CARGO_TARGET_DIR/release/nac):
#                                      target/image/nac-$TAG.tar, named localhost/nac:$TAG
#        hack/images.sh node           the local node's images into $IMAGE_DIR (default bin/images):
#                                      pause (the pod sandbox), toolbox (busybox, for test pods), velero (the
#                                      Velero server, its restore helper and the AWS plugin)
#        hack/images.sh rootfs [BINARY] only nac's root filesystem, into target/image/rootfs (the build context
#                                      of the Containerfile)
#
# env: TAG (default: the crate's version), IMAGE_DIR, NAC_IMAGE_REPO (default localhost/nac)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

log() { printf 'images: %s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

py=$ROOT/hack/lib/oci-image.py
IMAGE_DIR=${IMAGE_DIR:-$ROOT/bin/images}
# Dates in images are the commit's, so that a rebuild of the same commit gives the same digest.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH
crate_version() { sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n 1; }

# add_libs ROOTFS BINARY: the shared libraries BINARY loads (from ldd), at their paths, into ROOTFS.
add_libs() {
	local rootfs=$1 bin=$2 lib
	for lib in $(ldd "$bin" | grep -oE '/[^ ]+\.so[^ ]*'); do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done
}

# nonroot_etc ROOTFS UID: /etc/passwd and /etc/group with root and the user UID (named nonroot), the CA bundle.
nonroot_etc() {
	local rootfs=$1 uid=$2
	mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp"
	chmod 1777 "$rootfs/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\n' "$uid" "$uid" \
		>"$rootfs/etc/passwd"
	printf 'root:x:0:\nnonroot:x:%s:\n' "$uid" >"$rootfs/etc/group"
	cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
	chmod 0644 "$rootfs"/etc/passwd "$rootfs"/etc/group "$rootfs"/etc/ssl/certs/ca-certificates.crt
}

# nac_rootfs DIR BINARY: nac's root filesystem: the stripped binary, the C libraries it loads, passwd/group
# with the non-root user 65532, the CA bundle, an empty /tmp. No shell, no package manager.
nac_rootfs() {
	local rootfs=$1 bin=$2
	[[ -x $bin ]] || die "no nac binary at $bin (make release)"
	rm -rf "$rootfs"
	mkdir -p "$rootfs"
	strip -o "$rootfs/nac" "$bin"
	chmod 0755 "$rootfs/nac"
	add_libs "$rootfs" "$bin"
	nonroot_etc "$rootfs" 65532
}

build_nac() {
	local bin=${1:-${CARGO_TARGET_DIR:-$ROOT/target}/release/nac} tag=${TAG:-$(crate_version)} repo=${NAC_IMAGE_REPO:-localhost/nac}
	local out_dir=$ROOT/target/image rootfs revision
	rootfs=$out_dir/rootfs
	mkdir -p "$out_dir"
	nac_rootfs "$rootfs" "$bin"
	revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
	git diff --quiet HEAD 2>/dev/null || revision="$revision-dirty"
	local out=$out_dir/nac-$tag.tar result
	result=$(python3 "$py" --rootfs "$rootfs" --name "$repo:$tag" --out "$out" \
		--user 65532:65532 --entrypoint '["/nac"]' --cmd '["serve"]' \
		--env PATH=/ --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
		--annotation "org.opencontainers.image.title=nac" \
		--annotation "org.opencontainers.image.description=Non-admin backup and restore for Velero" \
		--annotation "org.opencontainers.image.version=$(crate_version)" \
		--annotation "org.opencontainers.image.revision=$revision" \
		--annotation "org.opencontainers.image.licenses=Apache-2.0" \
		--annotation "org.opencontainers.image.created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)")
	local digest=${result% *} size=${result#* }
	printf '%s\n' "$repo:$tag" >"$out.name"
	printf '%s\n' "$digest" >"$out.digest"
	log "$repo:$tag  $out  digest $digest  layer $((size / 1024)) KiB compressed"
	echo "$out"
}

# pause: the pod sandbox, from the pinned Kubernetes module's own source, static with musl.
build_pause() {
	local src rootfs=$IMAGE_DIR/rootfs-pause
	src=$(cd "$ROOT/tools" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
	[[ -f $src ]] || die "no pause.c in the k8s.io/kubernetes module ($src)"
	command -v musl-gcc >/dev/null || die "musl-gcc is needed (Debian: musl-tools)"
	rm -rf "$rootfs" && mkdir -p "$rootfs"
	musl-gcc -static -Os -DVERSION=local -o "$rootfs/pause" "$src"
	strip "$rootfs/pause"
	python3 "$py" --rootfs "$rootfs" --name localhost/pause:local --out "$IMAGE_DIR/pause.tar" \
		--user 65535:65535 --entrypoint '["/pause"]' >/dev/null
}

# toolbox: busybox (static, from Debian) with its applets, for the test and walkthrough pods.
build_toolbox() {
	local rootfs=$IMAGE_DIR/rootfs-toolbox applet
	command -v busybox >/dev/null || die "busybox is needed (Debian: busybox-static)"
	rm -rf "$rootfs" && mkdir -p "$rootfs/bin" "$rootfs/tmp"
	chmod 1777 "$rootfs/tmp"
	cp "$(command -v busybox)" "$rootfs/bin/busybox"
	for applet in $("$rootfs/bin/busybox" --list); do
		[[ $applet == busybox ]] || ln -s busybox "$rootfs/bin/$applet"
	done
	nonroot_etc "$rootfs" 65532
	python3 "$py" --rootfs "$rootfs" --name localhost/toolbox:1 --out "$IMAGE_DIR/toolbox.tar" \
		--env PATH=/bin --cmd '["/bin/sh"]' >/dev/null
}

# velero: the server (also the node agent) and the restore helper its restore-wait init container runs, tagged
# with the pinned Velero version. velero-plugin-for-aws: the plugin, copied into the server's /plugins by an init
# container as upstream's plugin image does (busybox cp stands in for upstream's cp-plugin).
build_velero() {
	local rootfs=$IMAGE_DIR/rootfs-velero version
	"$ROOT/hack/go-tools.sh" velero velero-restore-helper velero-plugin-for-aws
	version=$(cd "$ROOT/tools/velero" && go list -m -f '{{.Version}}' github.com/vmware-tanzu/velero)
	rm -rf "$rootfs" && mkdir -p "$rootfs/plugins" "$rootfs/scratch" "$rootfs/tmp"
	chmod 1777 "$rootfs/tmp" "$rootfs/scratch"
	cp "$ROOT/bin/velero" "$ROOT/bin/velero-restore-helper" "$rootfs/"
	nonroot_etc "$rootfs" 65532
	python3 "$py" --rootfs "$rootfs" --name "localhost/velero:$version" --out "$IMAGE_DIR/velero.tar" \
		--user 65532:65532 --env PATH=/ --env HOME=/scratch --entrypoint '["/velero"]' >/dev/null
	printf '%s\n' "localhost/velero:$version" >"$IMAGE_DIR/velero.name"

	local prootfs=$IMAGE_DIR/rootfs-velero-plugin-for-aws pversion
	pversion=$(cd "$ROOT/tools/velero" && go list -m -f '{{.Version}}' github.com/vmware-tanzu/velero-plugin-for-aws)
	rm -rf "$prootfs" && mkdir -p "$prootfs/bin" "$prootfs/plugins"
	cp "$(command -v busybox)" "$prootfs/bin/busybox"
	cp "$ROOT/bin/velero-plugin-for-aws" "$prootfs/plugins/"
	python3 "$py" --rootfs "$prootfs" --name "localhost/velero-plugin-for-aws:$pversion" \
		--out "$IMAGE_DIR/velero-plugin-for-aws.tar" --user 65532:65532 \
		--entrypoint '["/bin/busybox", "cp", "/plugins/velero-plugin-for-aws", "/target/velero-plugin-for-aws"]' >/dev/null
	printf '%s\n' "localhost/velero-plugin-for-aws:$pversion" >"$IMAGE_DIR/velero-plugin-for-aws.name"
}

case ${1:-} in
nac) build_nac "${2:-}" ;;
rootfs) nac_rootfs "$ROOT/target/image/rootfs" "${2:-${CARGO_TARGET_DIR:-$ROOT/target}/release/nac}" ;;
node)
	mkdir -p "$IMAGE_DIR"
	build_pause
	build_toolbox
	build_velero
	log "node images in $IMAGE_DIR: pause toolbox velero ($(cat "$IMAGE_DIR/velero.name"))"
	;;
pause | toolbox | velero)
	mkdir -p "$IMAGE_DIR"
	"build_$1"
	;;
*) die "usage: $0 nac [BINARY] | node | pause | toolbox | velero | rootfs [BINARY]" ;;
esac
