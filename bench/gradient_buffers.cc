#include "bench/gradient_buffers.h"

#include <cstdio>

namespace korovod::bench {

GradientBuffers::GradientBuffers(const std::vector<GradTensor>& tensors) {
  for (const GradTensor& t : tensors) {
    const int64_t n = t.elements();
    // Value-initialised: the pages are touched here, not in the first timed step.
    buffers_.push_back(std::make_unique<float[]>(static_cast<size_t>(n)));
    elements_.push_back(n);
    total_bytes_ += static_cast<uint64_t>(n) * sizeof(float);
  }
}

void GradientBuffers::Fill(int rank) {
  for (size_t t = 0; t < buffers_.size(); ++t) {
    float* p = buffers_[t].get();
    const int64_t n = elements_[t];
    for (int64_t i = 0; i < n; ++i) {
      p[i] = static_cast<float>(rank + 1 + static_cast<int>((i + static_cast<int64_t>(t)) % 8));
    }
  }
}

int64_t GradientBuffers::Verify(int world, const std::vector<GradTensor>& tensors,
                                std::string* report) const {
  const int base = world * (world + 1) / 2;
  int64_t bad = 0;
  for (size_t t = 0; t < buffers_.size(); ++t) {
    const float* p = buffers_[t].get();
    const int64_t n = elements_[t];
    for (int64_t i = 0; i < n; ++i) {
      const float want =
          static_cast<float>(base + world * static_cast<int>((i + static_cast<int64_t>(t)) % 8));
      if (p[i] == want) continue;
      if (++bad <= 5) {
        char line[256];
        std::snprintf(line, sizeof line, "%s%s[%lld] = %g, expected %g",
                      report->empty() ? "" : "; ", tensors[t].name.c_str(),
                      static_cast<long long>(i), static_cast<double>(p[i]),
                      static_cast<double>(want));
        *report += line;
      }
    }
  }
  return bad;
}

}  // namespace korovod::bench
