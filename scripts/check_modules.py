#!/usr/bin/env python3
"""Fails on a module cycle in any crate of the workspace, between files or between the parts of a
folder.

Every module is a node: the crate root (`lib.rs`/`main.rs`), each `mod.rs` (its folder's module)
and each other file, at every depth. Module `a` depends on module `b` when `a`'s own code (its
file; comments, strings and the trailing `#[cfg(test)] mod` block left out) names a path into `b`:
`crate::…`, `super::…`, `self::…`, or a child module by its bare name. A name that a module only
re-exports (`pub use x::Y`) is followed to the module that defines it, so a facade that re-exports
is not taken for a dependency of its users. A cycle is a strongly connected set of two or more
modules, and that is what this check fails on: a module that imports from the module that
declares it (a child calling up into its parent, which calls down into it) is one. It also fails
when the parts of one folder (its files, and its subfolders each taken whole) import each other
in a loop although no two files do: every file then stands above what it imports, at every level.
A module that names an item through the crate root's re-export (`crate::X` where `lib.rs` says
`pub use a::X`) fails too: the root imports what it re-exports.

KNOWN lists the cycles the project still has, each with the work that removes it: a known cycle
that grows, shrinks or goes fails too, so the list always says exactly what is left.

Usage: scripts/check_modules.py   (from anywhere; exit 1 on a problem, every problem printed)
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = r"(?:" + IDENT + r"::)*(?:" + IDENT + r"|\{)"

# crate src dir -> the cycles it may still have (sets of module paths, `crate` for the root),
# each with the work that removes it. Most are a parent module holding what its children need
# (shared state or helpers) while it also declares, calls or re-exports them: the fix is that
# shared part in a bottom module of its own, the parent only declaring and re-exporting.
KNOWN: dict[str, list[set[str]]] = {
}



def members():
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    block = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    if not block:
        sys.exit("check_modules: no [workspace] members in Cargo.toml")
    return re.findall(r'"([^"]+)"', block.group(1))


def modules(src):
    """Each source file's module path below `src` (a tuple; () is the crate root), tests and
    binaries left out."""
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
            if parts == ["main"] and os.path.exists(os.path.join(src, "lib.rs")):
                continue  # a binary beside a library is a crate of its own (it uses the library)
            if parts in (["lib"], ["main"]):
                parts = []
            out[path] = tuple(parts)
    return out


def code_of(text):
    """The text without comments, string and char literals and the trailing `#[cfg(test)] mod`."""
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
        elif c == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
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


def group(text, start):
    """The items of the `{...}` opening at `start`, each as a path (list of segments) and the name
    it is known by, nested groups expanded; `self` stands for the group's own prefix."""
    depth, item, items = 0, "", []
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
            items.append(item)
            item = ""
        elif depth >= 1:
            item += c
    items.append(item)
    out = []
    for raw in items:
        raw = raw.strip()
        if not raw:
            continue
        m = re.match(r"((?:" + IDENT + r"::)*)\{", raw)
        if m:
            head = [s for s in m.group(1).split("::") if s]
            out.extend((head + path, name) for path, name in group(raw, m.end() - 1))
            continue
        m = re.match(r"((?:" + IDENT + r"::)*)(" + IDENT + r"|\*)(?:\s+as\s+(" + IDENT + r"))?", raw)
        if m:
            segs = [s for s in m.group(1).split("::") if s] + [m.group(2)]
            out.append((segs, m.group(3) or m.group(2)))
    return out


def inline_modules(code):
    """The spans of the inline `mod name { … }` blocks of the code (nested ones too)."""
    spans = []
    for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", code):
        depth = 0
        for end in range(m.end() - 1, len(code)):
            depth += {"{": 1, "}": -1}.get(code[end], 0)
            if depth == 0:
                spans.append((m.end(), end))
                break
    return spans


def paths_in(code):
    """Every path of two or more segments the code names (use trees expanded). Inside an inline
    `mod` block, the `super`s that lead out of the block to its file stay in the file's module."""
    out = []
    spans = inline_modules(code)
    for m in re.finditer(r"(?<![\w:])((?:" + IDENT + r"::)+)(" + IDENT + r"|\{|\*)", code):
        head = m.group(1).split("::")[:-1]
        depth = sum(1 for start, end in spans if start <= m.start() < end)
        while depth and head and head[0] == "super":
            head = head[1:] or ["self"]
            depth -= 1
        if m.group(2) == "{":
            out.extend(head + path for path, _ in group(code, m.end() - 1))
        else:
            out.append(head + [m.group(2)])
    return out


class Crate:
    def __init__(self, src):
        self.files = modules(src)
        self.known = set(self.files.values())
        self.code = {me: code_of(open(path, encoding="utf-8").read()) for path, me in self.files.items()}
        # (module, name) -> the path it re-exports; module -> the paths of its glob re-exports.
        self.reexports, self.globs = {}, {}
        for me, code in self.code.items():
            for m in re.finditer(r"\bpub(?:\s*\([^)]*\))?\s+use\s+([^;]+);", code):
                tree = "{" + m.group(1) + "}"
                for segs, name in group(tree, 0):
                    if segs[-1] == "*":
                        self.globs.setdefault(me, []).append(segs[:-1])
                    else:
                        self.reexports[(me, name)] = segs

    def defines(self, me, name):
        return re.search(
            r"\b(?:struct|enum|union|fn|trait|type|const|static|mod|macro_rules!)\s+" + re.escape(name) + r"\b",
            self.code.get(me, ""),
        )

    def start(self, me, segs):
        """Where a path begins (a module) and the segments left; None outside this crate."""
        first = segs[0]
        if first == "crate":
            return (), segs[1:]
        if first == "super":
            up = 0
            while up < len(segs) and segs[up] == "super":
                up += 1
            return me[: max(len(me) - up, 0)], segs[up:]
        if first == "self":
            return me, segs[1:]
        if me + (first,) in self.known:
            return me, segs
        return None

    def resolve(self, me, segs, depth=0):
        """The module a path leads into, following re-exports; None outside this crate."""
        begun = self.start(me, segs)
        if begun is None or depth > 16:
            return None
        module, rest = begun
        while rest and module + (rest[0],) in self.known:
            module, rest = module + (rest[0],), rest[1:]
        if not rest or rest[0] in ("self", "*"):
            return module
        name = rest[0]
        if (module, name) in self.reexports:
            # A re-export of another crate's item leads out of this crate: no edge.
            return self.resolve(module, self.reexports[(module, name)] + rest[1:], depth + 1)
        if not self.defines(module, name):
            for target in self.globs.get(module, []):
                found = self.resolve(module, target + rest, depth + 1)
                if found is not None and self.defines(found, name):
                    return found
        return module

    def through_root(self):
        """The paths inside the crate that reach an item through the crate root's re-exports
        (`crate::Item` where the root says `pub use module::Item`): the root imports what it
        re-exports, so such a path runs back up to the top."""
        for me, code in sorted(self.code.items()):
            if me == ():
                continue
            for segs in paths_in(code):
                if len(segs) >= 2 and segs[0] == "crate" and ((), segs[1]) in self.reexports:
                    yield me, segs

    def graph(self):
        edges = {me: set() for me in self.known}
        for me, code in self.code.items():
            for segs in paths_in(code):
                target = self.resolve(me, segs)
                if target is not None and target != me:
                    edges[me].add(target)
        return edges


def strongly_connected(graph):
    """Tarjan's strongly connected components of two or more nodes."""
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
    return found


def name(module):
    return "::".join(module) or "crate"


def folder_cycles(graph):
    """Cycles between the parts of one folder, each part taken whole: for every module that has
    child modules (the crate root included), its child files and child folders (a folder with
    everything below it) and its own file are the parts, and part `a` depends on part `b` when a
    module in `a` depends on a module in `b`. Files can be free of cycles while two folders still
    call each other (a file of one folder imports the other folder, which imports back from
    another file): that is an import running back up, and this finds it. Yields the folder and
    each cycle as a set of part names."""
    folders = {m[:i] for m in graph for i in range(len(m))}
    for folder in sorted(folders):
        depth = len(folder)

        def part(m):
            if m[:depth] != folder:
                return None
            return m[depth] if len(m) > depth else "(" + (name(folder) if folder else "crate root") + ")"

        parts = {}
        for a, targets in graph.items():
            pa = part(a)
            if pa is None:
                continue
            parts.setdefault(pa, set())
            for b in targets:
                pb = part(b)
                if pb is not None and pb != pa:
                    parts[pa].add(pb)
        for component in strongly_connected(parts):
            yield folder, component, parts


def main():
    problems = 0
    for member in members():
        src = os.path.join(member, "src")
        if not os.path.isdir(os.path.join(ROOT, src)):
            continue
        crate = Crate(os.path.join(ROOT, src))
        graph = crate.graph()
        allowed = [set(c) for c in KNOWN.get(src, [])]
        for component in strongly_connected(graph):
            names = {name(m) for m in component}
            if names in allowed:
                allowed.remove(names)
                continue
            problems += 1
            print(f"check_modules: {src}: module cycle among {', '.join(sorted(names))}:")
            for m in sorted(component):
                into = ", ".join(sorted(name(t) for t in graph[m] & component))
                print(f"    {name(m)} -> {into}")
        for me, segs in crate.through_root():
            problems += 1
            print(
                f"check_modules: {src}: {name(me)} names {'::'.join(segs)}, a re-export of the crate "
                "root: import it from the module that defines it (the root re-exports for other crates)"
            )
        for folder, component, parts in folder_cycles(graph):
            problems += 1
            where = name(folder) if folder else "the crate root"
            print(f"check_modules: {src}: parts of {where} import each other: {', '.join(sorted(component))}:")
            for p in sorted(component):
                print(f"    {p} -> {', '.join(sorted(parts[p] & component))}")
        for gone in allowed:
            problems += 1
            print(
                f"check_modules: {src}: the known cycle among {', '.join(sorted(gone))} is gone "
                "or changed: update KNOWN in scripts/check_modules.py"
            )
    if problems:
        print(f"check_modules: {problems} problem(s)")
        return 1
    print("check_modules: no module cycle outside the known ones, no folder whose parts import each other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
