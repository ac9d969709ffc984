// The elementwise kernels that apply a ReduceOp (common/reduce_op.h).
#pragma once

#include <cstddef>

#include "common/data_type.h"
#include "common/reduce_op.h"

namespace korovod {

// dst[i] = op(dst[i], src[i]) for count elements. Average combines as Sum; the division by the
// group size is a post-scale. Operand order is fixed (dst first) so every rank that combines the
// same two partials gets the same bits.
void ReduceInto(void* dst, const void* src, size_t count, DataType type, ReduceOp op);

// dst[i] = op(a[i], b[i]); dst may alias a or b.
void ReduceTo(void* dst, const void* a, const void* b, size_t count, DataType type, ReduceOp op);

// buf[i] = buf[i] * factor / divisor (Average passes the set size as divisor). float32 and float64
// multiply and divide in their own type, as Horovod scales, so an average is the correctly rounded
// quotient; integers compute in double and truncate toward zero, like Horovod's integer averaging;
// 16-bit floats compute in float32 with factor / divisor. A bool keeps its value under a non-zero
// factor (its average is the logical or), 0 makes it false.
void ScaleInPlace(void* buf, size_t count, DataType type, double factor, int divisor = 1);

// Fills count elements with the identity of op (0 for sum, 1 for product, +max for min...), used
// by ranks that contribute nothing (join) and by tests.
void FillIdentity(void* buf, size_t count, DataType type, ReduceOp op);

}  // namespace korovod
