#!/usr/bin/env python3
"""Fails when two files of src/ import each other, directly or around a loop.

Reads the `crate::`, `super::` and `self::` paths of each file (outside comments and its `mod tests`), resolves
each to the file of the module it names, and lists the strongly connected components of that graph. A mod.rs
that only declares and re-exports its children is not an edge to them.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "src"
PATH = re.compile(r"\b(crate|self|super(?:::super)*)::((?:[A-Za-z_]\w*::)*)(\{[^}]*\}|[A-Za-z_]\w*)")


def module_of(path):
    parts = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def main():
    files = {}
    for d, _, names in os.walk(ROOT):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(d, n)
                files[module_of(p)] = p
    edges = {}
    for me, p in files.items():
        text = open(p, encoding="utf-8").read()
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
        text = "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))
        is_mod = os.path.basename(p) in ("mod.rs", "lib.rs", "main.rs")
        here = list(me) if is_mod else list(me[:-1])
        deps = set()
        for m in PATH.finditer(text):
            base, mid, last = m.group(1), [x for x in m.group(2).split("::") if x], m.group(3)
            if base == "crate":
                prefix = []
            elif base == "self":
                prefix = list(me) if is_mod else list(me)
            else:
                ups = base.count("super")
                prefix = here[: len(here) - (ups - 1)] if ups > 1 else here
            items = [last] if not last.startswith("{") else [
                x.strip().split("::")[0] for x in last[1:-1].split(",") if x.strip()]
            for item in items:
                path = prefix + mid + [item]
                for i in range(len(path), 0, -1):
                    target = tuple(path[:i])
                    if target in files:
                        if target != me and not (is_mod and target[: len(me)] == me):
                            deps.add(target)
                        break
        edges[me] = deps
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(comp)

    for v in edges:
        if v not in index:
            visit(v)
    cycles = [c for c in sccs if len(c) > 1]
    name = lambda m: "/".join(m) or "lib"
    for c in cycles:
        print("import cycle:", ", ".join(sorted(name(m) for m in c)), file=sys.stderr)
        for m in sorted(c):
            print(f"  {name(m)} -> {', '.join(sorted(name(x) for x in edges[m] if x in c))}", file=sys.stderr)
    print(f"import-cycles: {len(files)} files, {sum(len(e) for e in edges.values())} imports, {len(cycles)} cycles")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
