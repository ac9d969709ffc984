// Coordinator: on set rank 0 of each process set, collects the ranks' reports of ready tensors
// and decides which tensors every rank (that has not joined) has submitted, in a deterministic
// order. Submissions of one name that disagree (shape, dtype, op, root...) become an error
// response naming the tensor, the ranks and the mismatch; the engine keeps running.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/core/negotiation_messages.h"
#include "runtime/core/stall_inspector.h"

namespace korovod {

// Horovod runs only allreduce (and barrier) while some rank of the set has joined: an allgather,
// broadcast, alltoall or reducescatter that a joined rank did not submit, or a process set change
// while a rank has joined, fails on the ranks that submitted it. It fails as soon as one rank
// submits it (the others need not: unnamed ops of ranks that did different work before joining
// need not have the same names), and each later submission of it fails the same way while the
// rank stays joined.
bool RunsWithJoinedRanks(OpType type);
// The error, naming the tensor and the joined rank.
std::string JoinRefusal(OpType type, const std::string& tensor, const std::string& joined_rank);

class Coordinator {
 public:
  // `describe` names a set rank in error messages.
  Coordinator(int set_size, std::function<std::string(int)> describe, StallInspector* stall);

  // One rank's new requests of this cycle. Ranks are ingested in set-rank order.
  void Ingest(int set_rank, const std::vector<Request>& requests, Clock::time_point now);

  // Responses for the tensors now submitted by every rank that has not joined, ordered by when the
  // first rank submitted them (backward order for gradients); joined ranks that did not submit a
  // tensor are listed in its response's `absent`. A join that every rank has reached comes last.
  std::vector<Response> TakeReady();

  const std::vector<bool>& joined() const { return joined_; }
  bool idle() const { return table_.empty(); }

 private:
  struct Entry {
    std::vector<std::optional<Request>> by_rank;
    uint64_t first_seq = 0;
  };
  Response Decide(const std::string& name, const Entry& e) const;
  // The first field the ranks disagree on, as the error naming the tensor, the ranks and their
  // values; empty when they agree. `ref`: the first submitted request.
  std::string Mismatch(const std::string& name, const Entry& e, const Request& ref) const;
  bool Complete(const Entry& e) const;
  // A joined set rank that did not submit `e`, an op that cannot run with it; -1 when none.
  int RefusingJoinedRank(const Entry& e) const;

  int size_;
  std::function<std::string(int)> describe_;
  StallInspector* stall_;
  std::unordered_map<std::string, Entry> table_;
  uint64_t seq_ = 0;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  // Grouped allreduce: members decided but held until the whole group is decided.
  std::map<std::string, std::vector<std::pair<uint64_t, Response>>> groups_;
};

}  // namespace korovod
