#!/usr/bin/env python3
"""The ctest entry of the Python binding: runs the pytest suite with Debian's
interpreter (python3-numpy, python3-pytest); exits 77 (skipped) when they are
missing. In sanitizer builds the test command preloads the sanitizer runtime
(bindings/python/CMakeLists.txt).

usage: run_tests.py --library PATH [pytest args...]
"""
import os
import sys


def main(argv):
    lib, rest = None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--library" and i + 1 < len(argv):
            lib, i = argv[i + 1], i + 2
        else:
            rest.append(argv[i])
            i += 1
    try:
        import numpy  # noqa: F401
        import pytest
    except ImportError as e:
        print("skipped: %s (install python3-numpy and python3-pytest)" % e)
        return 77
    if lib:
        os.environ["GPA_LIBRARY"] = lib
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.dont_write_bytecode = True
    here = os.path.dirname(os.path.abspath(__file__))
    return pytest.main(["-q", "-p", "no:cacheprovider", os.path.join(here, "tests")] + rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
