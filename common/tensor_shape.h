// A tensor's shape: dimensions, outermost first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace korovod {

using TensorShape = std::vector<int64_t>;
int64_t NumElements(const TensorShape& shape);
std::string ShapeString(const TensorShape& shape);  // "[3, 4]"

}  // namespace korovod
