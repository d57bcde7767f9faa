// File: quantize.cc — scale rules and head storage codecs (quantize.h).
#include "reference/quantize.h"

#include <cmath>
#include <limits>
#include <string>

#include "reference/error.h"
#include "reference/numeric/bit_cast.h"
#include "reference/numeric/minifloat.h"
#include "reference/numeric/ue8m0.h"

namespace dsaf::ref {
namespace {

constexpr int kFp4Block = 32;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(v >> (8 * b)));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}
void put_u16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

float apply_scale(float x, float scale, ScaleApply apply) {
  return apply == ScaleApply::kDivide ? x / scale : x * (1.0f / scale);
}

// The ue8m0 byte of a power-of-two scale rule. A subnormal raw scale has no exponent
// bits to read and its log2 falls below ue8m0's range (2^-127), so both rules are only
// defined for raw >= 2^-126; Recipe::validate keeps amax_floor / qmax above that.
uint8_t ue8m0_of(float raw, ScalePow2 pow2) {
  if (!(raw >= std::numeric_limits<float>::min())) {
    throw_bad_input("raw scale " + std::to_string(raw) +
                    " is below 2^-126: a power-of-two scale rule needs amax_floor >= qmax * 2^-126");
  }
  if (pow2 == ScalePow2::kLog2Ceil) {
    return static_cast<uint8_t>(static_cast<int>(std::ceil(log2_correctly_rounded(raw))) + 127);
  }
  return encode_ue8m0_ceil(raw);
}

// x is finite (store_head checked it), so a compare is fmax.
float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

// Fp4Prestage::kFakeQuant on one block of 32 (recipe.h): scale 2^ceil(log2(max(amax,
// 6 * 2^-126) * fl(1/6))) from the exponent bits, values decode(e2m1_rne(x * (1/s) + 0)) * s.
// The reciprocal of a power of two and both products are exact.
void fake_quant_fp4(float* xb) {
  QuantSpec stage{};
  stage.amax_floor = kFp4Max * 0x1p-126f;
  stage.divisor = ScaleDivisor::kTimesReciprocal;
  stage.pow2 = ScalePow2::kExponentBitsCeil;
  const float scale = decode_ue8m0(ue8m0_of(raw_scale(block_amax(xb, kFp4Block), stage, kFp4Max), stage.pow2));
  for (int j = 0; j < kFp4Block; ++j) {
    xb[j] = decode_e2m1(encode_e2m1(xb[j] * (1.0f / scale) + 0.0f, Rounding::kNearestEven)) * scale;
  }
}

}  // namespace

float log2_correctly_rounded(float x) {
  // Exact powers of two have exact logarithms. Otherwise fp64 log2 (error < 1 fp64
  // ulp) rounded once: a wrong fp32 rounding would need log2(x) within 2^-52 relative
  // of an fp32 midpoint, which the 24-bit x of interest here never reach.
  const uint32_t bits = float_bits(x);
  if ((bits & 0x7F'FFFF) == 0 && (bits >> 23) != 0) {
    return static_cast<float>(static_cast<int>(bits >> 23) - 127);
  }
  return static_cast<float>(std::log2(static_cast<double>(x)));
}

float raw_scale(float amax, const QuantSpec& spec, float qmax) {
  const float floored = std::fmax(amax, spec.amax_floor);
  return spec.divisor == ScaleDivisor::kDivide ? floored / qmax : floored * (1.0f / qmax);
}

float block_scale(float amax, const QuantSpec& spec, float qmax) {
  const float raw = raw_scale(amax, spec, qmax);
  switch (spec.pow2) {
    case ScalePow2::kNone:
      return raw;
    case ScalePow2::kExponentBitsCeil:
    case ScalePow2::kLog2Ceil:
      return decode_ue8m0(ue8m0_of(raw, spec.pow2));
  }
  return raw;
}

template <class T>
StoredHead store_head(const T* x, const QuantSpec& spec) {
  for (int i = 0; i < kHeadDim; ++i) {
    if (!std::isfinite(x[i])) {
      throw_bad_input("non-finite value " + std::to_string(static_cast<double>(x[i])) +
                      " at element " + std::to_string(i) + " of a head being stored");
    }
  }
  StoredHead out;
  out.format = spec.format;
  out.value_bytes.reserve(value_bytes_per_head(spec.format));
  out.scale_bytes.reserve(scale_bytes_per_head(spec.format));
  if (spec.format == StorageFormat::kNone) {
    for (int i = 0; i < kHeadDim; ++i) out.dot_values[i] = static_cast<double>(x[i]);
    return out;
  }
  if constexpr (std::is_same_v<T, double>) {
    throw_bad_input("a quantised storage format needs fp32 compute");
  } else {
    switch (spec.format) {
      case StorageFormat::kNone:
        break;
      case StorageFormat::kFp32:
        for (int i = 0; i < kHeadDim; ++i) {
          put_u32(out.value_bytes, float_bits(x[i]));
          out.dot_values[i] = x[i];
        }
        break;
      case StorageFormat::kBf16:
        for (int i = 0; i < kHeadDim; ++i) {
          const uint16_t code = encode_bf16(x[i]);
          put_u16(out.value_bytes, code);
          out.dot_values[i] = decode_bf16(code);
        }
        break;
      case StorageFormat::kFp8E4m3fn: {
        const float scale = block_scale(block_amax(x, kHeadDim), spec, kFp8Max);
        for (int i = 0; i < kHeadDim; ++i) {
          const uint8_t code = encode_e4m3fn(apply_scale(x[i], scale, spec.apply), spec.saturation);
          out.value_bytes.push_back(code);
          out.dot_values[i] = decode_e4m3fn(code);
        }
        put_u32(out.scale_bytes, float_bits(scale));
        out.dot_scale = scale;
        break;
      }
      case StorageFormat::kFp4E2m1:
      case StorageFormat::kFp4SimulatedBf16: {
        std::array<uint8_t, kHeadDim> codes{};
        std::array<float, kHeadDim> staged{};  // x, after the first stage when there is one
        for (int i = 0; i < kHeadDim; ++i) staged[i] = x[i];
        if (spec.fp4_prestage == Fp4Prestage::kFakeQuant) {
          for (int block = 0; block < kHeadDim / kFp4Block; ++block) fake_quant_fp4(staged.data() + block * kFp4Block);
        }
        for (int block = 0; block < kHeadDim / kFp4Block; ++block) {
          const float* xb = staged.data() + block * kFp4Block;
          const uint8_t e = ue8m0_of(raw_scale(block_amax(xb, kFp4Block), spec, kFp4Max), spec.pow2);
          const float scale = decode_ue8m0(e);
          out.scale_bytes.push_back(e);
          for (int j = 0; j < kFp4Block; ++j) {
            const int i = block * kFp4Block + j;
            codes[i] = encode_e2m1(apply_scale(xb[j], scale, spec.apply), spec.fp4_rounding);
            if (spec.fp4_zero_sign == Fp4ZeroSign::kPositive && (codes[i] & 0x7) == 0) codes[i] = 0;  // -0 -> +0
            // code value * 2^k is exact in fp32 (2 significant bits).
            out.dot_values[i] = decode_e2m1(codes[i]) * scale;
          }
        }
        if (spec.format == StorageFormat::kFp4E2m1) {
          for (int i = 0; i < kHeadDim; i += 2) {
            out.value_bytes.push_back(static_cast<uint8_t>(codes[i] | (codes[i + 1] << 4)));
          }
        } else {  // simulated: the dequantised value rounded to bf16, no scale kept
          out.scale_bytes.clear();
          for (int i = 0; i < kHeadDim; ++i) {
            const uint16_t code = encode_bf16(static_cast<float>(out.dot_values[i]));
            put_u16(out.value_bytes, code);
            out.dot_values[i] = decode_bf16(code);
          }
        }
        break;
      }
    }
  }
  return out;
}

StoredHead load_head(StorageFormat format, const uint8_t* value_bytes,
                     const uint8_t* scale_bytes) {
  StoredHead out;
  out.format = format;
  const int nv = value_bytes_per_head(format);
  const int ns = scale_bytes_per_head(format);
  out.value_bytes.assign(value_bytes, value_bytes + nv);
  if (ns > 0) out.scale_bytes.assign(scale_bytes, scale_bytes + ns);
  for (int i = 0; i < kHeadDim; ++i) {
    switch (format) {
      case StorageFormat::kNone:
        throw_bad_input("storage format 'none' has no byte form");
      case StorageFormat::kFp32:
        out.dot_values[i] = float_from_bits(get_u32(value_bytes + 4 * i));
        break;
      case StorageFormat::kBf16:
      case StorageFormat::kFp4SimulatedBf16:
        out.dot_values[i] = decode_bf16(static_cast<uint16_t>(
            value_bytes[2 * i] | (value_bytes[2 * i + 1] << 8)));
        break;
      case StorageFormat::kFp8E4m3fn:
        out.dot_values[i] = decode_e4m3fn(value_bytes[i]);
        break;
      case StorageFormat::kFp4E2m1: {
        const uint8_t code = (value_bytes[i / 2] >> (4 * (i % 2))) & 0xF;
        out.dot_values[i] = decode_e2m1(code) * decode_ue8m0(scale_bytes[i / kFp4Block]);
        break;
      }
    }
  }
  if (format == StorageFormat::kFp8E4m3fn) out.dot_scale = float_from_bits(get_u32(scale_bytes));
  return out;
}

int value_bytes_per_head(StorageFormat format) {
  switch (format) {
    case StorageFormat::kNone: return 0;
    case StorageFormat::kFp32: return 4 * kHeadDim;
    case StorageFormat::kBf16: return 2 * kHeadDim;
    case StorageFormat::kFp8E4m3fn: return kHeadDim;
    case StorageFormat::kFp4E2m1: return kHeadDim / 2;
    case StorageFormat::kFp4SimulatedBf16: return 2 * kHeadDim;
  }
  return 0;
}

int scale_bytes_per_head(StorageFormat format) {
  switch (format) {
    case StorageFormat::kFp8E4m3fn: return 4;
    case StorageFormat::kFp4E2m1: return kHeadDim / kFp4Block;
    default: return 0;
  }
}

int cache_bytes_per_token(StorageFormat format) {
  return value_bytes_per_head(format) + scale_bytes_per_head(format);
}

template StoredHead store_head<float>(const float*, const QuantSpec&);
template StoredHead store_head<double>(const double*, const QuantSpec&);

}  // namespace dsaf::ref
