#!/usr/bin/env python3
"""The documentation check (`hack/docs-check.sh`, run by `make test`).

links   every relative link between Markdown files of the repository points at a file that exists, and a
        `#fragment` at a heading of that file (GitHub's anchors).
blocks  every `sh` block of README.md, docs/user-guide.md and docs/admin-guide.md carries a marker on the line
        before its fence, and the marked blocks run, in document order, against the environment `make run`
        starts (hack/run.sh in its own CLUSTER_DIR, stopped at the end):
            <!-- check: user -->          run as the namespace user demo-user (`kubectl` gets `--as demo-user`)
            <!-- check: admin -->         run as the cluster admin
            <!-- check: skip: REASON -->  not run (a real registry, a cloud account, a cluster with nodes, ...)
        A block runs with `bash -euo pipefail` from the repository root; `kubectl nac` is the built plugin,
        `nac` the built binary. A failing block stops the check.
claims  statements the documents make about what users see, compared with what they do see in that environment:
        the role `make run` gives demo-user, and the rights warning a first backup prints.

Usage: docs_check.py links | blocks | all
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
RUN_DOCS = ["README.md", "docs/user-guide.md", "docs/admin-guide.md"]
SKIP_DIRS = {"target", "node_modules", ".git", "bin"}
USER, NAMESPACE = "demo-user", "demo"
MARKER = re.compile(r"^<!--\s*check:\s*(user|admin|skip:.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+)(\S*)\s*$")

failures = []


def fail(msg):
    failures.append(msg)
    print(f"docs-check: FAIL {msg}", file=sys.stderr)


# ---------------------------------------------------------------- links


def markdown_files():
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [
            d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".cluster") and not d.startswith(".")
        ]
        if rel.startswith("fuzz/corpus"):
            continue
        for f in filenames:
            if f.endswith(".md"):
                yield os.path.normpath(os.path.join(rel, f))


def strip_code(text):
    """The text without fenced blocks and inline code (links in them are examples, not links)."""
    out, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            out.append("")
            continue
        out.append("" if in_fence else re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def anchors(path):
    """GitHub's heading anchors of a Markdown file."""
    seen, result = {}, set()
    for line in strip_code_keep_headings(path):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = m.group(1).strip().lower()
        slug = re.sub(r"[^\w\- ]", "", slug).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result


def strip_code_keep_headings(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    lines, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            lines.append(line)
    return lines


def check_links():
    count = 0
    for md in sorted(markdown_files()):
        with open(os.path.join(ROOT, md), encoding="utf-8") as f:
            text = strip_code(f.read())
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            count += 1
            path, _, frag = target.partition("#")
            dest = md if not path else os.path.normpath(os.path.join(os.path.dirname(md), path))
            line = text[: m.start()].count("\n") + 1
            if not os.path.exists(os.path.join(ROOT, dest)):
                fail(f"{md}:{line}: link to {target}: no such file {dest}")
                continue
            if frag and dest.endswith(".md") and frag not in anchors(dest):
                fail(f"{md}:{line}: link to {target}: no heading #{frag} in {dest}")
    print(f"docs-check: {count} links between files checked")


# ---------------------------------------------------------------- blocks


def blocks_of(path):
    """(line, mode, text) of each sh block of a document; mode None when unmarked."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m.groups()
        start = i
        i += 1
        body = []
        while i < len(lines) and not re.match(rf"^\s*{ticks}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if lang not in ("sh", "bash", "shell"):
            continue
        marker = MARKER.match(lines[start - 1].strip()) if start > 0 else None
        out.append((start + 1, marker.group(1) if marker else None, "\n".join(body)))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrappers(env, as_user):
    """A directory with `kubectl` (as the user or the admin; `kubectl nac` is the built plugin) and `nac`."""
    d = tempfile.mkdtemp(prefix="docs-check-")
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    plugin = os.path.join(target, "debug", "kubectl-nac")
    as_flag = f"--as {USER}" if as_user else ""
    with open(os.path.join(d, "kubectl"), "w") as f:
        f.write(
            "#!/usr/bin/env bash\n"
            f'if [[ ${{1:-}} == nac ]]; then shift; exec {plugin} {as_flag} "$@"; fi\n'
            f'exec {env["KUBECTL"]} {as_flag} "$@"\n'
        )
    os.symlink(os.path.join(target, "debug", "nac"), os.path.join(d, "nac"))
    os.symlink(plugin, os.path.join(d, "kubectl-nac"))
    os.chmod(os.path.join(d, "kubectl"), 0o755)
    return d


def load_env(cluster_dir):
    out = subprocess.run(
        ["bash", "-c", f". {cluster_dir}/env && env -0"], capture_output=True, check=True
    ).stdout.decode()
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


def port_or_free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            return free_port()


def start_run(cluster_dir, log_path, metrics_port):
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env.update(
        CLUSTER_DIR=cluster_dir,
        # nac as a local process: the blocks use its metrics port, and the node (one per machine) is the node
        # suite's (tests/e2e_node.rs covers make run's node mode: the chart, the image, volume data).
        RUN_NODE="0",
        RUN_WEBHOOK_PORT=str(port_or_free(9443)),
        RUN_METRICS_PORT=str(metrics_port),
    )
    log = open(log_path, "w")
    started = time.time()
    proc = subprocess.Popen(
        ["hack/run.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.time() + float(os.environ.get("DOCS_CHECK_START_TIMEOUT", "1800"))
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"docs-check: hack/run.sh exited ({proc.returncode}); its log: {log_path}")
        with open(log_path, encoding="utf-8", errors="replace") as f:
            if "nac is running" in f.read():
                print(f"docs-check: make run ready in {time.time() - started:.0f} s ({cluster_dir})", flush=True)
                return proc
        time.sleep(2)
    stop_run(proc)
    raise SystemExit(f"docs-check: hack/run.sh not ready in time; its log: {log_path}")


def stop_run(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)  # run.sh's trap stops nac, Velero, S3 and the control plane (SIGINT may be ignored in the background)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def run_blocks():
    docs = [(p, blocks_of(p)) for p in RUN_DOCS if os.path.exists(os.path.join(ROOT, p))]
    unmarked = [(p, line) for p, bs in docs for line, mode, _ in bs if mode is None]
    for p, line in unmarked:
        fail(f"{p}:{line}: sh block without a <!-- check: user|admin|skip: reason --> marker")
    if unmarked:
        return
    cluster_dir = os.environ.get("DOCS_CLUSTER_DIR", os.path.join(ROOT, ".cluster-docs"))
    log_path = os.path.join(tempfile.gettempdir(), f"docs-check-run-{os.getpid()}.log")
    print(f"docs-check: starting the make run environment in {cluster_dir} (log {log_path})")
    # make run's ports when free; the documents' metrics address follows the port used.
    metrics_port = port_or_free(8080)
    proc = start_run(cluster_dir, log_path, metrics_port)
    outputs = {}
    try:
        env = load_env(cluster_dir)
        bins = {True: wrappers(env, True), False: wrappers(env, False)}
        ran = skipped = 0
        for path, bs in docs:
            for line, mode, text in bs:
                if mode.startswith("skip"):
                    skipped += 1
                    print(f"docs-check: {path}:{line}: skipped ({mode[5:].strip()})")
                    continue
                run_env = dict(os.environ)
                text = text.replace("127.0.0.1:8080", f"127.0.0.1:{metrics_port}")
                run_env.update(
                    CLUSTER_DIR=cluster_dir,
                    KUBECONFIG=env["KUBECONFIG"],
                    PATH=bins[mode == "user"] + os.pathsep + os.environ["PATH"],
                )
                print(f"docs-check: {path}:{line}: running as {USER if mode == 'user' else 'admin'}")
                r = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", text],
                    cwd=ROOT,
                    env=run_env,
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                out = r.stdout + r.stderr
                outputs[(path, line)] = out
                print("    " + out.rstrip().replace("\n", "\n    ") if out.strip() else "    (no output)")
                if r.returncode != 0:
                    fail(f"{path}:{line}: the block exited {r.returncode}")
                    return
                ran += 1
        print(f"docs-check: {ran} blocks ran, {skipped} skipped")
        check_claims(env, outputs)
    finally:
        stop_run(proc)


# ---------------------------------------------------------------- claims


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def check_claims(env, outputs):
    kubectl = env["KUBECTL"]
    kenv = dict(os.environ, KUBECONFIG=env["KUBECONFIG"])
    # 1. The roles make run gives demo-user, as the README names them.
    bound = subprocess.run(
        [kubectl, "-n", NAMESPACE, "get", "rolebindings", "-o",
         "jsonpath={range .items[*]}{.roleRef.name} {.subjects[*].name}{\"\\n\"}{end}"],
        env=kenv, capture_output=True, text=True, check=True,
    ).stdout
    roles = {line.split()[0] for line in bound.splitlines() if USER in line.split()[1:]}
    named = set(re.findall(r"Kubernetes' `(\w+)` role", read("README.md")))
    if not named or not named <= roles:
        fail(f"README.md names Kubernetes' {sorted(named)} role(s) for {USER}; bound: {sorted(roles)}")
    else:
        print(f"docs-check: README's role of {USER} ({', '.join(sorted(named))}) is bound")
    # 2. The rights warning users see on their first backup, as the documents quote it.
    seen = [
        line for out in outputs.values() for line in out.splitlines()
        if line.startswith("Warning: spec.backupSpec: ") and "left out of the backup" in line
    ]
    if not seen:
        fail("no rights warning seen on the documented backups")
        return
    # The counts vary with the cluster, and whether nac can tell which kinds hold objects with nac's rights (all
    # of them when it runs with an admin's kubeconfig, few as the chart installs it).
    def norm(s):
        s = re.sub(r"and \d+ more kinds", "and N more kinds", s.strip())
        return re.sub(r"\d+ holds? (objects there|none); ", "", s)
    actual = {norm(s) for s in seen}
    for path in RUN_DOCS:
        for n, line in enumerate(read(path).splitlines(), 1):
            if line.startswith("Warning: spec.backupSpec: ") and "left out of the backup" in line:
                if norm(line) not in actual:
                    fail(f"{path}:{n}: quoted warning is not what users see; seen: {seen[0]}")
                else:
                    print(f"docs-check: {path}:{n}: the quoted rights warning is what users see")


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("links", "all"):
        check_links()
    if what in ("blocks", "all"):
        run_blocks()
    if failures:
        print(f"docs-check: {len(failures)} problem(s)", file=sys.stderr)
        sys.exit(1)
    print("docs-check: ok")


if __name__ == "__main__":
    main()
