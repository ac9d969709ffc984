// GroupAssembler: collects the member records of grouped allreduces (SubmissionRecord::group_id
// and group_size) until a group is whole, so that the op loop hands it to Engine::SubmitGroup as
// one group (Horovod's grouped_allreduce: negotiated and fused together).
//
// A group is checked as it fills: every member names the same group_size and process set, and op
// ids and names are unique within it. A group that breaks a rule, or one of whose records was
// refused by ValidateSubmission, fails as a whole: the members held get the error at once and the
// members still to come get it on arrival, so that no member waits for a group that cannot run.
// What is held is bounded (kMaxOpenGroups groups, kMaxHeldMembers records), whatever the client
// writes. Op loop thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "sidecar/arena/arena_layout.h"
#include "sidecar/arena/record_validation.h"

namespace korovod::sidecar {

class GroupAssembler {
 public:
  // Groups being collected (or failed and still expecting members) at once.
  static constexpr size_t kMaxOpenGroups = 1024;
  // Member records held across all groups (a group of kMaxGroupSize fits alone).
  static constexpr size_t kMaxHeldMembers = kMaxGroupSize;

  // What an arriving record leads to; either part may be empty.
  struct Outcome {
    std::vector<ValidatedOp> ready;  // a whole group, in arrival order: submit it
    std::vector<uint64_t> failed;    // op ids to complete with `error`
    Status error;
  };

  // A valid record with group_size > 1.
  Outcome Add(ValidatedOp op);
  // A record of a group (raw group_size in [2, kMaxGroupSize]) that ValidateSubmission refused;
  // the caller completes it with `why`, its group fails.
  Outcome AddRefused(uint64_t op_id, uint64_t group_id, uint32_t group_size, const Status& why);

  // The op ids of the members held in incomplete groups (their ops never reached the engine).
  std::vector<uint64_t> HeldOpIds() const;
  // The session ended: incomplete groups are dropped. Returns how many there were.
  size_t Clear();
  size_t open_groups() const { return groups_.size(); }
  size_t held_members() const { return held_; }

 private:
  struct Group {
    uint32_t size = 0;      // from the first member
    uint32_t expected = 0;  // the largest group_size any member claimed
    uint32_t seen = 0;      // records of this group so far, refused ones included
    int32_t process_set = 0;
    std::vector<ValidatedOp> members;
    std::unordered_set<uint64_t> op_ids;
    std::unordered_set<std::string> names;
    Status error;  // set once the group failed
  };

  // The group for `group_id`, created for a first member; null when kMaxOpenGroups are open.
  Group* Find(uint64_t group_id, uint32_t group_size, int32_t process_set);
  // Fails `g`: its held members go to `out->failed`.
  void Fail(Group& g, uint64_t group_id, const std::string& why, Outcome* out);
  // Counts the record in; forgets the group once every member it expects has arrived.
  void Arrived(uint64_t group_id, Group& g, Outcome* out);

  std::unordered_map<uint64_t, Group> groups_;
  size_t held_ = 0;
};

}  // namespace korovod::sidecar
