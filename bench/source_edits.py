"""Anchored text edits of a kernel's source: the step the variant generators share
(bench/topk_variants/phase_probe.py, bench/logits_variants/step_probe.py, ablate.py). Every
anchor must occur exactly once, so a generator stops, naming the anchor, when the kernel it
follows has changed."""
import sys


def apply_edits(tool, text, edits):
    """text with each (anchor, replacement) of edits applied; exits naming tool otherwise."""
    for anchor, replacement in edits:
        found = text.count(anchor)
        if found != 1:
            sys.exit(f"{tool}: anchor found {found} times, not once:\n{anchor}")
        text = text.replace(anchor, replacement)
    return text


def edit_file(tool, usage, edits):
    """The command line of a one-file generator: `tool SRC OUT` writes SRC with edits applied
    to OUT; with other arguments, exits with usage."""
    if len(sys.argv) != 3:
        sys.exit(usage)
    text = apply_edits(tool, open(sys.argv[1]).read(), edits)
    with open(sys.argv[2], "w") as f:
        f.write(text)


# The tensor-core logits kernel's template head (device/paged_logits_mma.cu): where the
# probes of bench/logits_variants/ put their device-side declarations.
LOGITS_KERNEL_HEAD = ("template <class T>\n__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)\n"
                      "    paged_logits_mma_kernel(")
# The end of its launcher (launch_instance, whose last statement is the launch, whatever
# its arguments): the probes' launch reports go just before it.
LOGITS_LAUNCHER_END = "}\n\n// Four rows a block when the caller expects runs of at least four rows of one sequence\n"


def probe_prelude(kernel_head, declarations):
    """The edits a probe starts with: <cstdio> for its launcher's report, and its device-side
    declarations just before the kernel's template head."""
    return [("#include <cmath>\n", "#include <cmath>\n#include <cstdio>\n"),
            (kernel_head, declarations + kernel_head)]
