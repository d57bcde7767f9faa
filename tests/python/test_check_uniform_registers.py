#!/usr/bin/env python3
"""scripts/check_uniform_registers.py on SASS listings: it flags the reads of uniform
registers that ptxas 13.0's miscompile left unwritten (a verbatim excerpt of the key kernel
it broke, tests/python/data/), and it follows what an instruction writes: a bare first
operand, both halves of a 64-bit write, not the bracketed address of a store, never URZ,
behind guard predicates. Standard library only; runs under pytest or alone."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
SCRIPT = os.path.join(ROOT, "scripts", "check_uniform_registers.py")
MISCOMPILED = os.path.join(HERE, "data", "ptxas13_ldgsts_unwritten_uniform.sass")

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import check_uniform_registers as checker  # noqa: E402


def listing(*instructions, function="kernel"):
    lines = [f"\t\tFunction : {function}"]
    lines += [f"        /*{16 * i:04x}*/                   {text} ;   /* 0x0 */" for i, text in enumerate(instructions)]
    return lines


def flagged(lines):
    return [(address, register) for _, address, _, register in checker.unwritten_reads(checker.parse(lines))]


def test_the_miscompiled_copies_are_flagged():
    r = subprocess.run([sys.executable, SCRIPT, "--sass", MISCOMPILED], capture_output=True, text=True)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    with open(MISCOMPILED, encoding="utf-8") as f:
        found = set(flagged(f.read().splitlines()))
    for address in ("1bf0", "1c00"):  # LDGSTS [R3+UR0], desc[UR1]: neither ever written
        assert {(address, "UR0"), (address, "UR1")} <= found, found


def test_a_register_written_anywhere_in_the_function_may_be_read():
    # Order in the listing does not matter (loops branch back): only "never written" does.
    assert flagged(listing("LDG.E R2, desc[UR4][R2.64]", "ULDC.64 UR4, c[0x0][0x208]")) == []


def test_a_64_bit_write_writes_both_registers():
    assert flagged(listing("ULDC.64 UR4, c[0x0][0x208]", "IADD3 R0, R1, UR5, RZ")) == []
    assert flagged(listing("ULDC UR4, c[0x0][0x208]", "IADD3 R0, R1, UR5, RZ")) == [("0010", "UR5")]


def test_a_store_address_is_read_not_written():
    assert flagged(listing("STS [UR8+0x10], R4")) == [("0000", "UR8")]
    assert flagged(listing("UBLKCP.S.G [UR12], [UR10], UR8, desc[UR6]", "R2UR UR12, R3")) == [
        ("0000", "UR6"), ("0000", "UR8"), ("0000", "UR10")]


def test_guards_urz_and_other_functions():
    assert flagged(listing("@!P0 R2UR UR6, R2", "@P1 LDGSTS.E [R7+UR6], desc[UR6][R2.64]")) == []
    assert flagged(listing("UIADD3 UR4, URZ, 0x10, URZ", "MOV R0, UR4")) == []
    # A write in one function does not cover a read in another.
    lines = listing("R2UR UR9, R1", function="a") + listing("MOV R0, UR9", function="b")
    assert [(name, register) for name, _, _, register in checker.unwritten_reads(checker.parse(lines))] == [
        ("b", "UR9")]


def test_no_sass_is_bad_input():
    empty = os.path.join(HERE, "data", "no_such_listing.sass")
    r = subprocess.run([sys.executable, SCRIPT, "--sass", os.devnull], capture_output=True, text=True)
    assert r.returncode == 2 and "no SASS" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([sys.executable, SCRIPT, "--sass", empty], capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read" in r.stderr, (r.returncode, r.stderr)


if __name__ == "__main__":
    for name, test in sorted(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print(f"{name}: ok")
