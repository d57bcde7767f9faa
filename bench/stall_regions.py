#!/usr/bin/env python3
"""Where a kernel's warps wait, by region of its SASS: Nsight Compute's source page (the CSV
bench/sass_stalls.sh exports, plain or gzipped) cut into windows of consecutive instructions.
Per window: its share of the warp-state samples and of the executed warp instructions (a
window whose sample share is well above its instruction share is where time goes beyond
issue), its top stall reasons (% of the window's samples) and its most frequent opcodes.

  bench/stall_regions.py SASS_CSV [--window 64] [--min-share 0.3]
"""

import argparse
import collections
import csv
import gzip
import io
import sys


def rows_of(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        text = f.read()
    lines = text.splitlines()
    # The first line names the kernel; the header follows.
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError(f"{path}: no 'Address' header (not an ncu source-page CSV)")
    return lines[0], list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--window", type=int, default=64, help="instructions per window")
    parser.add_argument("--min-share", type=float, default=0.3, help="print windows with at least this %% of samples")
    args = parser.parse_args()
    try:
        kernel, rows = rows_of(args.csv)
    except (OSError, ValueError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if not rows or "Warp Stall Sampling (All Samples)" not in rows[0]:
        print(f"error: {args.csv}: no warp-state sample column", file=sys.stderr)
        sys.exit(2)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "(Not Issued)" not in k]
    samples = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    executed = sum(number(r["Instructions Executed"]) for r in rows)
    print(f"# {kernel.strip(',').strip()}")
    print(f"# {int(samples)} samples, {int(executed)} warp instructions executed, {len(rows)} instructions")
    for first in range(0, len(rows), args.window):
        window = rows[first:first + args.window]
        smp = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in window)
        exe = sum(number(r["Instructions Executed"]) for r in window)
        if samples == 0 or 100 * smp / samples < args.min_share:
            continue
        by_reason = collections.Counter({k[len("stall_"):]: sum(number(r[k]) for r in window) for k in reasons})
        top = " ".join(f"{k} {100 * v / smp:.0f}" for k, v in by_reason.most_common(4) if v > 0)
        ops = collections.Counter(opcode(r["Source"]) for r in window if number(r["Instructions Executed"]) > 0)
        common = ",".join(f"{k}{v}" for k, v in ops.most_common(4))
        print(f"instr {first:5d}  smp {100 * smp / samples:4.1f}%  exec {100 * exe / executed:4.1f}%   {top} | {common}")


if __name__ == "__main__":
    main()
