#!/usr/bin/env python3
"""Where nac's heap is at its peak, by part: sums a dhat profile (`--features heap-profile`, written when
`nac serve` exits) by the part of nac that holds each allocation, the first rule below that any frame of the
allocation's stack matches. Bytes are those live at the heap's peak (dhat's t-gmax).

    hack/heap-profile.py nac-heap.json [--sites N]

--sites N also lists the N largest allocation sites of each of the largest parts (to find what to cut).
"""
import argparse
import json
import re
import sys

# (part, pattern on a frame's function name), most specific first: a store's writer names the kind it keeps.
RULES = [
    ("RBAC rules: RoleBindings by namespace", r"rights::rules::ByNamespaceWriter"),
    ("RBAC rules: Roles, ClusterRoles, ClusterRoleBindings", r"nac::rights::rbac::watch_rules"),
    ("rights answers cache", r"nac::rights::"),
    ("tenant namespaces' labels (tiers)", r"nac::policy::live::namespaces"),
    ("quota usage watch", r"nac::policy::quotas|CountedBackup|nac::policy::usage"),
    ("policy", r"nac::policy::"),
    ("queue index", r"nac::controller::index::queue"),
    ("snapshot index", r"nac::controller::index::snapshots"),
    ("interned strings", r"nac::controller::index::interner"),
    ("watch stores", r"reflector::store::Writer"),
    ("lists held until their end (after_init)", r"nac::controller::index::after_init"),
    ("controllers' queues and schedulers", r"kube_runtime::(controller|scheduler)"),
    ("API client: connection buffers", r"hyper::client|hyper_util::client|hyper::proto::h1::dispatch::Client"),
    ("watch streams in flight (decoding)", r"kube_runtime::watcher|kube_client::client::Client::request_events"),
    ("API client (other)", r"kube_client::"),
    ("webhooks (HTTP, TLS)", r"nac::admission::|nac::runtime::serve|axum::|hyper::server|hyper_util::server"),
    ("metrics", r"prometheus|nac::metrics"),
    ("logging", r"tracing"),
    ("controllers (other)", r"nac::controller::"),
    ("nac (other)", r"nac::"),
    ("async runtime", r"tokio::"),
]

# A store's part is named after the kind it keeps (the first of nac's or Kubernetes' types its stack names).
KIND = re.compile(r"(nac::(?:api|velero)::\w+::\w+|k8s_openapi::[\w:]+::(?:[A-Z]\w+))")


def function_of(frame):
    """`0x1234: name (file:line:col)` -> name."""
    frame = re.sub(r"^0x[0-9a-f]+: ", "", frame)
    return re.sub(r" \([^()]*\)$", "", frame)


def part_of(frames):
    for part, pattern in RULES:
        if any(re.search(pattern, f) for f in frames):
            if part == "watch stores":
                # The kind the store's writer copies: the type named nearest below its frame.
                w = next(i for i, f in enumerate(frames) if re.search(pattern, f))
                kinds = [m.group(1) for f in frames[:w] for m in [KIND.search(f)] if m]
                return f"watch store: {kinds[-1].split('::')[-1] if kinds else '?'}"
            return part
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--sites", type=int, default=0)
    a = ap.parse_args()
    with open(a.profile) as f:
        d = json.load(f)
    if d.get("mode") != "rust-heap":
        sys.exit(f"{a.profile}: not a dhat heap profile (mode {d.get('mode')!r})")
    ftbl = [function_of(f) for f in d["ftbl"]]
    parts, sites = {}, {}
    total_b = total_n = 0
    for pp in d["pps"]:
        b, n = pp.get("gb", 0), pp.get("gbk", 0)
        if not b:
            continue
        frames = [ftbl[i] for i in pp["fs"]]
        part = part_of(frames)
        pb, pn = parts.get(part, (0, 0))
        parts[part] = (pb + b, pn + n)
        total_b += b
        total_n += n
        # The site: the first of nac's frames, else the first frame past the allocator's own.
        own = [f for f in frames if f.startswith("nac::") or "<nac::" in f]
        site = (own or [f for f in frames if not re.match(r"(alloc|core|std|dhat)::", f)] or frames or ["?"])[0]
        sites.setdefault(part, {}).setdefault(site, [0, 0])
        sites[part][site][0] += b
        sites[part][site][1] += n
    print(f"heap at its peak: {total_b / 2**20:.2f} MiB in {total_n:,} blocks ({d.get('cmd', '?')})")
    print("| part | MiB | share | blocks |\n|---|---:|---:|---:|")
    ranked = sorted(parts.items(), key=lambda kv: -kv[1][0])
    for part, (b, n) in ranked:
        print(f"| {part} | {b / 2**20:.2f} | {100 * b / max(total_b, 1):.1f}% | {n:,} |")
    for part, _ in ranked[:5] if a.sites else []:
        print(f"\n{part}:")
        for site, (b, n) in sorted(sites[part].items(), key=lambda kv: -kv[1][0])[: a.sites]:
            print(f"  {b / 2**20:7.2f} MiB {n:8,} blocks  {site[:160]}")


if __name__ == "__main__":
    main()
