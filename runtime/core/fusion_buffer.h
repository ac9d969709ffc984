// FusionBuffer: the grow-only, 64-byte aligned staging area fused tensors are packed into. One per
// engine, reused every cycle: after warm-up no allocation happens on the data path.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace korovod {

class FusionBuffer {
 public:
  std::byte* Get(size_t bytes) {
    if (bytes > capacity_) {
      const size_t rounded = (bytes + 4095) / 4096 * 4096;
      data_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, rounded)));
      capacity_ = data_ ? rounded : 0;
    }
    return data_.get();
  }
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace korovod
