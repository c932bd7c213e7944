#!/usr/bin/env python3
"""The shape the build holds (issue 39, point 7), checked on every run of the suite.

Fails, printing what and where, on:
  - a non-test `.rs` file over 600 lines;
  - an import cycle between modules of one crate (a module's `use` and inline paths
    resolved to the module that defines the item, through `pub use` re-exports; the
    crate root is its facade and is left out, as `mod` declarations are);
  - `SchedulerCore` over 80 methods or spread over more than 8 files.
Functions over 80 lines are clippy's `too_many_lines` (threshold in `clippy.toml`).

`--report` prints the figures without failing (for closing notes).
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 600
MAX_FACADE_METHODS = 80
# The facade is the core's public calls: a feature adds behaviour to the part that owns
# the data, not another `impl SchedulerCore` file.
MAX_FACADE_FILES = 8
FACADE = "SchedulerCore"


def is_test_path(path: Path) -> bool:
    rel = path.relative_to(ROOT).parts
    if rel[:2] == ("crates", "tests") and "bin" not in rel:
        return True  # the end-to-end test crate and its lab harness
    return "tests" in rel[2:] or path.name in ("tests.rs", "test_support.rs") or "benches" in rel


def source_files():
    for path in sorted((ROOT / "crates").rglob("*.rs")):
        if "target" in path.parts or is_test_path(path):
            continue
        yield path


def strip_code(text: str) -> str:
    """Rust text without comments, string and char literals (their insides emptied), so
    that braces and paths are counted only where they are code. A scanner, not regexes:
    a `//` inside a string (`"//sys/..."`) or a quote inside a comment must not shift
    what counts as code."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and not re.match(r"\w", text[i - 1] if i else " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^'\\])'", text[i:]):
            m = re.match(r"'(\\.[^']*|[^'\\])'", text[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_tests_and_comments(text: str) -> str:
    """Drops comments, literals and inline `#[cfg(test)] mod … { … }` blocks."""
    text = strip_code(text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def oversized_files():
    bad = []
    for path in source_files():
        n = sum(1 for _ in path.open(encoding="utf-8"))
        if n > MAX_FILE_LINES:
            bad.append((path.relative_to(ROOT), n))
    return bad


def module_of(src: Path, path: Path):
    rel = path.relative_to(src).with_suffix("").parts
    if rel in (("lib",), ("main",)):
        return ()
    if rel[-1] == "mod":
        rel = rel[:-1]
    return tuple(rel)


def expand_use(tree: str):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [re.sub(r"\bas\w+$", "", tree)]
    prefix, inner = tree[:brace], tree[brace + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        out.extend(prefix + q for q in expand_use(p))
    return out


def absolute(module, path: str):
    segs = path.split("::")
    if segs[0] == "crate":
        return tuple(segs[1:])
    base = list(module)
    while segs and segs[0] in ("self", "super"):
        if segs[0] == "super":
            base = base[:-1]
        segs = segs[1:]
    return tuple(base + segs)


class Crate:
    def __init__(self, src: Path):
        self.files = {}
        for path in sorted(src.rglob("*.rs")):
            if is_test_path(path) or "bin" in path.relative_to(src).parts:
                continue
            self.files[module_of(src, path)] = strip_tests_and_comments(path.read_text())
        self.reexports = {m: self._reexports(t) for m, t in self.files.items()}

    def _reexports(self, text):
        names = {}
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for p in expand_use(m.group(1)):
                names[p.split("::")[-1]] = p
        return names

    def resolve(self, module, path, depth=0):
        full = absolute(module, path)
        for cut in range(len(full), -1, -1):
            if full[:cut] in self.files:
                target, rest = full[:cut], full[cut:]
                if rest and depth < 8 and rest[0] in self.reexports[target]:
                    return self.resolve(target, self.reexports[target][rest[0]], depth + 1)
                return target
        return None

    def edges(self):
        graph = {m: set() for m in self.files}
        for module, text in self.files.items():
            plain = re.sub(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]+;", "", text)
            paths = []
            for m in re.finditer(r"\buse\s+([^;]+);", plain):
                paths.extend(p for p in expand_use(m.group(1)) if re.match(r"(crate|super|self)::", p))
            plain = re.sub(r"\buse\s+[^;]+;", "", plain)
            paths.extend(m.group(0) for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", plain))
            for p in paths:
                target = self.resolve(module, p)
                if target not in (None, (), module) and module != ():
                    graph[module].add(target)
        return graph


def cycles(graph):
    """Tarjan's strongly connected components larger than one module."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

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
            if len(comp) > 1:
                out.append(sorted("::".join(c) for c in comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def import_cycles():
    """Each cycle as its crate, its modules and the arrows between them."""
    found = []
    for src in sorted((ROOT / "crates").glob("*/src")):
        crate = src.parent.name
        if crate == "tests":
            continue
        graph = Crate(src).edges()
        for comp in cycles(graph):
            inside = {tuple(m.split("::")) for m in comp}
            arrows = sorted(
                f"{'::'.join(a)} -> {'::'.join(b)}"
                for a in inside
                for b in graph[a]
                if b in inside
            )
            found.append((crate, comp, arrows))
    return found


def facade():
    methods, files = 0, []
    for path in source_files():
        text = strip_tests_and_comments(path.read_text())
        count = 0
        for m in re.finditer(r"\bimpl(?:<[^>]*>)?\s+(?:crate::)?" + FACADE + r"\s*\{", text):
            depth, j = 1, m.end()
            while j < len(text) and depth:
                ch = text[j]
                if depth == 1 and text.startswith("fn ", j) and re.match(r"\W", text[j - 1]):
                    count += 1
                depth += {"{": 1, "}": -1}.get(ch, 0)
                j += 1
        if count:
            methods += count
            files.append((path.relative_to(ROOT), count))
    return methods, files


def main():
    report = "--report" in sys.argv
    failures = []
    big = oversized_files()
    for path, n in big:
        failures.append(f"{path}: {n} lines (at most {MAX_FILE_LINES} in a non-test file)")
    cyc = import_cycles()
    for crate, comp, arrows in cyc:
        failures.append(
            f"crates/{crate}: import cycle between {', '.join(comp)} ({'; '.join(arrows)})"
        )
    methods, files = facade()
    if methods > MAX_FACADE_METHODS or len(files) > MAX_FACADE_FILES:
        where = ", ".join(f"{p} ({n})" for p, n in files)
        failures.append(
            f"{FACADE}: {methods} methods in {len(files)} files (at most {MAX_FACADE_METHODS} "
            f"in {MAX_FACADE_FILES}): {where}"
        )
    if report:
        print(f"files over {MAX_FILE_LINES} lines: {len(big)}")
        print(f"import cycles: {len(cyc)}")
        print(f"{FACADE}: {methods} methods in {len(files)} files (at most {MAX_FACADE_METHODS} in {MAX_FACADE_FILES})")
    for f in failures:
        print(f"shape: {f}", file=sys.stderr)
    if failures and not report:
        sys.exit(1)
    if not failures:
        print("shape: files, import cycles and the SchedulerCore facade are within bounds")


if __name__ == "__main__":
    main()
