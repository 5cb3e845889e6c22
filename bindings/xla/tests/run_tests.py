#!/usr/bin/env python3
"""The ctest xla_ffi: the XLA FFI handlers under JAX on the cpu platform.

jax is not a Debian package, so the test keeps a venv in the build tree
(--venv) with jax, jaxlib, numpy and pytest from PyPI, made on the first run
and reused after (as packaging/check_pip.py does, but kept: jaxlib is large).
When the project was configured without XLA's headers, libgpuactor_xla.so is
built here against the venv's jaxlib (bindings/xla/standalone). Exits 77
(skipped) when pip cannot install jax.

usage: run_tests.py --source DIR --build-dir DIR --library libgpuactor.so --venv DIR
                    [--xla-library libgpuactor_xla.so] [--python PY] [pytest args...]
"""
import os
import subprocess
import sys

PACKAGES = ["jax>=0.4.36", "numpy", "pytest"]
ASYNC_TESTS = "attention or gelu or linear or generic or in_place or threads or runtime_error or leave or backward or evicts"


def parse(argv):
    opts, rest, i = {}, [], 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and a[2:].replace("-", "_") in (
                "source", "build_dir", "library", "venv", "xla_library", "python") and i + 1 < len(argv):
            opts[a[2:].replace("-", "_")], i = argv[i + 1], i + 2
        else:
            rest.append(a)
            i += 1
    return opts, rest


def has_jax(py):
    return os.path.exists(py) and subprocess.run(
        [py, "-c", "import jax.ffi, numpy, pytest"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def make_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if has_jax(py):
        return py, None
    print("xla_ffi: installing %s into %s" % (" ".join(PACKAGES), venv), flush=True)
    r = subprocess.run([sys.executable, "-m", "venv", venv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        return None, "cannot make a venv: " + r.stdout
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-input", "--quiet"] + PACKAGES, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or not has_jax(py):
        return None, "pip could not install jax:\n" + r.stdout[-3000:]
    return py, None


def build_standalone(opts, py):
    inc = subprocess.run([py, "-c", "import jax.ffi; print(jax.ffi.include_dir())"], stdout=subprocess.PIPE,
                         text=True, check=True).stdout.strip()
    out = os.path.join(opts["build_dir"], "xla-standalone")
    src = os.path.join(opts["source"], "bindings", "xla", "standalone")
    cfg = ["cmake", "-S", src, "-B", out, "-DGPA_LIBRARY=" + os.path.abspath(opts["library"]),
           "-DGPA_INCLUDE=" + os.path.join(opts["source"], "include"), "-DXLA_FFI_INCLUDE=" + inc]
    for cmd in (cfg, ["cmake", "--build", out, "-j2"]):
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(r.stdout)
            raise SystemExit(1)
    return os.path.join(out, "libgpuactor_xla.so")


def main(argv):
    opts, rest = parse(argv)
    if not all(k in opts for k in ("source", "build_dir", "library", "venv")):
        print(__doc__)
        return 2
    device = os.environ.get("GPA_DEVICE", "")
    if device not in ("", "auto", "cpu"):
        # The handlers are XLA's host ones and always use a cpu actor: the
        # suite's cpu pass has run them already.
        print("skipped: the XLA host handlers do not depend on GPA_DEVICE=%s (the cpu pass runs them)" % device)
        return 77
    py = opts.get("python")
    if not py or not has_jax(py):
        py, why = make_venv(opts["venv"])
        if not py:
            print(why)
            print("skipped: %s" % why.splitlines()[0])
            return 77
    xla_lib = opts.get("xla_library") or build_standalone(opts, py)
    env = dict(os.environ, GPA_LIBRARY=os.path.abspath(opts["library"]), GPA_XLA_LIBRARY=os.path.abspath(xla_lib),
               PYTHONPATH=os.path.join(opts["source"], "bindings", "python"), PYTHONDONTWRITEBYTECODE="1",
               # The handlers here are XLA's host ones: the actor must be the host's
               # whatever device the rest of the suite runs on.
               GPA_DEVICE="cpu", JAX_PLATFORMS="cpu")
    here = os.path.dirname(os.path.abspath(__file__))
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    rc = subprocess.run(pytest + [here] + rest, env=env).returncode
    if rc != 0 or rest:
        return rc
    # The op handlers again through XLA's asynchronous FFI (futures), and the
    # feed calls again without it (the blocking path, which XLAs without
    # futures take; the first run used futures).
    print("xla_ffi: the op handlers with GPA_XLA_ASYNC=1", flush=True)
    rc = subprocess.run(pytest + [os.path.join(here, "test_xla.py"), "-k", ASYNC_TESTS],
                        env=dict(env, GPA_XLA_ASYNC="1")).returncode
    if rc != 0:
        return rc
    print("xla_ffi: the feed calls with GPA_XLA_FEED_ASYNC=0", flush=True)
    return subprocess.run(pytest + [os.path.join(here, "test_feed.py")],
                          env=dict(env, GPA_XLA_FEED_ASYNC="0")).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
