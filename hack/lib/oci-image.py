#!/usr/bin/env python3
"""Writes a one-layer OCI image archive from a directory, offline and reproducibly.

The same directory, arguments and SOURCE_DATE_EPOCH give the same bytes, so the same digest: entries are
sorted, owned by root, dated SOURCE_DATE_EPOCH, and gzip carries no name or time. The archive is an OCI image
layout (oci-layout, index.json, blobs/sha256/...) that `ctr images import` and `skopeo copy oci-archive:FILE`
read; index.json names the image with both the containerd and the OCI annotation.

usage: oci-image.py --rootfs DIR --name REF --out FILE [--user UID:GID] [--entrypoint JSON] [--cmd JSON]
                    [--env K=V ...] [--workdir DIR] [--annotation K=V ...]
Prints the manifest digest and the compressed size of the layer.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile


def layer_tar(rootfs: str, mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                paths.append(os.path.join(dirpath, name))
        for path in sorted(paths, key=lambda p: os.path.relpath(p, rootfs)):
            rel = os.path.relpath(path, rootfs)
            info = tar.gettarinfo(path, arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            info.pax_headers = {}
            # Keep the permission bits (and sticky /tmp), drop whatever the builder's umask added to ownership.
            info.mode = stat.S_IMODE(os.lstat(path).st_mode)
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def blob(out: dict, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    out[digest] = data
    return digest


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--name", required=True, help="image reference, e.g. localhost/nac:0.1.0")
    ap.add_argument("--out", required=True)
    ap.add_argument("--user", default="")
    ap.add_argument("--entrypoint", default="null")
    ap.add_argument("--cmd", default="null")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--workdir", default="/")
    ap.add_argument("--annotation", action="append", default=[])
    args = ap.parse_args()

    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    raw = layer_tar(args.rootfs, mtime)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, compresslevel=9, filename="") as f:
        f.write(raw)
    layer = gz.getvalue()

    blobs: dict = {}
    layer_digest = blob(blobs, layer)
    annotations = dict(kv.split("=", 1) for kv in args.annotation)
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": args.user,
            "Env": args.env or ["PATH=/"],
            "Entrypoint": json.loads(args.entrypoint),
            "Cmd": json.loads(args.cmd),
            "WorkingDir": args.workdir,
            "Labels": annotations,
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        "history": [{"created": created, "created_by": "hack/lib/oci-image.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = blob(blobs, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
        "annotations": annotations,
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = blob(blobs, manifest_bytes)
    tag = args.name.rsplit(":", 1)[1] if ":" in args.name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": args.name,
                    "org.opencontainers.image.ref.name": tag,
                },
            }
        ],
    }

    tmp = args.out + ".tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = mtime
            info.mode = mode
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index, sort_keys=True, separators=(",", ":")).encode())
        for digest in sorted(blobs):
            add("blobs/sha256/" + digest.split(":", 1)[1], blobs[digest])
    os.replace(tmp, args.out)
    print(f"{manifest_digest} {len(layer)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
