"""Builds the Python package cohort with CMake (pyproject.toml's backend,
setuptools, calls this).

The extension cohort._C and the launcher are CMake targets (python/,
cohort/launcher/); this runs CMake and puts into the package what they
need: cohort/_C*.so, cohort/bin/cohortrun and, in cohort/lib, the cohort
shared libraries the two link; each copy's RUNPATH is set to find the
others through $ORIGIN, so the package does not need the build directory.

Variables:
  COHORT_BUILD_DIR  an existing CMake build directory of this checkout to
                    build in and take the files from (`make build` made
                    one: pip install then compiles nothing new); default: a
                    fresh Release build under setuptools' temporary
                    directory, without the tests
  COHORT_BUILD_JOBS parallel compile jobs (default: the number of CPUs)
"""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("COHORT_BUILD_DIR") or os.path.join(os.path.abspath(self.build_temp), "cmake")
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *generator, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DCOHORT_BUILD_TESTS=OFF", "-DCOHORT_WITH_PYTHON=ON",
                                   f"-DPython3_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("COHORT_BUILD_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "cohort_python", "cohortrun", "-j", jobs])

        package = os.path.join(build_dir, "python", "cohort")
        built = glob.glob(os.path.join(package, "_C.*.so"))
        if len(built) != 1:
            sys.exit(f"setup.py: expected one cohort/_C*.so in {package}, found {built}")
        target = self.get_ext_fullpath(ext.name)
        out = os.path.dirname(target)
        os.makedirs(os.path.join(out, "bin"), exist_ok=True)
        os.makedirs(os.path.join(out, "lib"), exist_ok=True)
        launcher = os.path.realpath(os.path.join(package, "bin", "cohortrun"))
        copies = [(built[0], target, "$ORIGIN/lib"),
                  (launcher, os.path.join(out, "bin", "cohortrun"), "$ORIGIN/../lib")]
        copies += [(library, os.path.join(out, "lib", os.path.basename(library)), "$ORIGIN")
                   for library in cohort_libraries([built[0], launcher], build_dir)]
        for source, destination, runpath in copies:
            shutil.copy2(source, destination)
            subprocess.check_call(["cmake", f"-DFILE={destination}", f"-DRPATH={runpath}", "-P",
                                   os.path.join(ROOT, "python", "set_rpath.cmake")])


def cohort_libraries(binaries, build_dir):
    """The shared libraries of the build directory that `binaries` load."""
    found = set()
    for binary in binaries:
        for line in subprocess.check_output(["ldd", binary], text=True).splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and parts[1].strip().startswith(os.path.realpath(build_dir)):
                found.add(parts[1].split("(")[0].strip())
    return sorted(found)


# setuptools' own staging goes under build/ (ignored by git) in a folder of
# its own, not beside CMake's files.
setup(ext_modules=[Extension("cohort._C", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build", "setuptools")}})
