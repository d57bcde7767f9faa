#!/usr/bin/env python3
"""scripts/check_kernel_stack.py on saved `cuobjdump -res-usage` listings: the listing of
the key kernels built before the block-tree sum was fixed (tests/python/data/: the vllm-v32
producer kernel with a 64-byte frame) fails on that kernel alone; limits, names that match
nothing and bad input are reported as documented. Needs c++filt (binutils), else SKIPPED.
Standard library only; runs under pytest or alone."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "check_kernel_stack.py")
LOCAL_ARRAY = os.path.join(HERE, "data", "key_store_res_usage_block_tree_in_local.txt")

if shutil.which("c++filt") is None:  # the checker demangles with it
    if __name__ == "__main__":
        print("SKIP: no c++filt")
        sys.exit(77)
    raise unittest.SkipTest("no c++filt")

KERNEL = "dsaf::dev::key_kernel::key_store_kernel<(dsaf::ref::StorageFormat)"
PRODUCER = "dsaf::dev::key_kernel::key_store_producer_kernel<(dsaf::ref::StorageFormat)"


def run(*args):
    r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def limits(*pairs):
    return [a for name, limit in pairs for a in ("--kernel", f"{name}={limit}")]


def test_the_local_array_is_caught_and_nothing_else():
    code, out, err = run("--res-usage", LOCAL_ARRAY, *limits(
        (f"{KERNEL}3, 1, 0>", 0), (f"{KERNEL}2, 2, 1>", 0), (f"{KERNEL}4, 1, 2>", 0), (f"{PRODUCER}3, 1, 3>", 0),
        (f"{PRODUCER}2, 1, 4>", 0), (f"{PRODUCER}3, 1, 5>", 0), (f"{PRODUCER}3, 1, 6>", 0),
        (f"{PRODUCER}5, 1, 7>", 8)))
    assert code == 1, (code, out, err)
    flagged = [line for line in out.splitlines() if "bytes of stack frame" in line]
    assert flagged == [f"void {PRODUCER}3, 1, 6>(dsaf::dev::KeyStoreArgs, dsaf::dev::KeyStoreSchedule): "
                       "64 bytes of stack frame, at most 0 allowed"], out


def test_a_limit_is_inclusive():
    code, out, _ = run("--res-usage", LOCAL_ARRAY, *limits((f"{PRODUCER}5, 1, 7>", 8)))
    assert code == 0, out
    code, out, _ = run("--res-usage", LOCAL_ARRAY, *limits((f"{PRODUCER}5, 1, 7>", 7)))
    assert code == 1 and "8 bytes of stack frame, at most 7" in out, out


def test_a_name_matches_every_function_containing_it():
    # "1, -1>" is the generic fp8 kernel (64 bytes before the fix); "3, 1, " matches it and
    # the pinned fp8 paths 0, 3, 5 and 6 at one lane.
    code, out, _ = run("--res-usage", LOCAL_ARRAY, *limits((f"{KERNEL}3, 1, ", 0)))
    assert code == 1 and out.count("bytes of stack frame") == 1 and "3, 1, -1>" in out, out
    code, out, _ = run("--res-usage", LOCAL_ARRAY, *limits(("(dsaf::ref::StorageFormat)3, 1, ", 0)))
    assert code == 1 and out.count("bytes of stack frame") == 2, out


def test_a_name_that_matches_nothing_is_an_error():
    code, _, err = run("--res-usage", LOCAL_ARRAY, *limits((f"{KERNEL}3, 1, 9>", 0), (f"{KERNEL}3, 1, 0>", 0)))
    assert code == 2 and "no function matches" in err and "3, 1, 9>" in err, (code, err)


def test_every_listing_of_a_function_is_checked():
    # The same kernel in two objects (or for two architectures): the entry with the frame
    # counts whichever comes last.
    with open(LOCAL_ARRAY, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "two_objects.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + text.replace("STACK:64", "STACK:0"))
        code, out, _ = run("--res-usage", path, *limits((f"{PRODUCER}3, 1, 6>", 0)))
    assert code == 1 and out.count("bytes of stack frame") == 1, out


def test_bad_input():
    assert run("--res-usage", LOCAL_ARRAY)[0] == 2  # no --kernel
    assert run("--res-usage", LOCAL_ARRAY, "--kernel", "name-without-limit")[0] == 2
    assert run("--res-usage", LOCAL_ARRAY, "--kernel", "name=-1")[0] == 2
    code, _, err = run("--res-usage", os.devnull, *limits(("k", 0)))
    assert code == 2 and "no functions" in err, err
    code, _, err = run("--res-usage", os.path.join(HERE, "data", "no_such_listing.txt"), *limits(("k", 0)))
    assert code == 2 and "cannot read" in err, err


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print(f"{name}: ok")
