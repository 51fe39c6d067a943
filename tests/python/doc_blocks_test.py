"""Every ```python block of README.md and docs/guide.md runs as written.

Each block must begin with `# <name>.py: ...` (tests/guide/extract_blocks.py
reads them); it is written to a scratch directory and run as the pages say,
`python3 -m cohort.run -np 2 <name>.py` (cohortrun, the ranks under this
interpreter), and must exit 0 on both ranks. A page without Python blocks
fails (the test would check nothing).

    doc_blocks_test.py SOURCE_DIR
"""

import os
import subprocess
import sys
import tempfile

SOURCE = sys.argv[1]
sys.path.insert(0, os.path.join(SOURCE, "tests", "guide"))
from extract_blocks import named_blocks  # noqa: E402

failed = False
with tempfile.TemporaryDirectory() as tmp:
    for page in ("README.md", os.path.join("docs", "guide.md")):
        for name, block in named_blocks(os.path.join(SOURCE, page), "python"):
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(block)
            run = subprocess.run(["/usr/bin/python3", "-m", "cohort.run", "-np", "2", name], cwd=tmp,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150,
                                 env=dict(os.environ, OMP_NUM_THREADS="1"))
            print(f"---- {page}: {name}: exit {run.returncode}\n{run.stdout}", flush=True)
            failed |= run.returncode != 0
sys.exit(1 if failed else 0)
