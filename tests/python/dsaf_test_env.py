"""Shared start-up of the Python tests: import what a test needs, or skip it.

CMake runs the tests with the interpreter it found, which may not be the one apt's numpy and
h5py belong to (/usr/bin/python3), and Debian's Python refuses system-wide pip installs, so
scripts/test.sh puts safetensors and ml_dtypes into a venv in the build folder
($DSAF_PYTHON_VENV, made from /usr/bin/python3 with its packages visible). A test whose
imports fail here runs itself again under that venv's interpreter, once; when that is not
possible either it exits 77, which CTest reports as SKIPPED (SKIP_RETURN_CODE)."""

import importlib
import os
import sys

SKIP = 77


def require(*modules):
    """Imports `modules` (dotted names) and returns them in order, or re-runs / skips."""
    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError as e:
        venv = os.environ.get("DSAF_PYTHON_VENV", "")
        venv_python = os.path.join(venv, "bin", "python3")
        # The venv's python3 is usually a symlink to an interpreter that already failed:
        # what differs is the site-packages it sees, so the guard is a flag, not the path.
        if venv and os.path.exists(venv_python) and not os.environ.get("DSAF_REEXEC"):
            os.environ["DSAF_REEXEC"] = "1"
            os.execv(venv_python, [venv_python] + sys.argv)
        print(f"SKIP: {e.name} is not installed (scripts/test.sh installs it; see tests/python/)")
        sys.exit(SKIP)


def executable(variable):
    """The path in environment variable `variable` (set by CTest), or skip."""
    path = os.environ.get(variable)
    if not path:
        print(f"SKIP: {variable} is not set (CTest sets it to the built executable)")
        sys.exit(SKIP)
    return path
