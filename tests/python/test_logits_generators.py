#!/usr/bin/env python3
"""The diagnostic generators of bench/logits_variants/ (step_probe.py, timeline_probe.py,
ablate.py) still find every anchor in device/paged_logits_mma.cu and write what their
docstrings say, and every candidate patch in bench/logits_variants/candidates/ still
applies to the tree (docs/gpu-host.md: candidates wait there for a GPU run; one that no
longer applies must be refreshed or deleted with the kernel change that broke it).
A generator whose anchor moved exits non-zero naming it; this test fails then, on the CPU,
instead of in a device call. Standard library, git for the patches; runs under pytest or
alone."""

import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
KERNEL = os.path.join(ROOT, "device", "paged_logits_mma.cu")
GENERATORS = os.path.join(ROOT, "bench", "logits_variants")


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def generated(script, out):
    """OUT's text after `script KERNEL OUT`; fails with the generator's message."""
    done = run([sys.executable, os.path.join(GENERATORS, script), KERNEL, out])
    assert done.returncode == 0, f"{script}: {done.stderr.strip()}"
    with open(out) as f:
        return f.read()


def test_probes_find_their_anchors():
    kernel = open(KERNEL).read()
    with tempfile.TemporaryDirectory() as tmp:
        step = generated("step_probe.py", os.path.join(tmp, "step.cu"))
        assert "g_step_probe" in step and "STEP PROBE" in step
        timeline = generated("timeline_probe.py", os.path.join(tmp, "timeline.cu"))
        assert "g_timeline" in timeline and "TIMELINE" in timeline
        # The timeline probe adds no shared memory (it would change the blocks an SM holds).
        assert timeline.count("__shared__") == kernel.count("__shared__")
        # Every line of the kernel is still there: the probes only add.
        for probe in (step, timeline):
            lines = probe.splitlines()
            at = 0
            for line in kernel.splitlines():
                while at < len(lines) and lines[at] != line:
                    at += 1
                assert at < len(lines), f"a probe dropped the kernel line {line!r}"
                at += 1


def test_ablations_remove_one_half_each():
    with tempfile.TemporaryDirectory() as tmp:
        done = run([sys.executable, os.path.join(GENERATORS, "ablate.py"), KERNEL, tmp])
        assert done.returncode == 0, done.stderr
        no_tensor = open(os.path.join(tmp, "no_tensor.cu")).read()
        no_epilogue = open(os.path.join(tmp, "no_epilogue.cu")).read()
        assert "      dots(acc, slot);\n" not in no_tensor
        assert "      epilogue(acc, first, scale, pass);\n" not in no_epilogue
        assert "      dots(acc, slot);\n" in no_epilogue


def test_a_moved_anchor_is_named():
    with tempfile.TemporaryDirectory() as tmp:
        broken = os.path.join(tmp, "kernel.cu")
        with open(broken, "w") as f:
            f.write(open(KERNEL).read().replace("extern __shared__", "extern  __shared__"))
        done = run([sys.executable, os.path.join(GENERATORS, "timeline_probe.py"), broken,
                    os.path.join(tmp, "out.cu")])
        assert done.returncode != 0 and "anchor found 0 times" in done.stderr


def test_timeline_pairs_finds_coresident_blocks_on_the_same_keys():
    """A synthetic dump of the bf16 sweep shape's 264 blocks, block i on SM i mod 132, where
    only the blocks sharing an SM with a share that starts at the same key (blocks 50-63
    and 182-195 with share i each, timeline_pairs.py's partition) are 10% slower: under
    --shares identity the script must put exactly those SMs in its first bin, and none
    there under the kernel's mapping (the default, --shares pair)."""
    slow = set(range(50, 64)) | set(range(182, 196))
    lines = []
    for launch in range(2):
        for block in range(264):
            cycles = 2750 if block in slow else 2500
            lines.append(f"bf16 64 {block} {block % 132} 0.1 {160.0 + (8 if block in slow else 0)} "
                         f"{cycles * 94} 94 {cycles * 100}")
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "blocks.txt")
        with open(dump, "w") as f:
            f.write("# synthetic\n" + "\n".join(lines) + "\n")
        script = os.path.join(GENERATORS, "timeline_pairs.py")
        done = run([sys.executable, script, dump, "--shares", "identity"])
        assert done.returncode == 0, done.stderr
        first_bin = [line for line in done.stdout.splitlines() if "[0, 1000)" in line]
        assert len(first_bin) == 1 and ": 28 (over the launches)" in first_bin[0], done.stdout
        assert "4:+" in done.stdout and "12:+" in done.stdout and "5:-" in done.stdout, done.stdout
        paired = run([sys.executable, script, dump])
        assert paired.returncode == 0 and "[0, 1000)" not in paired.stdout, paired.stdout


def test_candidate_patches_apply():
    patches = sorted(glob.glob(os.path.join(GENERATORS, "candidates", "*.patch")))
    if run(["git", "-C", ROOT, "rev-parse", "--git-dir"]).returncode != 0:
        print("SKIPPED: not a git checkout")
        return
    for patch in patches:
        done = run(["git", "-C", ROOT, "apply", "--check", patch])
        assert done.returncode == 0, f"{os.path.basename(patch)} no longer applies: {done.stderr.strip()}"


if __name__ == "__main__":
    for name, test in list(globals().items()):
        if name.startswith("test_") and callable(test):
            test()
            print(f"ok {name}")
