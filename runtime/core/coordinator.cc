#include "runtime/core/coordinator.h"

#include <algorithm>
#include <cctype>
#include <functional>

namespace korovod {
namespace {

// "rank 0 [4, 3]; ranks 1, 2 [4, 4]": each distinct value with the ranks that submitted it.
template <typename T>
std::string Disagreement(const std::vector<std::optional<Request>>& by_rank,
                         const std::function<T(const Request&)>& field,
                         const std::function<std::string(const T&)>& show,
                         const std::function<std::string(int)>& describe) {
  std::vector<std::pair<T, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    if (!by_rank[r]) continue;
    T v = field(*by_rank[r]);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  if (groups.size() <= 1) return "";
  std::string out;
  for (const auto& [v, ranks] : groups) {
    if (!out.empty()) out += "; ";
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + describe(ranks[i]);
    out += " " + show(v);
  }
  return out;
}

// Allgather and alltoall may differ in the first dimension only.
bool IsRagged(OpType type) { return type == OpType::kAllgather || type == OpType::kAlltoall; }

// The part of a request's shape every rank must agree on.
TensorShape AgreedShape(const Request& r, bool ragged) {
  if (!ragged || r.shape.empty()) return r.shape;
  return TensorShape(r.shape.begin() + 1, r.shape.end());
}

std::string Num(double d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", d);
  return buf;
}

}  // namespace

bool RunsWithJoinedRanks(OpType type) {
  return type == OpType::kAllreduce || type == OpType::kBarrier || type == OpType::kJoin;
}

std::string JoinRefusal(OpType type, const std::string& tensor, const std::string& joined_rank) {
  std::string lower = OpTypeName(type);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  return "tensor \"" + tensor + "\": " + lower + " cannot run while " + joined_rank +
         " has joined (only allreduce runs with joined ranks, as in Horovod)";
}

int Coordinator::RefusingJoinedRank(const Entry& e) const {
  int first = 0;
  while (first < size_ && !e.by_rank[first]) ++first;
  if (first == size_ || RunsWithJoinedRanks(e.by_rank[first]->type)) return -1;
  for (int r = 0; r < size_; ++r) {
    if (joined_[r] && !e.by_rank[r]) return r;
  }
  return -1;
}

Coordinator::Coordinator(int set_size, std::function<std::string(int)> describe,
                         StallInspector* stall)
    : size_(set_size), describe_(std::move(describe)), stall_(stall), joined_(set_size, false) {}

void Coordinator::Ingest(int set_rank, const std::vector<Request>& requests,
                         Clock::time_point now) {
  for (const Request& r : requests) {
    if (r.type == OpType::kJoin) {
      joined_[set_rank] = true;
      last_joined_ = set_rank;
      continue;
    }
    Entry& e = table_[r.name];
    if (e.by_rank.empty()) {
      e.by_rank.resize(size_);
      e.first_seq = seq_++;
    }
    e.by_rank[set_rank] = r;
    if (stall_ != nullptr) stall_->Reported(r.name, set_rank, now);
  }
}

// Every rank has submitted the tensor or joined (an entry exists only once some rank submitted
// it, so at least one rank contributes real data).
bool Coordinator::Complete(const Entry& e) const {
  for (int r = 0; r < size_; ++r) {
    if (!joined_[r] && !e.by_rank[r]) return false;
  }
  return true;
}

Response Coordinator::Decide(const std::string& name, const Entry& e) const {
  int first = 0;
  while (!e.by_rank[first]) ++first;
  const Request& ref = *e.by_rank[first];
  Response resp;
  resp.type = ref.type;
  resp.name = name;
  resp.dtype = ref.dtype;
  resp.op = ref.op;
  resp.prescale = ref.prescale;
  resp.postscale = ref.postscale;
  resp.root = ref.root;
  resp.group = ref.group;
  resp.group_size = ref.group_size;
  resp.set_ranks = ref.set_ranks;
  resp.on_device = ref.on_device;
  resp.error = Mismatch(name, e, ref);
  if (!resp.error.empty()) return resp;

  resp.shape = AgreedShape(ref, IsRagged(ref.type));
  for (int r = 0; r < size_; ++r) {
    if (!e.by_rank[r]) resp.absent.push_back(r);
  }
  if (ref.type == OpType::kAllgather) {
    resp.first_dims.assign(size_, 0);
    for (int r = 0; r < size_; ++r) {
      if (e.by_rank[r] && !e.by_rank[r]->shape.empty()) resp.first_dims[r] = e.by_rank[r]->shape[0];
    }
    // Each rank's shape fits (DecodeRequests); their rows together must too.
    int64_t rows = 0;
    bool overflow = false;
    for (int64_t d : resp.first_dims) overflow = overflow || __builtin_add_overflow(rows, d, &rows);
    TensorShape whole = resp.shape;
    whole.insert(whole.begin(), rows);
    // The row alone too: with no rows at all the whole is 0 bytes whatever a row's size.
    if (overflow || NumBytes(whole, DataTypeSize(resp.dtype)) < 0 ||
        NumBytes(resp.shape, DataTypeSize(resp.dtype)) < 0) {
      resp.error = "tensor \"" + name + "\": the ranks' rows together (" +
                   ShapeString(resp.first_dims) + ") overflow 64 bits";
      resp.first_dims.clear();
      resp.shape.clear();
    }
  }
  return resp;
}

std::string Coordinator::Mismatch(const std::string& name, const Entry& e,
                                  const Request& ref) const {
  auto fail = [&](const std::string& what, const std::string& detail) {
    return "tensor \"" + name + "\": mismatched " + what + " across ranks: " + detail;
  };
  using S = std::string;
  if (S d = Disagreement<OpType>(
          e.by_rank, [](const Request& r) { return r.type; },
          [](const OpType& t) { return S(OpTypeName(t)); }, describe_);
      !d.empty()) {
    return fail("operation", d);
  }
  if (S d = Disagreement<DataType>(
          e.by_rank, [](const Request& r) { return r.dtype; },
          [](const DataType& t) { return S(DataTypeName(t)); }, describe_);
      !d.empty()) {
    return fail("dtype", d);
  }
  if (S d = Disagreement<bool>(
          e.by_rank, [](const Request& r) { return r.on_device; },
          [](const bool& dev) { return S(dev ? "GPU (device memory)" : "CPU (host memory)"); },
          describe_);
      !d.empty()) {
    return fail("CPU/GPU device", d);
  }
  if (ref.on_device) {
    for (int r = 0; r < size_; ++r) {
      if (!e.by_rank[r]) {
        return "tensor \"" + name + "\": " + describe_(r) +
               " has joined; joined ranks cannot stand in for a device (GPU) tensor";
      }
    }
  }
  const bool ragged = IsRagged(ref.type);
  auto shape_key = [ragged](const Request& r) { return AgreedShape(r, ragged); };
  if (ragged && Disagreement<size_t>(
                    e.by_rank, [](const Request& r) { return r.shape.size(); },
                    [](const size_t& n) { return std::to_string(n) + " dims"; }, describe_) != "") {
    return fail("rank (number of dimensions)",
                Disagreement<TensorShape>(
                    e.by_rank, [](const Request& r) { return r.shape; },
                    [](const TensorShape& s) { return ShapeString(s); }, describe_));
  }
  if (S d = Disagreement<TensorShape>(
          e.by_rank, shape_key, [](const TensorShape& s) { return ShapeString(s); }, describe_);
      !d.empty()) {
    return fail(ragged ? "shape (dimensions after the first)" : "shape", d);
  }
  if (ref.type == OpType::kAllreduce || ref.type == OpType::kReduceScatter) {
    if (S d = Disagreement<ReduceOp>(
            e.by_rank, [](const Request& r) { return r.op; },
            [](const ReduceOp& o) { return S(ReduceOpName(o)); }, describe_);
        !d.empty()) {
      return fail("reduce op", d);
    }
    if (S d = Disagreement<std::pair<double, double>>(
            e.by_rank, [](const Request& r) { return std::make_pair(r.prescale, r.postscale); },
            [](const std::pair<double, double>& p) {
              return "prescale " + Num(p.first) + " postscale " + Num(p.second);
            },
            describe_);
        !d.empty()) {
      return fail("scaling", d);
    }
  }
  if (ref.type == OpType::kBroadcast) {
    if (S d = Disagreement<int32_t>(
            e.by_rank, [](const Request& r) { return r.root; },
            [](const int32_t& root) { return "root " + std::to_string(root); }, describe_);
        !d.empty()) {
      return fail("broadcast root", d);
    }
    if (ref.root < 0 || ref.root >= size_) {
      return "tensor \"" + name + "\": broadcast root " + std::to_string(ref.root) +
             " is not a rank of a set of " + std::to_string(size_);
    }
    if (!e.by_rank[ref.root]) {
      return "tensor \"" + name + "\": broadcast root " + describe_(ref.root) +
             " has joined (it has no data to send)";
    }
  }
  if (S d = Disagreement<std::pair<std::string, int32_t>>(
          e.by_rank, [](const Request& r) { return std::make_pair(r.group, r.group_size); },
          [](const std::pair<std::string, int32_t>& g) {
            return g.first.empty() ? S("ungrouped") : "group " + g.first;
          },
          describe_);
      !d.empty()) {
    return fail("grouping", d);
  }
  if (ref.type == OpType::kAddProcessSet || ref.type == OpType::kRemoveProcessSet) {
    if (S d = Disagreement<std::vector<int32_t>>(
            e.by_rank, [](const Request& r) { return r.set_ranks; },
            [](const std::vector<int32_t>& v) {
              std::string s = "[";
              for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
              return s + "]";
            },
            describe_);
        !d.empty()) {
      return fail("process set members", d);
    }
  }
  return "";
}

std::vector<Response> Coordinator::TakeReady() {
  std::vector<std::pair<uint64_t, std::string>> complete;
  for (const auto& [name, e] : table_) {
    if (Complete(e) || RefusingJoinedRank(e) >= 0) complete.push_back({e.first_seq, name});
  }
  std::sort(complete.begin(), complete.end());
  std::vector<Response> out;
  for (const auto& [seq, name] : complete) {
    auto node = table_.extract(name);
    if (stall_ != nullptr) stall_->Resolved(name);
    if (const int joined = RefusingJoinedRank(node.mapped()); joined >= 0) {
      // Refused at once, for the ranks that submitted it (see JoinRefusal).
      const Entry& e = node.mapped();
      const Request& ref = **std::find_if(e.by_rank.begin(), e.by_rank.end(),
                                          [](const auto& q) { return q.has_value(); });
      Response r;
      r.type = ref.type;
      r.name = name;
      r.dtype = ref.dtype;
      r.error = JoinRefusal(ref.type, name, describe_(joined));
      out.push_back(std::move(r));
      continue;
    }
    Response r = Decide(name, node.mapped());
    if (r.group.empty() || r.group_size <= 1) {
      out.push_back(std::move(r));
      continue;
    }
    auto& members = groups_[r.group];
    members.push_back({seq, std::move(r)});
    if (static_cast<int32_t>(members.size()) >= members.front().second.group_size) {
      for (auto& m : members) out.push_back(std::move(m.second));
      groups_.erase(out.back().group);
    }
  }
  bool all_joined = true;
  for (int r = 0; r < size_; ++r) all_joined = all_joined && joined_[r];
  if (all_joined) {
    Response j;
    j.type = OpType::kJoin;
    j.name = "join";
    j.last_joined_rank = last_joined_;
    out.push_back(std::move(j));
    joined_.assign(size_, false);
    last_joined_ = -1;
  }
  return out;
}

}  // namespace korovod
