#!/usr/bin/env python3
"""Reads the per-block lines a timeline probe appends to $DSAF_TIMELINE_DUMP (timeline_probe.py)
and asks whether blocks that share an SM slow each other down by reading the same keys.

    python3 bench/logits_variants/timeline_pairs.py DUMP [--format bf16] [--shares pair|identity]

The launches must be of logits_variants' "sweep" shapes (64 rows of one 128K-key sequence,
valid lengths spread evenly over [N/2, N], four rows a block): the script rebuilds the
kernel's work partition for that shape (groups of four rows, a pass to the group's longest
valid length, the scored steps laid end to end and cut into equal shares) to know where each
block's share starts. --shares says which block takes which share: `pair` (the blocks of an SM
take consecutive shares: the kernel's mapping, device/paged_logits_mma.cu part 0) or `identity`
(block i takes share i: the kernel before that mapping, for dumps of older versions).
A block's SM comes from the dump. It prints, over every launch of the format in the dump:
  - per group, the mean cycles a scored step of the blocks wholly inside it, against the
    launch's mean;
  - for the blocks of each SM, the smallest distance between their shares' first keys, and
    bins of that distance with the SMs' mean cycles a step and mean last exit.
"""
import argparse
import collections
import statistics

CONTEXT, ROWS, ROWS_PER_BLOCK, STEP_KEYS = 131072, 64, 4, 64


def partition():
    """Each group's scored steps and where they start in the order the kernel lays them out."""
    valid = [CONTEXT // 2 + r * (CONTEXT // 2) // (ROWS - 1) for r in range(ROWS)]
    steps = [(max(valid[g:g + ROWS_PER_BLOCK]) + STEP_KEYS - 1) // STEP_KEYS for g in range(0, ROWS, ROWS_PER_BLOCK)]
    starts = [sum(steps[:g]) for g in range(len(steps))]
    return steps, starts


def share_of(block, blocks, per_sm, shares):
    if shares == "pair" and blocks % per_sm == 0:
        wave = blocks // per_sm
        return per_sm * (block % wave) + block // wave
    return block


def read_launches(path, fmt):
    launches, current = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            field = line.split()
            if field[0] != fmt:
                continue
            block = int(field[2])
            if block == 0:
                current = []
                launches.append(current)
            current.append({"block": block, "sm": int(field[3]), "exit_us": float(field[5]),
                            "cycles_a_step": int(field[6]) / max(1, int(field[7]))})
    return launches


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dump")
    parser.add_argument("--format", default="bf16", choices=["bf16", "fp8"])
    parser.add_argument("--shares", default="pair", choices=["pair", "identity"])
    args = parser.parse_args()
    launches = read_launches(args.dump, args.format)
    if not launches:
        raise SystemExit(f"timeline_pairs: no {args.format} launch in {args.dump}")
    steps, starts = partition()
    total = sum(steps)

    def group_at(step):
        return max(g for g in range(len(starts)) if step >= starts[g])

    def first_key(share, blocks):
        s0 = total * share // blocks
        return (s0 - starts[group_at(s0)]) * STEP_KEYS

    def inside_group(share, blocks):
        g0 = group_at(total * share // blocks)
        return g0 if group_at(total * (share + 1) // blocks - 1) == g0 else None

    by_group = collections.defaultdict(list)
    by_distance = collections.defaultdict(list)
    for launch in launches:
        blocks = len(launch)
        sms = collections.defaultdict(list)
        for b in launch:
            sms[b["sm"]].append(b)
        per_sm = max(len(v) for v in sms.values())
        mean = statistics.mean(b["cycles_a_step"] for b in launch)
        for b in launch:
            g = inside_group(share_of(b["block"], blocks, per_sm, args.shares), blocks)
            if g is not None:
                by_group[g].append(100 * (b["cycles_a_step"] / mean - 1))
        for resident in sms.values():
            keys = [first_key(share_of(b["block"], blocks, per_sm, args.shares), blocks) for b in resident]
            distance = min((abs(a - c) for i, a in enumerate(keys) for c in keys[i + 1:]), default=None)
            if distance is None:
                continue
            by_distance[distance].append((100 * (statistics.mean(b["cycles_a_step"] for b in resident) / mean - 1),
                                          max(b["exit_us"] for b in resident)))
    print(f"{len(launches)} {args.format} launches, shares {args.shares}")
    print("cycles a step against the launch's mean, by group: " +
          " ".join(f"{g}:{statistics.mean(v):+.1f}%" for g, v in sorted(by_group.items())))
    bins = [(0, 1000), (1000, 3000), (3000, 6000), (6000, 20000), (20000, 1 << 30)]
    for lo, hi in bins:
        sel = [x for d, v in by_distance.items() if lo <= d < hi for x in v]
        if sel:
            print(f"SMs whose blocks' first keys lie [{lo}, {hi}) apart: {len(sel)} (over the launches), "
                  f"cycles a step {statistics.mean(x[0] for x in sel):+.2f}%, last exit "
                  f"{statistics.mean(x[1] for x in sel):.1f} us")


if __name__ == "__main__":
    main()
