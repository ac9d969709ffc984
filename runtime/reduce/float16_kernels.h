// 16-bit float kernels on x86 CPUs with AVX2 and F16C: eight conversions per instruction instead
// of a scalar routine per element (float16 was 12x and bfloat16 5x slower than float32 at 4 MiB).
// Selected at run time; results are bit-identical to the scalar path (both round to nearest even
// and quiet NaNs the same way).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/reduce_op.h"

namespace korovod {

// True when this CPU can run the kernels below.
bool Float16KernelsAvailable();

// dst[i] = op(a[i], b[i]) over IEEE half values, combined in float32. dst may alias a or b.
void ReduceHalfF16C(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op);
// buf[i] = half(float(buf[i]) * factor).
void ScaleHalfF16C(uint16_t* buf, size_t n, float factor);

// The same for bfloat16.
void ReduceBFloat16Avx2(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op);
void ScaleBFloat16Avx2(uint16_t* buf, size_t n, float factor);

}  // namespace korovod
