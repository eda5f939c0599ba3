#!/usr/bin/env python3
"""Webhook load matrix for BENCHMARKS.md: a release `nac serve` (file policy, no controllers) and `nac-loadgen`
on loopback, one fresh server per invocation, runs interleaved round-robin so drift hits every configuration alike.

    cargo build --release --bin nac --bin nac-loadgen
    python3 benches/webhook-load.py OUT.jsonl REPS SECONDS CONFIG...
    python3 benches/webhook-load.py table OUT.jsonl      # markdown: median (min-max) per configuration

CONFIG is endpoint:protocol:connections[:client-threads], e.g. validate:http1:16 or mutate:h2:4 (endpoint is
`validate` or `mutate` of nonadminbackups). Per run it records the loadgen result, the server's peak RSS during
the run (VmHWM, reset through /proc/<pid>/clear_refs before each run), and the CPU seconds used by the server, the
generator and everything else on the machine (a rough noise indicator). Environment: BIN (default target/release),
WORK (certificates, policy, server log; default a fresh temporary directory), POLICY (default policies/strict.yaml).
Only 127.0.0.1 is used.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, "target", "release"))
WORK = os.environ.get("WORK") or tempfile.mkdtemp(prefix="nac-load-")
POLICY = os.environ.get("POLICY", os.path.join(ROOT, "policies", "strict.yaml"))
ADDR = "127.0.0.1:19443"
METRICS = "127.0.0.1:18080"
HZ = os.sysconf("SC_CLK_TCK")


def cpu_total():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]  # all jiffies, idle + iowait


def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read().rsplit(")", 1)[1].split()
    return (int(s[11]) + int(s[12])) / HZ  # utime + stime


def status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise KeyError(key)


def policy_document(configmap_path):
    """The `policy.yaml: |` block of a policy ConfigMap (policy.file wants the bare document)."""
    out, inside = [], False
    for line in open(configmap_path):
        if line.startswith("  policy.yaml: |"):
            inside = True
        elif inside and line.startswith("    "):
            out.append(line[4:])
        elif inside:
            break
    if not out:
        raise SystemExit(f"{configmap_path}: no data.policy.yaml block")
    return "".join(out)


def prepare():
    certs = os.path.join(WORK, "certs")
    if not os.path.exists(os.path.join(certs, "tls.crt")):
        subprocess.run([f"{BIN}/nac", "certs", "--out", certs, "--host", "127.0.0.1"], check=True,
                       stdout=subprocess.DEVNULL)
    policy = os.path.join(WORK, "policy.yaml")
    with open(policy, "w") as f:
        f.write(policy_document(POLICY))
    return certs, policy


def start_server(certs, policy):
    env = dict(os.environ,
               NAC_CONTROLLERS__ENABLED="false",
               NAC_POLICY__FILE=policy,
               NAC_WEBHOOK__LISTEN=ADDR,
               NAC_METRICS__LISTEN=METRICS,
               NAC_WEBHOOK__CERT_FILE=os.path.join(certs, "tls.crt"),
               NAC_WEBHOOK__KEY_FILE=os.path.join(certs, "tls.key"),
               NAC_LOG__LEVEL="warn")
    log = open(os.path.join(WORK, "server.log"), "a")
    p = subprocess.Popen([f"{BIN}/nac", "serve"], env=env, stdout=log, stderr=log)
    for _ in range(100):
        time.sleep(0.1)
        r = subprocess.run(["curl", "-sf", f"http://{METRICS}/readyz"], capture_output=True, timeout=5)
        if r.returncode == 0:
            return p
    p.terminate()
    raise SystemExit("server did not become ready; see " + os.path.join(WORK, "server.log"))


def run_one(server, certs, endpoint, proto, conns, threads, seconds):
    args = [f"{BIN}/nac-loadgen", "--addr", ADDR, "--ca-file", os.path.join(certs, "ca.crt"),
            "--path", f"/{endpoint}/nonadminbackups", "--concurrency", str(conns), "--duration", str(seconds),
            "--warmup", "1", "--threads", str(threads), "--json"]
    if proto == "h2":
        args.append("--h2")
    with open(f"/proc/{server.pid}/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    t0, i0 = cpu_total()
    s0 = proc_cpu(server.pid)
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S", *args], capture_output=True, text=True,
                       timeout=seconds + 120)
    t1, i1 = cpu_total()
    s1 = proc_cpu(server.pid)
    if not r.stdout.strip():
        raise SystemExit(f"nac-loadgen failed: {r.stderr}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    gen = sum(float(x) for x in r.stderr.strip().splitlines()[-1].split())
    busy = ((t1 - t0) - (i1 - i0)) / HZ
    res.update(endpoint=endpoint, exit=r.returncode,
               server_hwm_kib=status_kib(server.pid, "VmHWM"), server_rss_kib=status_kib(server.pid, "VmRSS"),
               server_cpu_s=round(s1 - s0, 2), loadgen_cpu_s=round(gen, 2),
               other_cpu_s=round(busy - (s1 - s0) - gen, 2),
               machine_busy_pct=round(100 * busy / ((t1 - t0) / HZ), 1),
               loadavg=open("/proc/loadavg").read().split()[0], time=time.strftime("%Y-%m-%dT%H:%M:%S"))
    return res


def table(path):
    import statistics
    groups = {}
    for line in open(path):
        r = json.loads(line)
        groups.setdefault((r["endpoint"], r["protocol"], r["concurrency"]), []).append(r)

    def ms(us):
        return f"{us / 1000:.2f}"

    print("| endpoint | protocol | conns | runs | req/s median (min–max) | p50 ms | p99 ms median (min–max) "
          "| max ms median (min–max) | errors | server peak RSS MiB |")
    print("|---|---|---:|---:|---|---:|---|---|---:|---:|")
    for (ep, proto, conns), rs in groups.items():
        def med(k):
            return statistics.median(r[k] for r in rs)

        def span(k, f):
            return f"{f(min(r[k] for r in rs))}–{f(max(r[k] for r in rs))}"

        print(f"| /{ep}/nonadminbackups | {proto} | {conns} | {len(rs)} | {med('rps'):,.0f} "
              f"({span('rps', lambda x: f'{x:,.0f}')}) | {ms(med('p50_us'))} | {ms(med('p99_us'))} "
              f"({span('p99_us', ms)}) | {ms(med('max_us'))} ({span('max_us', ms)}) "
              f"| {sum(r['errors'] + r['warmup_errors'] for r in rs)} "
              f"| {max(r['server_hwm_kib'] for r in rs) / 1024:.1f} |")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        return table(sys.argv[2])
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    out, reps, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if not (1 <= reps <= 20 and 1 <= seconds <= 600):
        raise SystemExit("REPS must be 1..20 and SECONDS 1..600")
    configs = []
    for c in sys.argv[4:]:
        p = c.split(":")
        configs.append((p[0], p[1], int(p[2]), int(p[3]) if len(p) > 3 else 1))
    certs, policy = prepare()
    server = start_server(certs, policy)
    try:
        with open(out, "a") as f:
            for rep in range(reps):
                for ep, proto, conns, threads in configs:
                    res = run_one(server, certs, ep, proto, conns, threads, seconds)
                    res["rep"] = rep
                    f.write(json.dumps(res) + "\n")
                    f.flush()
                    print(f"{ep:8} {proto:5} c={conns:<4} rps={res['rps']:7.0f} p50={res['p50_us']:6.0f}us "
                          f"p99={res['p99_us']:6.0f}us max={res['max_us']:7.0f}us err={res['errors']} "
                          f"rss={res['server_hwm_kib'] / 1024:.1f}MiB cpu srv/gen/other={res['server_cpu_s']}/"
                          f"{res['loadgen_cpu_s']}/{res['other_cpu_s']}s", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)


main()
