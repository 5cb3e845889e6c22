import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import gpuactor as ga  # noqa: E402


@pytest.fixture
def actor():
    # GPA_DEVICE (set by the test command) picks cpu or sim; 2 host threads.
    with ga.Actor(threads=2) as a:
        yield a
