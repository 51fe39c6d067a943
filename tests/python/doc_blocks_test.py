"""Every ```python block of README.md and docs/guide.md runs as written.

Each block must begin with `# <name>.py: ...`; it is written to a scratch
directory and run as the pages say, `python3 -m cohort.run -np 2 <name>.py`
(cohortrun, the ranks under this interpreter), and must exit 0 on both
ranks. A page without Python blocks fails (the test would check nothing).

    doc_blocks_test.py SOURCE_DIR
"""

import os
import re
import subprocess
import sys
import tempfile

SOURCE = sys.argv[1]
failed = False
with tempfile.TemporaryDirectory() as tmp:
    for page in ("README.md", os.path.join("docs", "guide.md")):
        text = open(os.path.join(SOURCE, page), encoding="utf-8").read()
        blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
        if not blocks:
            sys.exit(f"FAIL: {page} has no ```python blocks")
        for i, block in enumerate(blocks, 1):
            m = re.match(r"# ([a-z0-9_]+\.py):", block)
            if not m:
                sys.exit(f"FAIL: {page}: Python block {i} does not begin with '# <name>.py: ...'")
            path = os.path.join(tmp, m.group(1))
            with open(path, "w", encoding="utf-8") as f:
                f.write(block)
            run = subprocess.run(["/usr/bin/python3", "-m", "cohort.run", "-np", "2", m.group(1)], cwd=tmp,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150,
                                 env=dict(os.environ, OMP_NUM_THREADS="1"))
            print(f"---- {page}: {m.group(1)}: exit {run.returncode}\n{run.stdout}", flush=True)
            failed |= run.returncode != 0
sys.exit(1 if failed else 0)
