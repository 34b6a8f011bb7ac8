#!/usr/bin/env python3
"""Fails on a cycle between the top-level modules of any crate of the workspace.

A module `a` depends on `b` when code in `a` (any file below it, tests and comments left out)
names `crate::b` or reaches it through `super::`. A cycle is a strongly connected set of two or
more modules. Each crate is read from its `src/`; the workspace members come from Cargo.toml.

KNOWN lists the cycles the project still has on purpose, each with the work that removes it: a
known cycle that grows or shrinks fails too, so the list always says exactly what is left.

Usage: scripts/check_modules.py   (from anywhere; exit 1 on a problem, every problem printed)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# crate src dir -> the cycles it may still have (sets of top-level module names).
# None left: any cycle fails.
KNOWN: dict[str, list[set[str]]] = {}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def members():
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    block = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    if not block:
        sys.exit("check_modules: no [workspace] members in Cargo.toml")
    return re.findall(r'"([^"]+)"', block.group(1))


def modules(src):
    """Each source file's module path below `src`, test files left out."""
    out = {}
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if "tests" in parts or parts[0] == "bin":
                continue
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            out[path] = parts
    return out


def code_of(text):
    """The text without comments, string literals and the trailing `#[cfg(test)] mod` block."""
    cut = re.search(r"#\[cfg\(test\)\]\s*mod\s+" + IDENT + r"\s*\{", text)
    if cut:
        text = text[: cut.start()]
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def brace_heads(text, start):
    """The first identifier of each top-level item of the `{...}` group opening at `start`."""
    depth, item, heads = 0, "", []
    for c in text[start:]:
        if c == "{":
            depth += 1
            if depth == 1:
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and c == ",":
            heads.append(item)
            item = ""
        elif depth >= 1:
            item += c
    heads.append(item)
    return [m.group(0) for h in heads if (m := re.match(IDENT, h.strip()))]


def references(code, me):
    """Module paths (tuples) the code names, from the module `me`."""
    found = set()
    for m in re.finditer(r"\bcrate::(" + IDENT + r"|\{)", code):
        if m.group(1) == "{":
            found.update((h,) for h in brace_heads(code, m.end() - 1))
        else:
            found.add((m.group(1),))
    for m in re.finditer(r"\b((?:super::)+)(" + IDENT + r"|\{)?", code):
        up = m.group(1).count("super::")
        base = me[: max(len(me) - up, 0)]
        if m.group(2) == "{":
            found.update(tuple(base + [h]) for h in brace_heads(code, m.end() - 1))
        elif m.group(2):
            found.add(tuple(base + [m.group(2)]))
        else:
            found.add(tuple(base))
    return found


def cycles(src):
    files = modules(src)
    known = {tuple(p) for p in files.values()}
    graph = {}
    for path, me in files.items():
        if not me:
            continue
        code = code_of(open(path, encoding="utf-8").read())
        top = me[0]
        graph.setdefault(top, set())
        for ref in references(code, me):
            while ref and ref not in known:
                ref = ref[:-1]
            if ref and ref[0] != top:
                graph[top].add(ref[0])
    # Tarjan's strongly connected components.
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found, graph


def main():
    problems = 0
    for member in members():
        src = os.path.join(member, "src")
        if not os.path.isdir(os.path.join(ROOT, src)):
            continue
        found, graph = cycles(os.path.join(ROOT, src))
        allowed = [set(c) for c in KNOWN.get(src, [])]
        for component in found:
            if component in allowed:
                allowed.remove(component)
                continue
            problems += 1
            print(f"check_modules: {src}: module cycle among {', '.join(sorted(component))}:")
            for m in sorted(component):
                into = ", ".join(sorted(graph[m] & component))
                print(f"    {m} -> {into}")
        for gone in allowed:
            problems += 1
            print(
                f"check_modules: {src}: the known cycle among {', '.join(sorted(gone))} is gone "
                "or changed: update KNOWN in scripts/check_modules.py"
            )
    if problems:
        print(f"check_modules: {problems} problem(s)")
        return 1
    print("check_modules: no module cycle outside the known ones")
    return 0


if __name__ == "__main__":
    sys.exit(main())
