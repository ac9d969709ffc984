// A tensor's shape: dimensions, outermost first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace korovod {

using TensorShape = std::vector<int64_t>;

// The number of elements (1 for a scalar, 0 when some dimension is 0), or -1 when a dimension is
// negative or the product overflows 64 bits. Shapes come from other processes (the trainer's
// records, the peers' negotiation messages): every place that takes one from outside checks for
// -1 (or calls NumBytes) before sizing anything by it.
int64_t NumElements(const TensorShape& shape);
// NumElements(shape) * elem_bytes, or -1 when that is -1 or the product overflows 64 bits.
int64_t NumBytes(const TensorShape& shape, size_t elem_bytes);
std::string ShapeString(const TensorShape& shape);  // "[3, 4]"

}  // namespace korovod
