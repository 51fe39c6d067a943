#!/usr/bin/env python3
"""Fails when a test was skipped or not run, unless the allow-list names it.

ctest counts a skipped test (gtest's GTEST_SKIP, matched by the
SKIP_REGULAR_EXPRESSION gtest_discover_tests sets; a shell test's exit code
77, SKIP_RETURN_CODE) and a test that did not run (a missing executable, a
failed fixture, DISABLED) as not failed, so `make test` passes with them.
CI must not: a test that silently stops running tests nothing.

Usage: check_skips.py JUNIT_XML ALLOWED_SKIPS
  JUNIT_XML      ctest --output-junit's file
  ALLOWED_SKIPS  one test a line: "<ctest name or fnmatch pattern>  # <reason>";
                 the reason is required; blank lines and lines starting with
                 "#" are ignored
Exit status: 0 when every skipped or not-run test is allowed, 1 otherwise
(with the list, each with what the test said), 2 on unreadable input.
"""

import fnmatch
import sys
import xml.etree.ElementTree as ET


def read_allowed(path):
    allowed = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            pattern, _, reason = line.partition("#")
            if not pattern.strip() or not reason.strip():
                sys.exit(f"{path}:{number}: expected '<test name or pattern>  # <reason>', got: {line}")
            allowed.append((pattern.strip(), reason.strip(), number))
    return allowed


def why(case):
    """What a skipped test said about it: the skip message and the lines of its
    output that mention skipping (gtest prints GTEST_SKIP's message there)."""
    parts = []
    skipped = case.find("skipped")
    if skipped is not None and skipped.get("message"):
        parts.append(skipped.get("message"))
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if "Skipped" in line or "SKIPPED:" in line:
            parts.extend(l.strip() for l in lines[i:i + 2] if l.strip())
            break
    return "; ".join(dict.fromkeys(parts)) or "(no reason given)"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        root = ET.parse(sys.argv[1]).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"check_skips.py: cannot read {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    allowed = read_allowed(sys.argv[2])
    used = set()
    refused = []
    cases = root.iter("testcase")
    total = 0
    for case in cases:
        total += 1
        if case.get("status") not in ("notrun", "disabled"):
            continue
        name = case.get("name")
        match = next((a for a in allowed if fnmatch.fnmatchcase(name, a[0])), None)
        if match:
            used.add(match[2])
            print(f"allowed skip: {name} ({match[1]})")
        else:
            refused.append(f"  {name}: {case.get('status')}: {why(case)}")
    if total == 0:
        print(f"check_skips.py: {sys.argv[1]} lists no tests", file=sys.stderr)
        return 1
    if refused:
        print(f"check_skips.py: {len(refused)} of {total} tests were skipped or not run, and "
              f"{sys.argv[2]} does not allow it (make them run, or list each with the reason):", file=sys.stderr)
        print("\n".join(refused), file=sys.stderr)
        return 1
    for pattern, reason, number in allowed:
        if number not in used:
            print(f"note: {sys.argv[2]}:{number}: {pattern} ran here; the entry is for machines that lack it")
    print(f"check_skips.py: all {total} tests ran or were allowed to skip ({len(used)} allow-list entries used)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
