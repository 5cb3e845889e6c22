#!/usr/bin/env python3
"""The ctest python_package: pip-installs bindings/python into a fresh
virtual environment and runs the Python suite from outside the source tree.

The venv is made from Debian's interpreter with its site packages
(python3-numpy, python3-pytest, python3-torch when installed), so pip
fetches only the build backend (scikit-build-core) from PyPI. GPA_PREFIX
names the build tree: the package records its library instead of building
the C library a second time (pyproject.toml). Exits 77 (skipped) without
numpy/pytest or when PyPI cannot be reached.

usage: check_pip.py --prefix BUILD_DIR [pytest args...]
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
OFFLINE = re.compile(r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
                     r"No matching distribution found for scikit.build.core|ConnectTimeout|ProxyError")


def main(argv):
    if len(argv) < 2 or argv[0] != "--prefix":
        print(__doc__)
        return 2
    prefix, rest = os.path.abspath(argv[1]), argv[2:]
    try:
        import numpy  # noqa: F401
        import pytest  # noqa: F401
    except ImportError as e:
        print("skipped: %s (install python3-numpy and python3-pytest)" % e)
        return 77
    with tempfile.TemporaryDirectory(prefix="gpa-pip.") as tmp:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        py = os.path.join(venv, "bin", "python")
        env = dict(os.environ, GPA_PREFIX=prefix, PIP_DISABLE_PIP_VERSION_CHECK="1",
                   PYTHONDONTWRITEBYTECODE="1")
        env.pop("GPA_LIBRARY", None)  # the installed package must find its library itself
        # pip copies the source (its build works on a temporary copy), so the
        # tree stays clean; build isolation fetches scikit-build-core.
        r = subprocess.run([py, "-m", "pip", "install", "--no-input", "--quiet", PKG], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(r.stdout)
            if OFFLINE.search(r.stdout):
                print("skipped: PyPI is not reachable (pip could not fetch the build backend)")
                return 77
            return 1
        # The suite, the example it runs and the example's text, copied away
        # from the sources in the same layout: only the installed package
        # can satisfy `import gpuactor` there.
        top = os.path.join(tmp, "run")
        run = os.path.join(top, "bindings", "python")
        shutil.copytree(os.path.join(PKG, "tests"), os.path.join(run, "tests"))
        shutil.copytree(os.path.join(PKG, "examples"), os.path.join(run, "examples"))
        shutil.copytree(os.path.join(PKG, "..", "..", "examples", "data"), os.path.join(top, "examples", "data"))
        env["GPA_EXPECT_INSTALLED"] = venv
        check = ("import gpuactor, importlib.metadata as m, sys; "
                 "assert gpuactor.__file__.startswith(sys.argv[1]), gpuactor.__file__; "
                 "assert m.version('gpuactor') == gpuactor.version(), (m.version('gpuactor'), gpuactor.version()); "
                 "print('installed gpuactor', gpuactor.version(), 'library', gpuactor.library_path)")
        r = subprocess.run([py, "-c", check, venv], env=env, cwd=run)
        if r.returncode != 0:
            return 1
        r = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"] + rest, env=env, cwd=run)
        return r.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
