// File: sglang_v4_style_kernel.cu — see sglang_v4_style_kernel.cuh. Compiled with the
// test target's default nvcc flags plus -O3 (tests/CMakeLists.txt): contraction ON.
#include "tests/device/sglang_v4_style_kernel.cuh"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace dsaf::test {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

template <SglangStore kStore>
__global__ void sglang_style_indexer(const SglangStyleArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t token = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (token >= a.num_tokens) return;
  const float4 in = reinterpret_cast<const float4*>(a.input + token * 128)[lane];
  float x[4] = {in.x, in.y, in.z, in.w};

  // RMSNorm: ss += x*x per lane, xor-reduce 16..1, nf = rsqrt(ss / 128 + eps), x * nf * w
  float ss = 0.0f;
  for (int i = 0; i < 4; ++i) ss += x[i] * x[i];
  for (int mask = 16; mask >= 1; mask >>= 1) ss = ss + __shfl_xor_sync(kFull, ss, mask);
  const float nf = rsqrtf(ss / 128.f + a.eps);
  float d[4];
  for (int i = 0; i < 4; ++i) d[i] = x[i] * nf * a.weight[4 * lane + i];

  // RoPE on lanes 16..31 (dims 64..127), interleaved (re, im), freqs row = position * 64
  if (lane >= 16) {
    const float4 f = reinterpret_cast<const float4*>(a.freqs_cis + a.positions[token] * 64)[lane - 16];
    float xr = d[0], xi = d[1];
    d[0] = xr * f.x - xi * f.y;
    d[1] = xr * f.y + xi * f.x;
    xr = d[2], xi = d[3];
    d[2] = xr * f.z - xi * f.w;
    d[3] = xr * f.w + xi * f.z;
  }

  // Hadamard: in-lane (0,1),(2,3) then (0,2),(1,3); shfl_xor 1..16; * rsqrtf(128.f)
  {
    const float a0 = d[0], a1 = d[1], a2 = d[2], a3 = d[3];
    d[0] = a0 + a1, d[1] = a0 - a1, d[2] = a2 + a3, d[3] = a2 - a3;
  }
  {
    const float a0 = d[0], a1 = d[1], a2 = d[2], a3 = d[3];
    d[0] = a0 + a2, d[2] = a0 - a2, d[1] = a1 + a3, d[3] = a1 - a3;
  }
  for (int mask = 1; mask <= 16; mask <<= 1) {
    for (int i = 0; i < 4; ++i) {
      const float o = __shfl_xor_sync(kFull, d[i], mask);
      d[i] = (lane & mask) ? o - d[i] : d[i] + o;
    }
  }
  for (int i = 0; i < 4; ++i) d[i] *= rsqrtf(128.f);

  const int64_t page = a.slots[token] >> a.page_bits;
  const int64_t off = a.slots[token] & ((int64_t{1} << a.page_bits) - 1);
  if constexpr (kStore == SglangStore::kFp8) {
    float amax = fmaxf(fmaxf(fabsf(d[0]), fabsf(d[1])), fmaxf(fabsf(d[2]), fabsf(d[3])));
    for (int mask = 16; mask >= 1; mask >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, mask));
    const float scale = fmaxf(1e-4f, amax) / 448.f;
    const float inv = 1.0f / scale;
    uint8_t* page_ptr = a.cache + page * (132 << a.page_bits);
    unsigned packed = 0;
    for (int i = 0; i < 4; ++i) packed |= unsigned(__nv_cvt_float_to_fp8(d[i] * inv, __NV_SATFINITE, __NV_E4M3)) << (8 * i);
    reinterpret_cast<unsigned*>(page_ptr + off * 128)[lane] = packed;
    if (lane == 0) *reinterpret_cast<float*>(page_ptr + (128 << a.page_bits) + off * 4) = scale;
  } else if constexpr (kStore == SglangStore::kBf16) {
    uint8_t* page_ptr = a.cache + page * (256 << a.page_bits);
    __nv_bfloat16* out = reinterpret_cast<__nv_bfloat16*>(page_ptr + off * 256);
    for (int i = 0; i < 4; ++i) out[4 * lane + i] = __float2bfloat16_rn(d[i]);
  } else {  // fp4: groups of 32 values = 8 lanes
    float amax = fmaxf(fmaxf(fabsf(d[0]), fabsf(d[1])), fmaxf(fabsf(d[2]), fabsf(d[3])));
    for (int mask = 4; mask >= 1; mask >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFull, amax, mask));
    const float scale_raw = fmaxf(1e-4f, amax) / 6.f;
    const unsigned bits = __float_as_uint(scale_raw);
    const unsigned ue8m0 = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0);  // cast_to_ue8m0
    const float inv = __uint_as_float((254u - ue8m0) << 23);                   // inv_scale_ue8m0
    unsigned codes[4];
    for (int i = 0; i < 4; ++i) {
      const float v = d[i] * inv, m = fabsf(v);
      unsigned c = m > 5.0f ? 7 : m > 3.5f ? 6 : m > 2.5f ? 5 : m > 1.75f ? 4 : m > 1.25f ? 3 : m > 0.75f ? 2 : m > 0.25f ? 1 : 0;
      codes[i] = c | (c != 0 && v < 0.0f ? 8u : 0u);  // the sign on non-zero codes only
    }
    uint8_t* page_ptr = a.cache + page * (68 << a.page_bits);
    uint8_t* values = page_ptr + off * 64;
    values[2 * lane] = static_cast<uint8_t>(codes[0] | (codes[1] << 4));
    values[2 * lane + 1] = static_cast<uint8_t>(codes[2] | (codes[3] << 4));
    if ((lane & 7) == 0) page_ptr[(64 << a.page_bits) + off * 4 + lane / 8] = static_cast<uint8_t>(ue8m0);
  }
}

}  // namespace

void launch_sglang_style(SglangStore store, const SglangStyleArgs& args) {
  const unsigned blocks = static_cast<unsigned>((args.num_tokens + 7) / 8);
  switch (store) {
    case SglangStore::kFp8: sglang_style_indexer<SglangStore::kFp8><<<blocks, 256>>>(args); break;
    case SglangStore::kBf16: sglang_style_indexer<SglangStore::kBf16><<<blocks, 256>>>(args); break;
    case SglangStore::kFp4: sglang_style_indexer<SglangStore::kFp4><<<blocks, 256>>>(args); break;
  }
}

}  // namespace dsaf::test
