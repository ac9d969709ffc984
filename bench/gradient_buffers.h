// One rank's gradient tensors, allocated once (one allocation per parameter, like a framework's
// .grad tensors), with a rank-dependent fill whose SUM over ranks is a known small integer:
//   rank r, tensor t, element i:  (r + 1) + ((i + t) % 8)
//   sum over N ranks:             N(N+1)/2 + N * ((i + t) % 8)
// exact in float32 for any world size the benchmark allows. bench/peers/torch_gradient_exchange.py
// uses the same pattern.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/resnet_shapes.h"

namespace korovod::bench {

class GradientBuffers {
 public:
  explicit GradientBuffers(const std::vector<GradTensor>& tensors);

  size_t size() const { return buffers_.size(); }
  float* data(size_t t) { return buffers_[t].get(); }
  int64_t elements(size_t t) const { return elements_[t]; }
  uint64_t total_bytes() const { return total_bytes_; }

  // Writes rank's pattern into every tensor (before a verified step).
  void Fill(int rank);
  // Checks every element of every tensor against the SUM over `world` ranks. Returns the number of
  // wrong elements; the first few are described in *report ("layer4.2.bn3.bias[17] = 3, expected
  // 12").
  int64_t Verify(int world, const std::vector<GradTensor>& tensors, std::string* report) const;

 private:
  std::vector<std::unique_ptr<float[]>> buffers_;
  std::vector<int64_t> elements_;
  uint64_t total_bytes_ = 0;
};

}  // namespace korovod::bench
