#!/usr/bin/env python3
"""List the functions of a Rust source tree longer than a limit (non-test code).

Usage: scripts/long_functions.py [DIR] [LIMIT]   (defaults: shared/provider/src 80)
       scripts/long_functions.py --workspace      every crate of the workspace, limit 80

With --workspace, KNOWN lists the functions still over the limit, each to be split: a function
over the limit that is not listed fails, and so does a listed one that is no longer over it (the
list only shrinks, and always says exactly what is left).

A function's length counts the lines from its `fn` line to its closing brace. Files named
tests.rs and `#[cfg(test)]` modules are skipped. Braces inside strings, chars and comments are
ignored. Exits 1 when any function is over the limit.
"""
import os
import re
import sys

FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def strip(line, state):
    """Removes strings, chars and comments from a line; state carries block comments/strings."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] = False
                i += 2
            else:
                i += 1
            continue
        if state["str"]:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state["str"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = True
            i += 2
            continue
        m = re.match(r'r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            end = '"' + m.group(1)
            j = line.find(end, i + len(m.group(0)))
            i = len(line) if j < 0 else j + len(end)
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        m = re.match(r"'(\\.|[^\\'])'", line[i:]) or re.match(r"'\\u\{[0-9a-fA-F]+\}'", line[i:])
        if m:
            i += len(m.group(0))
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    state = {"block": False, "str": False}
    clean = [strip(l, state) for l in lines]
    found = []
    skip_depth = None
    depth = 0
    pending_cfg_test = False
    stack = []  # (name, start line, depth at which the body opened)
    for n, line in enumerate(clean):
        if skip_depth is None and re.search(r"#\[cfg\(test\)\]", line):
            pending_cfg_test = True
        m = FN.match(line)
        if skip_depth is None and m:
            stack.append([m.group(7), n, None])
        for c in line:
            if c == "{":
                depth += 1
                if pending_cfg_test and skip_depth is None:
                    skip_depth = depth
                    pending_cfg_test = False
                if stack and stack[-1][2] is None:
                    stack[-1][2] = depth
            elif c == "}":
                if skip_depth is not None and depth == skip_depth:
                    skip_depth = None
                if stack and stack[-1][2] == depth:
                    name, start, _ = stack.pop()
                    found.append((name, start + 1, n - start + 1))
                depth -= 1
            elif c == ";" and stack and stack[-1][2] is None:
                stack.pop()  # a declaration without a body
        if pending_cfg_test and line.strip().endswith(";"):
            pending_cfg_test = False
    return found


LIMIT = 80

# "path function" of the production functions still over LIMIT lines.
KNOWN: set[str] = set()

# Files that are test code though they sit in src/ (compiled only for tests).
TEST_CODE = {"shared/state/src/conformance.rs"}


def workspace():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(here, "Cargo.toml"), encoding="utf-8").read()
    block = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    members = re.findall(r'"([^"]+)"', block.group(1)) if block else []
    over, seen = [], set()
    for member in members:
        for dirpath, _, files in os.walk(os.path.join(here, member, "src")):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, here)
                if not name.endswith(".rs") or name == "tests.rs" or rel in TEST_CODE:
                    continue
                for fn, line, length in functions(path):
                    if length > LIMIT:
                        seen.add(f"{rel} {fn}")
                        if f"{rel} {fn}" not in KNOWN:
                            over.append((length, f"{rel}:{line}", fn))
    problems = 0
    for length, where, fn in sorted(over, reverse=True):
        print(f"{length:5} {where} {fn}: over {LIMIT} lines")
        problems += 1
    for gone in sorted(KNOWN - seen):
        print(f"{gone}: no longer over {LIMIT} lines (or gone): remove it from KNOWN")
        problems += 1
    if problems:
        print(f"long_functions: {problems} problem(s)")
        sys.exit(1)
    print(f"long_functions: no function over {LIMIT} lines outside the {len(KNOWN)} known")


def main():
    if sys.argv[1:] == ["--workspace"]:
        workspace()
        return
    root = sys.argv[1] if len(sys.argv) > 1 else "shared/provider/src"
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
    over = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(dirpath, name)
            for fn, line, length in functions(path):
                if length > limit:
                    over.append((length, f"{path}:{line}", fn))
    for length, where, fn in sorted(over, reverse=True):
        print(f"{length:5} {where} {fn}")
    if over:
        print(f"{len(over)} function(s) over {limit} lines")
        sys.exit(1)
    print(f"no function over {limit} lines")


if __name__ == "__main__":
    main()
