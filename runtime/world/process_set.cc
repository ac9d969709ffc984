#include "runtime/world/process_set.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace korovod {

ProcessSet ProcessSet::World(int world_size, int my_rank) {
  ProcessSet s;
  s.ranks_.resize(world_size);
  std::iota(s.ranks_.begin(), s.ranks_.end(), 0);
  s.my_index_ = my_rank;
  return s;
}

StatusOr<ProcessSet> ProcessSet::Create(std::vector<int> ranks, int world_size, int my_rank) {
  if (ranks.empty()) return InvalidArgument("process set is empty");
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size) {
      return InvalidArgument("process set rank " + std::to_string(ranks[i]) +
                             " is outside the world of size " + std::to_string(world_size));
    }
    if (i > 0 && ranks[i] == ranks[i - 1]) {
      return InvalidArgument("process set lists rank " + std::to_string(ranks[i]) + " twice");
    }
  }
  ProcessSet s;
  s.ranks_ = std::move(ranks);
  auto it = std::find(s.ranks_.begin(), s.ranks_.end(), my_rank);
  s.my_index_ = it == s.ranks_.end() ? -1 : static_cast<int>(it - s.ranks_.begin());
  return s;
}

}  // namespace korovod
