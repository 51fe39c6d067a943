#!/usr/bin/env python3
"""Writes every ```cpp block of a Markdown file to OUT_DIR/<name>.cc.

Each block must begin with a comment naming its file, `// <name>.cc: ...`, so
that a test can build and run it. Prints the written paths, one per line.
Usage: extract_blocks.py GUIDE.md OUT_DIR

named_blocks() serves other languages too (tests/python/doc_blocks_test.py
takes the ```python blocks, each beginning `# <name>.py: ...`;
run_recipes.py the ```sh blocks that begin `# <name>.sh: ...`, the others
being illustrations).
"""
import os
import re
import sys

# language: (the comment that begins a block, the file extension)
HEADERS = {"cpp": ("//", "cc"), "python": ("#", "py"), "sh": ("#", "sh")}


def named_blocks(path, language, every_block_named=True):
    """[(file name, block text)] of every ```<language> block of the page at `path`;
    with every_block_named=False, of those that begin with a name (the others are skipped)."""
    comment, extension = HEADERS[language]
    text = open(path, encoding="utf-8").read()
    blocks = re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)
    if not blocks:
        sys.exit(f"{path}: no ```{language} blocks")
    named = []
    for i, block in enumerate(blocks, 1):
        m = re.match(rf"{re.escape(comment)} ([a-z0-9_]+\.{extension}):", block)
        if not m and not every_block_named:
            continue
        if not m:
            sys.exit(f"{path}: {language} block {i} does not begin with '{comment} <name>.{extension}: ...'")
        named.append((m.group(1), block))
    return named


def main():
    guide, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    for name, block in named_blocks(guide, "cpp"):
        path = os.path.join(out_dir, name)
        # Rewrite only when changed, so the build does not recompile for nothing.
        if not os.path.exists(path) or open(path, encoding="utf-8").read() != block:
            open(path, "w", encoding="utf-8").write(block)
        print(path)


if __name__ == "__main__":
    main()
