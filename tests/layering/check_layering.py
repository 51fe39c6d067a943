#!/usr/bin/env python3
"""The layering on paper equals the layering in the code.

Three checks, each a ctest test (label "layering"), each reading what CMake
wrote at configure time (cmake/cohort_helpers.cmake, cohort_write_build_graph)
and the layer table of docs/architecture.md (the pipe table after the
"<!-- layers: ... -->" marker):

  links    every library under cohort/ has a row; it links only libraries
           of a lower layer (programs' libraries never); a row whose LibTorch
           column says "no" reaches no LibTorch target through its links;
           every row names a library its folder's CMakeLists.txt defines
  headers  `cmake --install --component headers` into a scratch prefix
           installs exactly the headers the folders declare
           (cohort_install_headers), and every "cohort/..." an installed
           header includes is installed too
  docs     `cmake --install --component docs` installs README.md, docs/ and
           the folders' READMEs where every relative link to a .md file
           among them resolves

Usage: check_layering.py links|headers|docs SOURCE_DIR BUILD_DIR [CMAKE]
Exit status 0 when the check passes, 1 with one line per finding otherwise.
"""

import os
import re
import subprocess
import sys
import tempfile

# Folders whose libraries are programs' helpers: they may link anything, and
# no library may link them.
PROGRAM_FOLDERS = ("tools", "bench", "examples", "tests", "fuzz", "python")
LIBRARY_TYPES = {"STATIC_LIBRARY", "SHARED_LIBRARY", "MODULE_LIBRARY", "OBJECT_LIBRARY", "INTERFACE_LIBRARY"}
# LibTorch's imported targets (TorchConfig.cmake) and its libraries' names.
LIBTORCH = re.compile(r"^(torch|torch_cpu|torch_cuda|torch_library|c10|c10_cuda)$|/lib(torch|c10)[^/]*\.so")
MARKER = "<!-- layers:"


class Row:
    def __init__(self, layer, folder, library, libtorch, line):
        self.layer, self.folder, self.library, self.libtorch, self.line = layer, folder, library, libtorch, line


def read_layer_table(source):
    """The rows of docs/architecture.md's layer table, by library."""
    path = os.path.join(source, "docs", "architecture.md")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith(MARKER)), None)
    if start is None:
        sys.exit(f"{path}: no layer table (a line starting with '{MARKER}' followed by a pipe table)")
    rows = {}
    i = start + 1
    header = [c.strip().lower() for c in lines[i].strip().strip("|").split("|")]
    if header != ["layer", "folder", "library", "libtorch"]:
        sys.exit(f"{path}:{i + 1}: the layer table's header must be | layer | folder | library | LibTorch |")
    i += 2  # the header and its |---| line
    while i < len(lines) and lines[i].startswith("|"):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].isdigit() or cells[3] not in ("yes", "no"):
            sys.exit(f"{path}:{i + 1}: a layer row is | <number> | <folder> | <library> | yes or no |: {lines[i]}")
        row = Row(int(cells[0]), cells[1], cells[2], cells[3] == "yes", i + 1)
        if row.library in rows:
            sys.exit(f"{path}:{i + 1}: {row.library} has two rows")
        rows[row.library] = row
        i += 1
    if not rows:
        sys.exit(f"{path}:{start + 1}: the layer table has no rows")
    return rows


def read_targets(build):
    """name -> (type, source folder, [links]) from links.tsv."""
    path = os.path.join(build, "layering", "links.tsv")
    targets = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            name, kind, folder, links = line.rstrip("\n").split("\t")
            targets[name] = (kind, folder, [link for link in links.split(",") if link])
    return targets


def in_folder(folder, top):
    return folder == top or folder.startswith(top + "/")


def check_links(source, build):
    rows = read_layer_table(source)
    targets = read_targets(build)
    libraries = {name: t for name, t in targets.items() if t[0] in LIBRARY_TYPES}
    findings = []
    doc = "docs/architecture.md"
    for name, (kind, folder, links) in sorted(libraries.items()):
        if not in_folder(folder, "cohort"):
            continue
        row = rows.get(name)
        if row is None:
            findings.append(f"{name} ({folder}) is a library under cohort/ without a row in {doc}'s layer table")
            continue
        if row.folder != folder:
            findings.append(f"{name}: {doc}:{row.line} says folder {row.folder}, but it is defined in {folder}")
        for link in links:
            if link in rows:
                if rows[link].layer >= row.layer:
                    findings.append(f"{name} (layer {row.layer}) links {link} (layer {rows[link].layer}): a library "
                                    f"may link only lower layers ({doc}:{row.line})")
            elif link in libraries:
                findings.append(f"{name} links {link} ({libraries[link][1]}), a program's library, or one without "
                                f"a row in {doc}")
        if not row.libtorch:
            path = reaches_libtorch(name, targets)
            if path:
                findings.append(f"{name} reaches LibTorch ({' -> '.join(path)}), but {doc}:{row.line} says it "
                                f"builds without it")
    # A row for a library this configuration leaves out (LibTorch's without
    # LibTorch, the launcher without COHORT_BUILD_TOOLS) is checked against
    # the source: its folder's CMakeLists.txt must still define it.
    for library, row in sorted(rows.items()):
        if library in libraries:
            continue
        cmakelists = os.path.join(source, row.folder, "CMakeLists.txt")
        text = open(cmakelists, encoding="utf-8").read() if os.path.isfile(cmakelists) else ""
        if not re.search(r"\b" + re.escape(library) + r"\b", text):
            findings.append(f"{doc}:{row.line}: {library} is not defined in {row.folder}/CMakeLists.txt")
    checked = sum(1 for name in libraries if name in rows)
    return findings, f"{checked} libraries in {len(set(r.layer for r in rows.values()))} layers"


def reaches_libtorch(start, targets):
    """The chain of links from `start` to a LibTorch target, or None."""
    seen = {start}
    stack = [[start]]
    while stack:
        path = stack.pop()
        for link in targets.get(path[-1], (None, None, []))[2]:
            if LIBTORCH.search(link):
                return path + [link]
            if link in targets and link not in seen:
                seen.add(link)
                stack.append(path + [link])
    return None


def install_component(cmake, build, component, prefix):
    result = subprocess.run([cmake, "--install", build, "--component", component, "--prefix", prefix],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"cmake --install --component {component} failed:\n{result.stdout}")


def included_cohort_headers(path, has_torch):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not has_torch:
        # <cohort/cohort.h>'s LibTorch block is not compiled without LibTorch.
        text = re.sub(r"^#if defined\(COHORT_HAVE_TORCH\)$.*?^#endif$", "", text, flags=re.S | re.M)
    return re.findall(r'^#include [<"](cohort/[^">]+)[">]', text, flags=re.M)


def check_headers(source, build, cmake):
    with open(os.path.join(build, "layering", "public_headers.txt"), encoding="utf-8") as f:
        declared = {line.strip() for line in f if line.strip()}
    findings = []
    with tempfile.TemporaryDirectory() as prefix:
        install_component(cmake, build, "headers", prefix)
        include = os.path.join(prefix, "include")
        installed = set()
        for folder, _, files in os.walk(include):
            for name in files:
                installed.add(os.path.relpath(os.path.join(folder, name), include))
        for header in sorted(installed - declared):
            findings.append(f"include/{header} is installed but no cohort_install_headers() declares it public")
        for header in sorted(declared - installed):
            findings.append(f"{header} is declared public but was not installed")
        has_torch = os.path.isdir(os.path.join(include, "cohort", "torch"))
        for header in sorted(installed):
            if not header.endswith(".h"):
                continue
            for included in included_cohort_headers(os.path.join(include, header), has_torch):
                if included not in installed:
                    findings.append(f"{header} includes {included}, which is not installed (internal)")
    return findings, f"{len(installed)} headers installed, all declared"


def check_docs(source, build, cmake):
    findings = []
    documents = links = 0
    link = re.compile(r"\]\(([^)\s]+)\)")
    with tempfile.TemporaryDirectory() as prefix:
        install_component(cmake, build, "docs", prefix)
        docs = os.path.join(prefix, "share", "doc", "cohort")
        if not os.path.isfile(os.path.join(docs, "README.md")):
            return ["README.md was not installed under share/doc/cohort"], ""
        for folder, _, names in os.walk(docs):
            for name in names:
                if not name.endswith(".md"):
                    continue
                documents += 1
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for target in link.findall(text):
                    target = target.split("#")[0]
                    if not target.endswith(".md") or re.match(r"^[a-z]+:", target) or target.startswith("/"):
                        continue
                    links += 1
                    if not os.path.isfile(os.path.normpath(os.path.join(folder, target))):
                        findings.append(f"share/doc/cohort/{os.path.relpath(path, docs)} links {target}, which is "
                                        f"not installed")
        for readme in ("docs/architecture.md", "cohort/data/README.md"):
            if not os.path.isfile(os.path.join(docs, readme)):
                findings.append(f"{readme} was not installed under share/doc/cohort")
    return findings, f"{links} links between {documents} installed documents"


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("links", "headers", "docs"):
        sys.exit("usage: check_layering.py links|headers|docs SOURCE_DIR BUILD_DIR [CMAKE]")
    check, source, build = sys.argv[1:4]
    cmake = sys.argv[4] if len(sys.argv) > 4 else "cmake"
    if check == "links":
        findings, summary = check_links(source, build)
    elif check == "headers":
        findings, summary = check_headers(source, build, cmake)
    else:
        findings, summary = check_docs(source, build, cmake)
    for finding in findings:
        print(f"FAIL: {finding}")
    if findings:
        return 1
    print(f"PASS: {check}: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
