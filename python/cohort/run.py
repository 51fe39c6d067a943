"""python3 -m cohort.run: cohortrun, for Python users (horovodrun's place).

    python3 -m cohort.run -np 2 train.py --epochs 3

Every argument goes to cohortrun (`python3 -m cohort.run --help` prints its
flags). A Python script as the program (the first argument that names an
existing *.py file) runs under this interpreter, so the ranks import the same
torch and cohort as the caller.
"""

import os
import sys


def cohortrun_path():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "bin", "cohortrun")
    if not os.access(path, os.X_OK):
        sys.exit(f"cohort.run: the launcher is missing from the package ({path}): build the target cohort_python "
                 "(make build) or reinstall the package (pip install .)")
    return path


def command(argv):
    args = list(argv)
    for i, arg in enumerate(args):
        if arg.endswith(".py") and os.path.isfile(arg):
            return args[:i] + [sys.executable] + args[i:]
    return args


def main(argv=None):
    args = command(sys.argv[1:] if argv is None else argv)
    path = cohortrun_path()
    os.execv(path, [path] + args)


if __name__ == "__main__":
    main()
