// Admission: the checks a submission passes on the submitting thread before the background thread
// sees it, so that a bad request fails at once on the rank that made it. It keeps what those checks
// need: the process sets this rank knows, the sets it has joined, and the names of its ops in
// flight. Not synchronized: the engine calls it under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "runtime/core/engine.h"
#include "runtime/core/op_request.h"
#include "runtime/core/pending_op.h"

namespace korovod {

// The shape of a request alone, for a set of `set_size` ranks where this rank is `set_rank`:
// dimensions, data pointers, broadcast root, alltoall splits.
Status CheckRequest(const OpRequest& r, int set_size, int set_rank);

class Admission {
 public:
  struct SetShape {
    int size;
    int my_rank;  // -1: not a member
  };
  void AddSet(int id, int size, int my_rank) { sets_[id] = {size, my_rank}; }
  void RemoveSet(int id) {
    sets_.erase(id);
    joined_.erase(id);
  }
  const SetShape* FindSet(int id) const {
    auto it = sets_.find(id);
    return it == sets_.end() ? nullptr : &it->second;
  }
  // This rank's join on set `id` completed: it may submit again.
  void JoinCompleted(int id) { joined_.erase(id); }
  // The op completed: its name may be used again.
  void Release(int set_id, const std::string& name) { in_flight_.erase(Key(set_id, name)); }

  // Checks `requests` (one op, or the allreduces of one group) and makes their pending ops, in
  // order, now in flight. Unnamed requests get a name here ("allreduce.noname.3"). On an error
  // nothing is in flight.
  StatusOr<std::vector<std::unique_ptr<PendingOp>>> Admit(std::vector<OpRequest> requests,
                                                          std::vector<DoneCallback> done);

 private:
  static std::string Key(int set_id, const std::string& name) {
    return std::to_string(set_id) + "/" + name;
  }
  // Names an unnamed request, then checks it; `names_in_call` catches a name given twice.
  Status CheckOne(OpRequest& r, std::unordered_set<std::string>& names_in_call);

  std::unordered_map<int, SetShape> sets_;  // id -> shape
  std::unordered_set<int> joined_;
  std::map<int, uint64_t> noname_counter_;
  std::unordered_set<std::string> in_flight_;  // "<set>/<name>"
};

}  // namespace korovod
