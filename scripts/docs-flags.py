#!/usr/bin/env python3
"""The docs' option lists, made from the commands' flag tables.

A page marks a list with
    <!-- weft flags COMMAND -->            (every group of the command's flags)
    <!-- weft flags COMMAND: GROUP -->     (one group)
and ends it with <!-- end of weft flags -->; between them goes what `weft flags COMMAND
[GROUP]` prints. Usage: docs-flags.py WEFT DOCS_DIR [--check]. Without --check the pages are
rewritten; with it, a page whose list differs is named and the exit code is 1.
"""
import pathlib
import re
import subprocess
import sys

MARK = re.compile(r"(<!-- weft flags ([a-z-]+)(?:: ([^>]+?))? -->\n)(.*?)(<!-- end of weft flags -->)", re.S)


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--check"):
        sys.exit("usage: docs-flags.py WEFT DOCS_DIR [--check]")
    weft, docs, check = sys.argv[1], pathlib.Path(sys.argv[2]), len(sys.argv) == 4
    stale, lists = [], 0

    def generated(m):
        nonlocal lists
        lists += 1
        args = [weft, "flags", m.group(2)] + ([m.group(3)] if m.group(3) else [])
        text = subprocess.run(args, check=True, capture_output=True, text=True).stdout
        return m.group(1) + "\n" + text + "\n" + m.group(5)

    for page in sorted(docs.glob("*.md")):
        old = page.read_text()
        new = MARK.sub(generated, old)
        if new != old:
            stale.append(page.name)
            if not check:
                page.write_text(new)
    if lists == 0:
        sys.exit("docs-flags.py: no option lists marked in " + str(docs))
    if check and stale:
        print("option lists that differ from the flag tables (run scripts/docs-flags.py build/weft docs): " + ", ".join(stale))
        sys.exit(1)
    print(f"{lists} option lists {'checked' if check else 'written'}")


main()
