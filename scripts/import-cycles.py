#!/usr/bin/env python3
"""Finds import cycles among the modules of one crate (api/kube by default).

Each .rs file under the crate's src/ is a module; an edge goes from a module to every module it names through
`crate::…` or `super::…` paths (in `use` lines or inline), resolved to the longest path that is a module file.
Prints the strongly connected components with more than one module (the cycles), largest first.

`--max N` exits non-zero when the largest cycle holds more than N modules: the test script runs it with the
size the crate has now, so no module joins a cycle (the ratchet only goes down, to 0 when the crate is layered).

`--top` counts the crate's top-level modules instead (a module and everything below it as one node): what a split
into crates needs acyclic, since a crate takes whole top-level modules.

`--layers "a,b | c | d,e"` (with `--top`) declares the crate's layers, lowest first: an import from a module to
one in a higher layer fails, and so does a top-level module the declaration does not place.
"""
import os
import re
import sys

PATH_RE = re.compile(r"\b(crate|super)((?:::\w+)+)")
USE_GROUP_RE = re.compile(r"\buse\s+(crate|super)((?:::\w+)*)::\{([^;]*)\};", re.S)


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib"):
                rel = rel[:-1]
            mods[tuple(rel)] = os.path.join(root, f)
    return mods


def strip_tests(text):
    # Test modules may import anything, and comments (doc links) are not imports.
    i = text.find("#[cfg(test)]")
    text = text if i < 0 else text[:i]
    return re.sub(r"//[^\n]*", "", text)


def resolve(mods, path):
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


def edges(mods, name, text):
    base = list(name)
    # A file `a/b.rs` is module a::b; `super` is a; for `a/mod.rs` (module a) `super` is the crate root.
    out = set()

    def target(kind, rest):
        parts = [p for p in rest.split("::") if p]
        if kind == "crate":
            full = parts
        else:
            full = base[:-1]
            while parts and parts[0] == "super":
                parts = parts[1:]
                full = full[:-1]
            full = full + parts
        t = resolve(mods, full)
        if t is not None and t != name and t != ():
            out.add(t)

    for m in USE_GROUP_RE.finditer(text):
        kind, prefix, body = m.group(1), m.group(2), m.group(3)
        for item in re.split(r",", re.sub(r"\{[^}]*\}", "", body)):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                target(kind, prefix + "::" + item)
            elif item == "self":
                target(kind, prefix)
    for m in PATH_RE.finditer(text):
        target(m.group(1), m.group(2))
    return out


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    limit = None
    if "--max" in args:
        i = args.index("--max")
        limit = int(args[i + 1])
        del args[i : i + 2]
    layers = None
    if "--layers" in args:
        i = args.index("--layers")
        layers = {
            m.strip(): n
            for n, layer in enumerate(args[i + 1].split("|"))
            for m in layer.split(",")
            if m.strip()
        }
        del args[i : i + 2]
    top = "--top" in args
    if top:
        args.remove("--top")
    crate = args[0] if args else "api/kube"
    src = os.path.join(crate, "src")
    mods = modules(src)
    graph = {}
    for name, path in mods.items():
        with open(path, encoding="utf-8") as f:
            graph[name] = edges(mods, name, strip_tests(f.read()))
    if top:
        collapsed = {}
        for name, targets in graph.items():
            if not name:
                continue
            node = collapsed.setdefault(name[:1], set())
            node.update(t[:1] for t in targets if t and t[:1] != name[:1])
        graph, mods = collapsed, collapsed
    cycles = sorted((c for c in sccs(graph) if len(c) > 1), key=len, reverse=True)
    biggest = len(cycles[0]) if cycles else 0
    level = "top-level modules" if top else "modules"
    print(f"{crate}: {len(mods)} {level}, {len(cycles)} cycle(s), the largest of {biggest} modules")
    for c in cycles:
        print(f"  {len(c)}: " + ", ".join(sorted("::".join(m) or "lib" for m in c)))
    if layers is not None:
        bad = []
        for m in sorted(graph):
            name = "::".join(m)
            if name not in layers:
                bad.append(f"{name} is in no declared layer")
                continue
            for t in sorted(graph[m]):
                target = "::".join(t)
                if layers.get(target, -1) > layers[name]:
                    bad.append(f"{name} imports {target}, a higher layer")
        for b in bad:
            print(f"  {b}", file=sys.stderr)
        if bad:
            sys.exit(1)
    if limit is not None and biggest > limit:
        print(f"a cycle of {biggest} modules: more than the {limit} allowed (scripts/test.sh)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
