#!/usr/bin/env python3
"""Checks the documentation (run by scripts/check-docs after it built the book).

1. Links: in the rendered book (every HTML page but print.html, which repeats them), every
   relative href/src names a file of the book and every #anchor an id of that file. In the
   repository's other Markdown files (README.md, ARCHITECTURE.md, deploy/*/README.md...) every
   relative link names a file of the repository and every #anchor a heading of the target
   Markdown file (mdBook's and GitHub's rule: lowercase, spaces to '-', punctuation other than
   '-' and '_' dropped).
2. Reference completeness, from the code, never from a list kept by hand: every global setting
   (the fields of `Settings` in shared/engine/src/settings.rs) is named in
   docs/src/reference/settings.md; every environment variable the binaries read (clap `env = "..."`
   and `env::var("...")` in data-plane/src, control-plane/src and the shared crates they link) in
   a page of docs/src/reference/;
   every metric name (`switchyard_...` in the non-test code of data-plane/src, control-plane/src and
   shared/*/src) in docs/src/reference/metrics.md; every error code (data-plane/src/errors.rs's
   `GatewayError::code`, control-plane/src/error.rs's codes) in docs/src/reference/errors.md.

Usage: check_docs.py BOOK_DIR   (exits 1 naming every problem)
"""
import html.parser
import os
import re
import sys
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
problems = []


def problem(text):
    problems.append(text)


# --- 1. links ------------------------------------------------------------------------------------

class Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            if name in ("href", "src") and value is not None:
                self.links.append(value)


def parse_html(path, cache={}):
    if path not in cache:
        c = Collector()
        c.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = c
    return cache[path]


def external(link):
    return bool(re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", link)) or link.startswith("//")


def check_book(book):
    pages = [p for p in book.rglob("*.html") if p.name not in ("print.html", "toc.html")]
    if not pages:
        problem(f"{book}: no HTML pages (was the book built?)")
    for page in pages:
        for link in parse_html(page).links:
            if external(link) or link.startswith("javascript:"):
                continue
            target, _, anchor = link.partition("#")
            target = urllib.parse.unquote(target.split("?")[0])
            dest = (page.parent / target).resolve() if target else page
            rel = page.relative_to(book)
            if target and not dest.exists():
                problem(f"book {rel}: broken link {link!r} (no {os.path.relpath(dest, book)})")
                continue
            if dest.is_dir():
                dest = dest / "index.html"
            if anchor and dest.suffix == ".html" and anchor not in parse_html(dest).ids:
                problem(f"book {rel}: broken anchor {link!r}")


def heading_id(text):
    text = re.sub(r"<[^>]+>", "", text)          # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    return "".join(ch for ch in text.replace(" ", "-") if ch.isalnum() or ch in "-_")


def markdown_anchors(path):
    ids, fence, seen = set(), False, {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = heading_id(m.group(1))
            n = seen.get(base, 0)
            ids.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
    return ids


def markdown_outside_book():
    """The repository's Markdown files that are not pages of the book (README.md, ARCHITECTURE.md,
    the READMEs of deploy/ and fuzz/...), as git lists them."""
    import subprocess
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
                             cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = [p.name for p in REPO.glob("*.md")]
    return [REPO / p for p in out if not p.startswith("docs/src/") and (REPO / p).exists()]


def check_markdown(path):
    text, fence = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            text.append(re.sub(r"`[^`]*`", "", line))
    for link in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", "\n".join(text)):
        if external(link):
            continue
        target, _, anchor = link.partition("#")
        dest = (path.parent / urllib.parse.unquote(target)).resolve() if target else path
        rel = path.relative_to(REPO)
        if not dest.exists():
            problem(f"{rel}: broken link {link!r}")
        elif anchor and dest.suffix == ".md" and anchor not in markdown_anchors(dest):
            problem(f"{rel}: broken anchor {link!r}")


# --- 2. reference completeness ---------------------------------------------------------------

def non_test(path):
    text = path.read_text(encoding="utf-8")
    cut = text.find("#[cfg(test)]")
    return text if cut < 0 else text[:cut]


def rust_files(*dirs):
    for d in dirs:
        yield from sorted((REPO / d).rglob("*.rs"))


def settings_names():
    text = non_test(REPO / "shared/engine/src/settings.rs")
    body = re.search(r"pub struct Settings \{(.*?)\n\}", text, re.S).group(1)
    return re.findall(r"^\s*pub (\w+):", body, re.M)


def env_names():
    names = set()
    shared = [str(p.relative_to(REPO)) for p in sorted((REPO / "shared").glob("*/src"))]
    for f in rust_files("data-plane/src", "control-plane/src", *shared):
        text = non_test(f)
        names.update(re.findall(r'\benv\s*=\s*"([A-Z][A-Z0-9_]*)"', text))
        names.update(re.findall(r'env::var(?:_os)?\(\s*"([A-Z][A-Z0-9_]*)"', text))
    return names


def crate_names():
    names = set()
    for manifest in REPO.glob("**/Cargo.toml"):
        if "target" in manifest.parts:
            continue
        m = re.search(r'^name\s*=\s*"([^"]+)"', manifest.read_text(encoding="utf-8"), re.M)
        if m:
            names.add(m.group(1).replace("-", "_"))
    return names


def metric_names():
    crates = crate_names()
    names = set()
    dirs = ["data-plane/src", "control-plane/src"] + [
        str(p.relative_to(REPO)) for p in sorted((REPO / "shared").glob("*/src"))
    ]
    for f in rust_files(*dirs):
        for line in non_test(f).splitlines():
            if line.lstrip().startswith("//"):
                continue
            for m in re.finditer(r"(?<![A-Za-z0-9_])(switchyard_[a-z0-9_]*[a-z0-9])(?![a-z0-9_]|::)", line):
                name = m.group(1)
                if name in crates:
                    continue  # a crate, not a metric
                if re.search(r"_v\d+$", name):
                    continue  # a Redis script's versioned name
                if re.search(r"_(bucket|sum|count)$", name):
                    continue  # a histogram's series of a family named elsewhere
                if re.search(r"NOTIFY_CHANNEL|SCRIPT|script\(", line):
                    continue  # the Postgres NOTIFY channel, script names
                names.add(name)
    return names


def error_codes():
    dp = non_test(REPO / "data-plane/src/errors.rs")
    body = re.search(r"pub fn code\(&self\).*?\n    \}\n", dp, re.S).group(0)
    codes = set(re.findall(r'=>\s*"([a-z_]+)"', body))
    cp = non_test(REPO / "control-plane/src/error.rs")
    codes.update(c for _, c in re.findall(r'=>\s*\(\s*"([a-z_]+)",\s*"([a-z_]+)"\s*\)', cp))
    return codes


def check_reference():
    ref = REPO / "docs/src/reference"
    read = lambda name: (ref / name).read_text(encoding="utf-8")
    all_ref = "\n".join(p.read_text(encoding="utf-8") for p in sorted(ref.glob("*.md")))
    code_names = lambda text: set(re.findall(r"[A-Za-z0-9_]+", text))  # named as a whole word
    checks = [
        ("setting", settings_names(), "docs/src/reference/settings.md", read("settings.md")),
        ("environment variable", env_names(), "docs/src/reference/*.md", all_ref),
        ("metric", metric_names(), "docs/src/reference/metrics.md", read("metrics.md")),
        ("error code", error_codes(), "docs/src/reference/errors.md", read("errors.md")),
    ]
    for kind, names, where, text in checks:
        if not names:
            problem(f"found no {kind} in the code: the extraction in scripts/check_docs.py is stale")
        documented = code_names(text)
        for name in sorted(names):
            if name not in documented:
                problem(f"{where}: the {kind} `{name}` is not documented")


def main():
    book = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "target/book"
    check_book(book)
    for path in markdown_outside_book():
        check_markdown(path)
    check_reference()
    for p in problems:
        print(f"check-docs: {p}", file=sys.stderr)
    if problems:
        print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("check-docs: links, anchors and reference pages are complete", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
