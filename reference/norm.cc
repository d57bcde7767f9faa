// File: norm.cc — RMSNorm and LayerNorm of norm.h (the arithmetic: stage_arithmetic.h).
#include "reference/norm.h"

#include "reference/stage_arithmetic.h"

namespace dsaf::ref {

template void apply_norm<float>(float*, const NormSpec&, const float*, const float*);
template void apply_norm<double>(double*, const NormSpec&, const float*, const float*);

}  // namespace dsaf::ref
