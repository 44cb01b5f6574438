#!/usr/bin/env python3
"""Checks the layout of the packages' sources and lists what breaks it:

- an import cycle between the top-level modules of a package (`src/storage/` using
  `crate::study` while `src/study/` uses `crate::storage`), and between the files of the
  module folders in FILE_LEVEL;
- a file with more than MAX_CODE_LINES lines of non-test code.

A module depends on another where its non-test code names it: a `use` line or a path in the
code starting with `crate::`, `super::`, `self::` or the package's own library name (what
the binary's modules use). Test code is left out: `#[cfg(test)]` items, and files that are
all tests (`tests.rs`, `tests/`). Exits 1 and lists the offenders when there are any.

Run from anywhere: `python3 scripts/check-layout.py` (`.ci/run` runs it).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (the package's source folder, the name its binary's modules call its library by)
PACKAGES = [("src", "hptune"), ("gp/src", "hptune_gp"), ("trainer/src", "hptune_trainer"),
            ("http-serve/src", "hptune_http"), ("memory-size/src", "hptune_memory_size")]
# Module folders whose files must not import each other in a cycle, as well.
FILE_LEVEL = ["gp/src", "src/sampler/bayes", "src/study/space"]
MAX_CODE_LINES = 600

STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'')
PATH = re.compile(r"\b(crate|super|self|{lib})((?:::\w+)+)")
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]*);", re.S | re.M)


def code_lines(text):
    """The lines of `text` outside `#[cfg(test)]` items, comments blanked, each with its
    number; string contents blanked so that their braces do not count."""
    lines, kept, skipping, depth, opened = text.split("\n"), [], False, 0, False
    for number, raw in enumerate(lines, 1):
        line = STRING.sub('""', raw).split("//")[0]
        stripped = line.strip()
        if not skipping and stripped == "#[cfg(test)]":
            skipping, depth, opened = True, 0, False
            continue
        if skipping:
            depth += line.count("{") - line.count("}")
            opened = opened or "{" in line
            # An item without a body (`mod tests;`) or whose braces have closed.
            if (not opened and stripped.endswith(";")) or (opened and depth <= 0):
                skipping = False
            continue
        kept.append((number, line))
    return kept


def count_code(text):
    """Lines of non-test code, its comments and blank lines included."""
    return len(code_lines(text))


def module_path(src, file):
    """`src/a/b.rs` and `src/a/b/mod.rs` -> ["a", "b"]; a crate root -> []."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
        parts.pop()
    return parts


def is_test_file(src, file):
    parts = file.relative_to(src).parts
    return file.name == "tests.rs" or "tests" in parts[:-1]


def expand(tree):
    """The paths of a use tree: `a::{b, c::{d, e}}` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    prefix, inner = tree[:brace], tree[brace + 1:tree.rfind("}")]
    items, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            items.append(inner[start:i])
            start = i + 1
    items.append(inner[start:])
    return [p for item in items if item for p in expand(prefix + item)]


def resolve(path, here, children):
    """The absolute module path `path` names from a file of module `here`; None for an
    outside crate or a name that is not a module path."""
    segments = [s for s in path.split("::") if s != "*"]
    head = segments[0]
    if head == "crate":
        return [s for s in segments[1:] if s != "self"]
    if head in ("super", "self"):
        base = list(here)
        while segments and segments[0] in ("super", "self"):
            if segments.pop(0) == "super":
                base = base[:-1]
        return base + [s for s in segments if s != "self"]
    if head in children:  # a child module named without `self::`
        return list(here) + [s for s in segments if s != "self"]
    return None


def references(src, file, lib):
    """(absolute module path, line number) of each module path the file's code names."""
    here = module_path(src, file)
    folder = file.parent if file.name in ("mod.rs", "lib.rs", "main.rs") \
        else file.with_suffix("")
    children = {p.stem for p in folder.glob("*.rs")} | \
        {p.name for p in folder.iterdir() if p.is_dir()} if folder.is_dir() else set()
    kept = code_lines(file.read_text())
    code = "\n".join(line for _, line in kept)
    numbers = [number for number, _ in kept]
    found = []
    for match in USE.finditer(code):
        line = numbers[code[:match.start(1)].count("\n")]
        for path in expand(match.group(1)):
            if (target := resolve(path.replace(lib, "crate", 1) if path.startswith(lib + "::")
                                  else path, here, children)) is not None:
                found.append((target, line))
    for match in re.finditer(PATH.pattern.replace("{lib}", lib), code):
        line = numbers[code[:match.start()].count("\n")]
        head = "crate" if match.group(1) == lib else match.group(1)
        if (target := resolve(head + match.group(2), here, set())) is not None:
            found.append((target, line))
    return here, found


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = sorted({a for a, _ in edges} | {b for _, b in edges})
    graph = {n: sorted({b for a, b in edges if a == n}) for n in nodes}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for n in nodes:
        if n not in index:
            visit(n)
    return out


def child_modules(src, folder_path):
    """The names of the modules directly inside the module at `folder_path`."""
    folder = src.joinpath(*folder_path)
    return {p.stem for p in folder.glob("*.rs")} | {p.name for p in folder.iterdir()
                                                     if p.is_dir()}


def check_level(src, name, folder_path, files, offenders):
    """Cycles between the children of the module at `folder_path` (its own file counting as
    the node `mod.rs`)."""
    depth = len(folder_path)
    children = child_modules(src, folder_path)
    edges = {}
    for file, here, found in files:
        if here[:depth] != folder_path:
            continue
        source = here[depth] if len(here) > depth else "mod.rs"
        for target, line in found:
            if target[:depth] != folder_path:
                continue
            node = target[depth] if len(target) > depth and target[depth] in children \
                else "mod.rs"
            if node != source and not (depth == 0 and "mod.rs" in (node, source)):
                edges.setdefault((source, node), []).append(f"{file}:{line}")
    for component in cycles(edges):
        offenders.append(f"import cycle between the modules of {name}: "
                         + " <-> ".join(component))
        for (a, b), places in sorted(edges.items()):
            if a in component and b in component:
                offenders.append(f"    {a} -> {b}: {', '.join(sorted(set(places))[:4])}")


def main():
    offenders = []
    for src_name, lib in PACKAGES:
        src = ROOT / src_name
        files = []
        for file in sorted(src.rglob("*.rs")):
            relative = file.relative_to(ROOT)
            if is_test_file(src, file):
                continue
            text = file.read_text()
            if (lines := count_code(text)) > MAX_CODE_LINES:
                offenders.append(f"{relative}: {lines} lines of non-test code "
                                 f"(at most {MAX_CODE_LINES})")
            here, found = references(src, file, lib)
            files.append((relative, here, found))
        check_level(src, src_name, [], files, offenders)
        for folder in FILE_LEVEL:
            if not (ROOT / folder).is_dir():
                offenders.append(f"{folder}: no such module folder (FILE_LEVEL)")
            elif folder.startswith(src_name + "/"):
                path = folder[len(src_name) + 1:].split("/")
                check_level(src, folder, path, files, offenders)
    for line in offenders:
        print(line)
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
