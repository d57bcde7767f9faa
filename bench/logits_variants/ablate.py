#!/usr/bin/env python3
"""Writes diagnostic copies of device/paged_logits_mma.cu with one half of a step removed.

    python3 bench/logits_variants/ablate.py SRC.cu OUT_DIR

OUT_DIR/no_tensor.cu: each step's wgmma are replaced by loads of the accumulators from the
step's key tile in shared memory (32 LDS.128 a thread: values ptxas cannot fold, where an
empty asm leaves them foldable), the copies, the barrier and the epilogue kept, so its time
is the kernel's issue work alone, plus those loads. OUT_DIR/no_epilogue.cu: the epilogue is replaced by one compare
of an accumulator (the wgmma and its wait stay), so its time is the copies and the tensor
work alone. Given to build.sh after the real kernel (their logits differ from it: that is
expected). If the kernel takes T, no_tensor T_i and no_epilogue T_t, a perfect overlap of
the two would take max(T_i, T_t): what a better schedule of this kernel can win. T_i bounds
that only while the stand-in loads cost less than the wgmma they replace; where T_i > T
it bounds nothing, and T_t alone is the tensor work's floor.
Exits with an error when an anchor is missing from SRC (the kernel changed).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from source_edits import apply_edits  # noqa: E402

DOTS = "      dots(acc, slot);\n"
EPILOGUE = "      epilogue(acc, first, scale, pass);\n"
OPAQUE = ("      {\n"
          "        const float4* tile = reinterpret_cast<const float4*>(smem + pad + T::kQueryTileBytes +\n"
          "                                                            slot * T::kTileBytes) + (thread % 16) * 32;\n"
          "#pragma unroll\n"
          "        for (int a = 0; a < T::kAccumulators / 4; ++a) {\n"
          "          const float4 v = tile[a];\n"
          "          acc[4 * a] = v.x, acc[4 * a + 1] = v.y, acc[4 * a + 2] = v.z, acc[4 * a + 3] = v.w;\n"
          "        }\n"
          "      }\n")
TOUCH = ("      if (acc[0] == 1.0f && acc[T::kAccumulators - 1] == 2.0f) out(0)[first] = scale;  // keeps the wgmma\n")


def main():
    src, out = sys.argv[1], sys.argv[2]
    text = open(src).read()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "no_tensor.cu"), "w") as f:
        f.write(apply_edits("ablate.py", text, [(DOTS, OPAQUE)]))
    with open(os.path.join(out, "no_epilogue.cu"), "w") as f:
        f.write(apply_edits("ablate.py", text, [(EPILOGUE, TOUCH)]))


if __name__ == "__main__":
    main()
