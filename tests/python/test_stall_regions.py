#!/usr/bin/env python3
"""bench/stall_regions.py on synthetic Nsight Compute source pages: each window's sample and
instruction shares are its rows' sums over the kernel's, its reasons are ranked by their
samples, windows under the threshold are left out, gzip is read like plain text, and a file
that is not a source page is bad input (exit 2). Standard library only."""

import gzip
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "stall_regions.py")
HEADER = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Instructions Executed"',
          '"stall_long_sb"', '"stall_selected"', '"stall_long_sb (Not Issued)"']


def page(rows):
    """A source-page CSV: kernel line, header, one line per (source, samples, executed, long_sb, selected)."""
    lines = ['"Kernel Name","k"', ",".join(HEADER)]
    for i, (source, samples, executed, long_sb, selected) in enumerate(rows):
        lines.append(f'"0x{16 * i:x}","{source}","{samples}","{executed}","{long_sb}","{selected}","{long_sb}"')
    return "\n".join(lines) + "\n"


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, path, *args], capture_output=True, text=True)


def windows(stdout):
    return [line for line in stdout.splitlines() if line.startswith("instr")]


def test_shares_reasons_and_threshold():
    # Window 0 (2 rows): 30 of 40 samples, 10 of 100 instructions, long_sb 20 > selected 10.
    # Window 2 (rows 2-3): 10 samples (25%), 90 instructions. With --min-share 30 it is left out.
    rows = [("LDS R1, [R2]", 20, 5, 20, 0), ("@P0 FADD R1, R2, R3", 10, 5, 0, 10),
            ("FADD R1, R2, R3", 6, 45, 0, 6), ("FMUL R1, R2, R3", 4, 45, 0, 4)]
    with tempfile.TemporaryDirectory() as d:
        plain = os.path.join(d, "page.csv")
        with open(plain, "w", encoding="utf-8") as f:
            f.write(page(rows))
        r = run(plain, "--window", "2", "--min-share", "0")
        assert r.returncode == 0, r.stderr
        found = windows(r.stdout)
        assert len(found) == 2, found
        assert "smp 75.0%" in found[0] and "exec 10.0%" in found[0], found[0]
        assert found[0].split("|")[0].split("%")[-1].split()[:4] == ["long_sb", "67", "selected", "33"], found[0]
        assert "FADD1" in found[0] and "LDS1" in found[0], found[0]  # the guard is not the opcode
        assert "smp 25.0%" in found[1] and "exec 90.0%" in found[1], found[1]
        assert len(windows(run(plain, "--window", "2", "--min-share", "30").stdout)) == 1
        zipped = os.path.join(d, "page.csv.gz")
        with gzip.open(zipped, "wt", encoding="utf-8") as f:
            f.write(page(rows))
        assert windows(run(zipped, "--window", "2", "--min-share", "0").stdout) == found


def test_not_a_source_page_is_bad_input():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "other.csv")
        with open(path, "w", encoding="utf-8") as f:
            f.write('"a","b"\n"1","2"\n')
        r = run(path)
        assert r.returncode == 2 and "Address" in r.stderr, (r.returncode, r.stderr)
        r = run(os.path.join(d, "missing.csv"))
        assert r.returncode == 2 and "missing.csv" in r.stderr, (r.returncode, r.stderr)


if __name__ == "__main__":
    test_shares_reasons_and_threshold()
    test_not_a_source_page_is_bad_input()
    print("2 passed, 0 failed")
