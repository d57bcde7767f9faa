// File: rope_contraction_probe.cu
// Which product of `xr*c - xi*s` and `xr*s + xi*c` does nvcc fuse into the FFMA when it
// compiles the interleaved RoPE of SGLang's V4 indexer kernel (docs/numerics.md §6.4) with
// SGLang's flags (-O3, contraction on, no fast-math)? Compile with
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -cubin -o probe.cubin rope_contraction_probe.cu
// and read `cuobjdump -sass probe.cubin`: the FMUL's operands are the product that was
// rounded on its own; the FFMA holds the fused one. The same arithmetic also runs, so a
// run can compare it against both fusion choices on random inputs.
#include <cstdint>

extern "C" __global__ void rope_pair(const float4* in, const float4* freqs, float2* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float4 v = in[i];     // (xr, xi, unused, unused)
  const float4 cs = freqs[i];  // (cos, sin, cos, sin), as the kernel loads freqs_cis
  const float xr = v.x, xi = v.y, c = cs.x, s = cs.y;
  out[i] = make_float2(xr * c - xi * s, xr * s + xi * c);
}
