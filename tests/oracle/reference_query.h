// File: reference_query.h
// The reference's query path behind the KernelUnderTest interface (device/api.h), for the
// tests' stand-in kernels: a host query batch in, the codes, scales and folded weights
// run_query_path gives, laid out as the query ABI writes them.
#pragma once

#include <vector>

#include "device/api.h"
#include "reference/numeric/minifloat.h"
#include "reference/pipeline.h"
#include "reference/recipe.h"
#include "reference/rope.h"

namespace dsaf::test {

inline dev::HostQueryResult reference_query_quant(const ref::Recipe& recipe, const dev::HostQueryBatch& q) {
  const ref::RopeTable rope(q.rope_cos, q.rope_sin);
  dev::HostQueryResult out;
  std::vector<float> in(static_cast<size_t>(q.num_heads) * ref::kHeadDim);
  for (int64_t t = 0; t < q.num_tokens; ++t) {
    for (size_t i = 0; i < in.size(); ++i) in[i] = ref::decode_bf16(q.input_bf16[t * in.size() + i]);
    const ref::QueryOutput o =
        ref::run_query_path(recipe, in.data(), q.num_heads, q.wproj.data() + t * q.num_heads, q.positions[t], rope);
    for (int h = 0; h < q.num_heads; ++h) {
      out.values.insert(out.values.end(), o.heads[h].value_bytes.begin(), o.heads[h].value_bytes.end());
      out.scales.insert(out.scales.end(), o.heads[h].scale_bytes.begin(), o.heads[h].scale_bytes.end());
      out.weights.push_back(static_cast<float>(o.weights[h]));
    }
  }
  return out;
}

}  // namespace dsaf::test
