#!/usr/bin/env python3
"""Runs one of docs/guide.md's programs the way the guide says and checks it.

Usage: check_guide_program.py COHORTRUN PROGRAM SOURCE_DIR

- guide_plain: alone; three epochs whose loss falls.
- guide_two_ranks: every line that differs from guide_plain's is marked
  `// cohort` (the guide promises it); on 2 ranks it prints the losses it
  prints alone (the sampler deals each global batch over the ranks), and
  they fall.
- guide_fit: exactly two lines are marked `// cohort`, the strategy's and
  the Model's (the guide's claim); one_device, mirrored, multi_worker and
  zero stage 3 print the same losses (every strategy trains on the same
  global batches); the private run trains, and its first line names the
  calibrated noise and the per-sample gradient path.
- guide_errors: the sum of rank + 1 over 2 ranks.
- any other: on 2 ranks, three epochs whose loss falls.
"""
import os
import re
import subprocess
import sys

ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def fail(message, output=""):
    print(output)
    print("FAIL: " + message)
    sys.exit(1)


def run(command):
    p = subprocess.run(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100)
    if p.returncode != 0:
        fail(" ".join(command) + f" exited {p.returncode}", p.stdout)
    print("$ " + " ".join(command) + "\n" + p.stdout)
    return p.stdout


def losses(output, what):
    found = [(int(e), float(l)) for e, l in re.findall(r"epoch (\d+): loss ([0-9.]+)$", output, re.M)]
    if [e for e, _ in found] != [0, 1, 2]:
        fail(f"{what}: expected epochs 0, 1, 2 printed once (one printing rank)", output)
    values = [l for _, l in found]
    if not values[-1] < values[0]:
        fail(f"{what}: the loss did not fall", output)
    return values


def same_losses(a, b, what):
    # Printed to 4 decimals; summation order differs between splits.
    if any(abs(x - y) > 2e-4 for x, y in zip(a, b)):
        fail(f"{what}: losses {b} differ from {a}")


def code_lines(path):
    """(code, line) for each non-blank line: the code without its comment, spaces squeezed."""
    lines = []
    for line in open(path, encoding="utf-8"):
        code = re.sub(r"\s+", " ", line.split("//")[0]).strip()
        lines.append((code, line.rstrip("\n")))
    return lines


def marked(line):
    return re.search(r"// cohort\b", line) is not None


def main():
    cohortrun, program, sources = sys.argv[1], sys.argv[2], sys.argv[3]
    name = os.path.basename(program)
    source = os.path.join(sources, name + ".cc")
    if name == "guide_plain":
        losses(run([program]), name)
    elif name == "guide_two_ranks":
        plain = {code for code, _ in code_lines(os.path.join(sources, "guide_plain.cc"))}
        unmarked = [line for code, line in code_lines(source)
                    if code and code not in plain and not marked(line) and not line.lstrip().startswith("//")]
        if unmarked:
            fail("lines that differ from guide_plain's without a '// cohort' mark:\n  " + "\n  ".join(unmarked))
        alone = losses(run([program]), name + " alone")
        same_losses(alone, losses(run([cohortrun, "-np", "2", program]), name + " on 2 ranks"), name + " on 2 ranks")
    elif name == "guide_fit":
        marks = [line for _, line in code_lines(source) if marked(line)]
        if len(marks) != 2 or "make_strategy" not in marks[0] or "cohort::Model" not in marks[1]:
            fail("expected exactly two '// cohort' lines, the strategy's and the Model's; got:\n  " + "\n  ".join(marks))
        reference = losses(run([program, "one_device"]), "one_device")
        same_losses(reference, losses(run([program, "mirrored:replicas=2"]), "mirrored"), "mirrored")
        for spec in ("multi_worker", "zero:stage=3"):
            same_losses(reference, losses(run([cohortrun, "-np", "2", program, spec]), spec), spec)
        private = run([cohortrun, "-np", "2", program, "multi_worker+privacy:epsilon=8"])
        losses(private, "multi_worker+privacy")
        for expected in ("+privacy:", "noise for epsilon 8", "per-sample gradients by kernels"):
            if expected not in private:
                fail(f"the private run's first line lacks '{expected}'", private)
    elif name == "guide_errors":
        out = run([cohortrun, "-np", "2", program])
        if not re.search(r"sum 3$", out, re.M):
            fail("expected 'sum 3'", out)
    else:
        losses(run([cohortrun, "-np", "2", program]), name)


if __name__ == "__main__":
    main()
