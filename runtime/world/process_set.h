// ProcessSet: an ordered subset of the world's ranks that runs collectives among itself.
// Several sets can be live at once; a collective names the set it runs on.
#pragma once

#include <vector>

#include "common/status.h"

namespace korovod {

class ProcessSet {
 public:
  // The whole world.
  static ProcessSet World(int world_size, int my_rank);
  // `ranks`: distinct global ranks in [0, world_size), any order (sorted here so every member
  // agrees on set-rank numbering). `my_rank` need not be a member; collectives then refuse.
  static StatusOr<ProcessSet> Create(std::vector<int> ranks, int world_size, int my_rank);

  int size() const { return static_cast<int>(ranks_.size()); }
  bool contains_me() const { return my_index_ >= 0; }
  int rank() const { return my_index_; }  // this rank's index in the set, -1 if not a member
  int global_rank(int set_rank) const { return ranks_[set_rank]; }
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  std::vector<int> ranks_;
  int my_index_ = -1;
};

}  // namespace korovod
