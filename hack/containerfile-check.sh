#!/usr/bin/env bash
# Builds the Containerfile with buildah (Debian's package) from the root filesystem `make image` prepared, and
# checks that it gives the same image as `make image`'s OCI archive: the same files with the same content and
# modes, the same user, entrypoint and command. So the Containerfile that admins build with their own tooling
# cannot drift from the image the project tests. Its own storage, removed afterwards.
#
# usage: hack/containerfile-check.sh   (after `make image`)
set -euo pipefail
cd "$(dirname "$0")/.."
rootfs=target/image/rootfs
[[ -d $rootfs ]] || { echo "containerfile-check: no $rootfs (make image)" >&2; exit 1; }
if ! command -v buildah >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah >/dev/null
fi
work=$(mktemp -d)
b() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }
cleanup() {
	b rm --all >/dev/null 2>&1 || true
	b rmi --all --force >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

b build --quiet --isolation chroot -f Containerfile -t localhost/nac-containerfile:check "$rootfs" >/dev/null
ctr=$(b from localhost/nac-containerfile:check)
mnt=$(b mount "$ctr")
# Files, types, modes and content of both trees.
listing() { (cd "$1" && find . -mindepth 1 -printf '%y %m %p %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
if ! diff <(listing "$rootfs") <(listing "$mnt") >"$work/diff"; then
	echo "containerfile-check: the Containerfile's image differs from make image's root filesystem:" >&2
	head -n 40 "$work/diff" >&2
	exit 1
fi
config=$(b inspect localhost/nac-containerfile:check | python3 -c 'import json, sys; c = json.load(sys.stdin)["OCIv1"]["config"]; print(c.get("User", ""), json.dumps(c.get("Entrypoint"), separators=(",", ":")), json.dumps(c.get("Cmd"), separators=(",", ":")))')
archive=$(ls -t target/image/nac-*.tar | head -n 1)
expected=$(python3 - "$archive" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
index = json.load(t.extractfile("index.json"))
manifest = json.load(t.extractfile("blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]))
config = json.load(t.extractfile("blobs/sha256/" + manifest["config"]["digest"].split(":")[1]))["config"]
print(config["User"], json.dumps(config["Entrypoint"], separators=(",", ":")), json.dumps(config["Cmd"], separators=(",", ":")))
PY
)
if [[ ${config// /} != "${expected// /}" ]]; then
	echo "containerfile-check: config differs: Containerfile '$config', make image '$expected'" >&2
	exit 1
fi
echo "containerfile-check: the Containerfile builds the same image as make image ($(find "$rootfs" -type f | wc -l) files; user, entrypoint and command: $config)"
