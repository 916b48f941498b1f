#!/usr/bin/env python3
"""usage: layering.py SOURCE_DIR [--self-check]

The layering rule, checked on the code:
  1. every #include "weft/<layer>/..." in src/weft/<L>/ names a layer that docs/architecture.md
     ("Which layer may include which") allows L to include;
  2. CMakeLists.txt's weft_layer(L ...) links exactly the layers L includes: PUBLIC_LAYERS
     those its headers include, PRIVATE_LAYERS those only its sources include;
  3. train/ reaches communication only through parallel/: its code names nothing of comm::,
     calls no collective or point-to-point operation itself, and asks the strategies
     questions (Strategies' typed answers) instead of looking one up by type (find<...>).
--self-check copies the tree, adds a forbidden include (tensor including comm) and a
collective call in train/, and requires the check to fail on both, naming the files.
"""
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile


def allowed_table(root):
    text = (root / "docs/architecture.md").read_text()
    section = text.split("## Which layer may include which", 1)[1]
    table = {}
    for m in re.finditer(r"^\| `([a-z]+)` \| ([^|]*) \|$", section, re.M):
        table[m.group(1)] = set(re.findall(r"`([a-z]+)`", m.group(2)))
    return table


def cmake_layers(root):
    text = (root / "CMakeLists.txt").read_text()
    layers = {}
    for m in re.finditer(r"weft_layer\((\w+)(.*?)\)\n", text, re.S):
        body = m.group(2)
        def words(key):
            k = re.search(key + r"\s+([^\n]*)", body)
            return set(k.group(1).split()) if k else set()
        layers[m.group(1)] = (words("PUBLIC_LAYERS"), words("PRIVATE_LAYERS"))
    return layers


def includes(root, layer):
    public, private, where = set(), set(), {}
    for f in sorted((root / "src/weft" / layer).iterdir()):
        if f.suffix not in (".h", ".cpp"):  # e.g. report/assets/: the page's script and style
            continue
        for other in re.findall(r'#include "weft/([a-z]+)/', f.read_text()):
            if other == layer:
                continue
            (public if f.suffix == ".h" else private).add(other)
            where.setdefault(other, f.relative_to(root))
    return public, private - public, where


# Rule 3: what train/'s code may not say (comments aside).
TRAIN_FORBIDDEN = [
    (re.compile(r"\bcomm::"), "names comm::"),
    (re.compile(r"(->|\.)(allreduce|allgather|broadcast|reduce_scatter|alltoall|barrier|send|recv|isend|irecv|"
                r"new_group)\(|->(gather|scatter|reduce)\("), "calls a collective"),
    (re.compile(r"\bfind<"), "looks a strategy up by type"),
]


def code_of(text):
    """The text without // comments and string literals."""
    text = re.sub(r'"(\\.|[^"\\])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def train_calls(root):
    problems = []
    for f in sorted((root / "src/weft/train").iterdir()):
        if f.suffix not in (".h", ".cpp"):
            continue
        for n, line in enumerate(code_of(f.read_text()).splitlines(), 1):
            for pattern, what in TRAIN_FORBIDDEN:
                if pattern.search(line):
                    problems.append(f"{f.relative_to(root)}:{n} {what}: {line.strip()}")
    return problems


def check(root):
    problems = train_calls(root)
    table = allowed_table(root)
    cmake = cmake_layers(root)
    for d in sorted((root / "src/weft").iterdir()):
        layer = d.name
        if layer not in table:
            problems.append(f"layer '{layer}' is missing from docs/architecture.md's table")
            continue
        public, private, where = includes(root, layer)
        for other in sorted(public | private):
            if other not in table[layer]:
                problems.append(f"{where[other]} includes weft/{other}/, which layer '{layer}' may not use")
        if layer == "cli":
            continue  # the executable, not a layer library
        if layer not in cmake:
            problems.append(f"CMakeLists.txt has no weft_layer({layer} ...)")
            continue
        want_pub, want_priv = cmake[layer]
        if want_pub != public:
            problems.append(f"weft_layer({layer}) PUBLIC_LAYERS {sorted(want_pub)}, its headers include {sorted(public)}")
        if want_priv != private:
            problems.append(f"weft_layer({layer}) PRIVATE_LAYERS {sorted(want_priv)}, only its sources include {sorted(private)}")
    return problems


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    if "--self-check" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / "tree"
            shutil.copytree(root / "src", copy / "src")
            shutil.copytree(root / "docs", copy / "docs")
            shutil.copy(root / "CMakeLists.txt", copy)
            bad = copy / "src/weft/tensor/ops.cpp"
            bad.write_text('#include "weft/comm/communicator.h"\n' + bad.read_text())
            call = copy / "src/weft/train/loop.cpp"
            call.write_text(call.read_text() + "\nvoid f(weft::parallel::Job& j) { j.world->barrier(); }\n")
            problems = check(copy)
            print("\n".join(problems))
            if not [p for p in problems if "src/weft/tensor/ops.cpp includes weft/comm/" in p]:
                print("FAIL: a forbidden include (tensor -> comm) went unnoticed")
                return 1
            if not [p for p in problems if "src/weft/train/loop.cpp" in p and "calls a collective" in p]:
                print("FAIL: a collective called in train/ went unnoticed")
                return 1
            print("ok: the forbidden include and the collective call in train/ are caught")
            return 0
    problems = check(root)
    for p in problems:
        print("layering:", p)
    if problems:
        return 1
    print("ok: every layer includes only what docs/architecture.md allows, and links exactly that")
    return 0


if __name__ == "__main__":
    sys.exit(main())
