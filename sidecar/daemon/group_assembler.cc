#include "sidecar/daemon/group_assembler.h"

#include <algorithm>
#include <utility>

namespace korovod::sidecar {

GroupAssembler::Group* GroupAssembler::Find(uint64_t group_id, uint32_t group_size,
                                            int32_t process_set) {
  auto it = groups_.find(group_id);
  if (it != groups_.end()) return &it->second;
  if (groups_.size() >= kMaxOpenGroups) return nullptr;
  Group& g = groups_[group_id];
  g.size = group_size;
  g.expected = group_size;
  g.process_set = process_set;
  return &g;
}

void GroupAssembler::Fail(Group& g, uint64_t group_id, const std::string& why, Outcome* out) {
  g.error = InvalidArgument("grouped allreduce (group id " + std::to_string(group_id) + ", " +
                            std::to_string(g.size) + " members): " + why + "; every member fails");
  for (const ValidatedOp& m : g.members) out->failed.push_back(m.op_id);
  held_ -= g.members.size();
  g.members.clear();
  out->error = g.error;
}

void GroupAssembler::Arrived(uint64_t group_id, Group& g, Outcome* out) {
  ++g.seen;
  if (g.error.ok() && g.seen == g.size) {
    held_ -= g.members.size();
    out->ready = std::move(g.members);
    groups_.erase(group_id);
  } else if (!g.error.ok() && g.seen >= g.expected) {
    groups_.erase(group_id);  // every member it expects has had its error
  }
}

GroupAssembler::Outcome GroupAssembler::Add(ValidatedOp op) {
  Outcome out;
  const uint64_t id = op.group_id;
  Group* g = Find(id, op.group_size, op.process_set);
  if (g == nullptr) {
    out.failed.push_back(op.op_id);
    out.error = InvalidArgument("grouped allreduce (group id " + std::to_string(id) + "): op " +
                                std::to_string(op.op_id) + " starts a group while " +
                                std::to_string(kMaxOpenGroups) + " groups are incomplete");
    return out;
  }
  if (!g->error.ok()) {
    out.failed.push_back(op.op_id);
    out.error = g->error;
    Arrived(id, *g, &out);
    return out;
  }
  const std::string op_name = "op " + std::to_string(op.op_id);
  std::string why;
  if (op.group_size != g->size) {
    why = op_name + " says group_size " + std::to_string(op.group_size) +
          " where an earlier member said " + std::to_string(g->size);
  } else if (op.process_set != g->process_set) {
    why = op_name + " is on process set " + std::to_string(op.process_set) +
          " where an earlier member is on " + std::to_string(g->process_set) +
          " (a group runs on one process set)";
  } else if (!g->op_ids.insert(op.op_id).second) {
    why = "op id " + std::to_string(op.op_id) + " appears twice";
  } else if (!op.name.empty() && !g->names.insert(op.name).second) {
    why = op_name + ": tensor name \"" + op.name + "\" appears twice";
  } else if (held_ >= kMaxHeldMembers) {
    why = op_name + " would make more than " + std::to_string(kMaxHeldMembers) +
          " records held in incomplete groups";
  }
  if (!why.empty()) {
    g->expected = std::max(g->expected, op.group_size);
    Fail(*g, id, why, &out);
    out.failed.push_back(op.op_id);
    Arrived(id, *g, &out);
    return out;
  }
  g->members.push_back(std::move(op));
  ++held_;
  Arrived(id, *g, &out);
  return out;
}

GroupAssembler::Outcome GroupAssembler::AddRefused(uint64_t op_id, uint64_t group_id,
                                                   uint32_t group_size, const Status& why) {
  Outcome out;
  Group* g = Find(group_id, group_size, 0);
  if (g == nullptr) return out;  // the refused record has its own error; nothing is held
  if (g->error.ok()) {
    g->expected = std::max(g->expected, group_size);
    Fail(*g, group_id, "op " + std::to_string(op_id) + " was refused (" + why.message() + ")",
         &out);
  }
  Arrived(group_id, *g, &out);
  return out;
}

std::vector<uint64_t> GroupAssembler::HeldOpIds() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, g] : groups_) {
    for (const ValidatedOp& m : g.members) ids.push_back(m.op_id);
  }
  return ids;
}

size_t GroupAssembler::Clear() {
  const size_t n = groups_.size();
  groups_.clear();
  held_ = 0;
  return n;
}

}  // namespace korovod::sidecar
