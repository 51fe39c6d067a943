#!/usr/bin/env python3
"""Writes every ```cpp block of a Markdown file to OUT_DIR/<name>.cc.

Each block must begin with a comment naming its file, `// <name>.cc: ...`, so
that a test can build and run it. Prints the written paths, one per line.
Usage: extract_blocks.py GUIDE.md OUT_DIR
"""
import os
import re
import sys


def main():
    guide, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    text = open(guide, encoding="utf-8").read()
    blocks = re.findall(r"^```cpp\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        sys.exit(f"{guide}: no ```cpp blocks")
    for i, block in enumerate(blocks, 1):
        m = re.match(r"// ([a-z0-9_]+\.cc):", block)
        if not m:
            sys.exit(f"{guide}: C++ block {i} does not begin with '// <name>.cc: ...'")
        path = os.path.join(out_dir, m.group(1))
        # Rewrite only when changed, so the build does not recompile for nothing.
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != block:
            open(path, "w", encoding="utf-8").write(block)
        print(path)


if __name__ == "__main__":
    main()
