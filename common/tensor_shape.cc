#include "common/tensor_shape.h"

namespace korovod {

int64_t NumElements(const TensorShape& shape) {
  int64_t n = 1;
  bool overflow = false;
  bool empty = false;
  // A zero dimension makes the tensor empty wherever it lies, but the product of the others must
  // still fit: code that sizes by partial products (rows times the rest) must not overflow.
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
    } else if (!overflow && __builtin_mul_overflow(n, d, &n)) {
      overflow = true;
    }
  }
  if (overflow) return -1;
  return empty ? 0 : n;
}

int64_t NumBytes(const TensorShape& shape, size_t elem_bytes) {
  const int64_t n = NumElements(shape);
  int64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(n, static_cast<int64_t>(elem_bytes), &bytes)) return -1;
  return bytes;
}

std::string ShapeString(const TensorShape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace korovod
