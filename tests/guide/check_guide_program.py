#!/usr/bin/env python3
"""Runs one of docs/guide.md's programs the way the guide says and checks it.

Usage: check_guide_program.py COHORTRUN PROGRAM SOURCE_DIR COHORT_DATA

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
- guide_any_model: the same model class under one_device, mirrored,
  multi_worker and zero stage 3 prints the same losses, and the private
  run takes the per-sample kernels of all 4 wrapped layers.
- guide_errors: the sum of rank + 1 over 2 ranks.
- readme_quick_start: on 2 ranks the losses it prints alone.
- readme_fit: one_device and multi_worker on 2 ranks train 3 epochs, and
  their last losses agree.
- readme_records: on 2 ranks over shards that cohort-data converts from
  Debian's Fashion-MNIST, one epoch whose accuracy beats chance.
- readme_core: the average of rank + 1 over 2 ranks.
- any other: on 2 ranks, three epochs whose loss falls.
Every program runs in a scratch directory (the README's write "backup/").
"""
import os
import re
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")


def fail(message, output=""):
    print(output)
    print("FAIL: " + message)
    sys.exit(1)


def run(command):
    p = subprocess.run(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=100,
                       cwd=SCRATCH)
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


def same_losses_under_every_strategy(cohortrun, program):
    """Checks that mirrored, multi_worker and zero stage 3 print one device's
    losses (the same global batches); returns a private run's output."""
    reference = losses(run([program, "one_device"]), "one_device")
    same_losses(reference, losses(run([program, "mirrored:replicas=2"]), "mirrored"), "mirrored")
    for spec in ("multi_worker", "zero:stage=3"):
        same_losses(reference, losses(run([cohortrun, "-np", "2", program, spec]), spec), spec)
    private = run([cohortrun, "-np", "2", program, "multi_worker+privacy:epsilon=8"])
    losses(private, "multi_worker+privacy")
    return private


def code_lines(path):
    """(code, line) for each non-blank line: the code without its comment, spaces squeezed."""
    lines = []
    for line in open(path, encoding="utf-8"):
        code = re.sub(r"\s+", " ", line.split("//")[0]).strip()
        lines.append((code, line.rstrip("\n")))
    return lines


def marked(line):
    return re.search(r"// cohort\b", line) is not None


FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
SCRATCH = None


def last_logged(output, key):
    values = re.findall(key + r" ([0-9.]+)", output)
    if not values:
        fail(f"no '{key}' printed", output)
    return float(values[-1])


def main():
    global SCRATCH
    with tempfile.TemporaryDirectory(prefix="cohort_doc_") as scratch:
        SCRATCH = scratch
        check(*sys.argv[1:5])


def check(cohortrun, program, sources, cohort_data):
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
        private = same_losses_under_every_strategy(cohortrun, program)
        for expected in ("+privacy:", "noise for epsilon 8", "per-sample gradients by kernels"):
            if expected not in private:
                fail(f"the private run's first line lacks '{expected}'", private)
    elif name == "guide_any_model":
        # The same class under every strategy: the same losses (one device's
        # global batches), and the private run takes every layer's kernel.
        private = same_losses_under_every_strategy(cohortrun, program)
        if "per-sample gradients by kernels: 4 layers" not in private:
            fail("the private run's first line lacks 'per-sample gradients by kernels: 4 layers'", private)
    elif name == "guide_errors":
        out = run([cohortrun, "-np", "2", program])
        if not re.search(r"sum 3$", out, re.M):
            fail("expected 'sum 3'", out)
    elif name == "readme_quick_start":
        alone = losses(run([program]), name + " alone")
        same_losses(alone, losses(run([cohortrun, "-np", "2", program]), name + " on 2 ranks"), name + " on 2 ranks")
    elif name == "readme_fit":
        one = run([program, "one_device"])
        two = run([cohortrun, "-np", "2", program, "multi_worker"])
        for out, what in ((one, "one_device"), (two, "multi_worker")):
            if "epoch 3/3" not in out:
                fail(f"{what}: no third epoch", out)
        if abs(last_logged(one, "loss") - last_logged(two, "loss")) > 2e-3:
            fail("one_device and multi_worker end with different losses", one + two)
    elif name == "readme_records":
        shards = os.path.join(SCRATCH, "shards")
        run([cohort_data, "convert", "idx", "--images", FASHION_MNIST + "/t10k-images-idx3-ubyte.gz",
             "--labels", FASHION_MNIST + "/t10k-labels-idx1-ubyte.gz", "--out", shards, "--prefix", "train",
             "--shards", "4"])
        out = run([cohortrun, "-np", "2", program, shards])
        if "2 replicas in 2 processes" not in out:
            fail("expected fit()'s line for 2 processes", out)
        # Ten classes: chance is 10%; one epoch of 10000 images gets far above it.
        if not last_logged(out, "accuracy") > 0.5:
            fail("one epoch did not learn", out)
    elif name == "readme_core":
        out = run([cohortrun, "-np", "2", program])
        if not re.search(r"average 1.50$", out, re.M):
            fail("expected 'average 1.50'", out)
    else:
        losses(run([cohortrun, "-np", "2", program]), name)


if __name__ == "__main__":
    main()
