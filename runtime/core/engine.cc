#include "runtime/core/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "runtime/collectives/collectives.h"
#include "runtime/core/autotune/autotuner.h"
#include "runtime/core/clock_sync.h"
#include "runtime/core/coordinator.h"
#include "runtime/core/fusion_planner.h"
#include "runtime/core/op_executor.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/response_cache.h"
#include "runtime/core/stall_inspector.h"
#include "runtime/core/timeline/timeline.h"

namespace korovod {
namespace {

// Flags in word 0 of a rank's per-cycle state.
constexpr uint64_t kFlagShutdown = 1;  // this rank asked the engine to stop
constexpr uint64_t kFlagJoined = 2;    // this rank has joined the set
constexpr uint64_t kFlagNews = 4;      // the coordinator has something to announce
constexpr int kHeaderWords = 2;        // flags, request payload bytes

uint64_t ElapsedNs(Clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

void Log(int rank, const std::string& msg) {
  std::fprintf(stderr, "[korovod rank %d] %s\n", rank, msg.c_str());
}

std::string RanksString(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string ExpandRank(const std::string& path, int rank) {
  std::string out = path;
  for (size_t at = out.find("{rank}"); at != std::string::npos; at = out.find("{rank}")) {
    out.replace(at, 6, std::to_string(rank));
  }
  return out;
}

// What the engine remembers about one process set.
struct SetState {
  int id = 0;
  ProcessSet set;
  ResponseCache cache;
  std::unordered_map<std::string, std::unique_ptr<PendingOp>> pending;
  std::vector<PendingOp*> unsent;  // to report to the coordinator, in submission order
  std::vector<int> invalid_bits;   // cache entries this rank found stale this cycle
  bool joined = false;
  std::unique_ptr<StallInspector> stall;     // set rank 0 only
  std::unique_ptr<Coordinator> coordinator;  // set rank 0 only
  // Reused negotiation buffers.
  std::vector<uint64_t> state, all_states;
  std::vector<std::byte> payloads;

  SetState(int id_, ProcessSet s, int cache_capacity)
      : id(id_), set(std::move(s)), cache(cache_capacity) {}
};

}  // namespace

struct Engine::Impl {
  std::unique_ptr<Communicator> comm;
  EngineConfig config;
  int64_t clock_offset_ns = 0;

  // Shared with submitting threads.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::vector<std::unique_ptr<PendingOp>> incoming;
  std::unordered_set<std::string> in_flight;  // "<set>/<name>"
  struct SetShape {
    int size;
    int my_rank;  // -1: not a member
  };
  std::unordered_map<int, SetShape> set_shapes;  // id -> shape, for submit-time checks
  std::unordered_set<int> joined_sets;
  std::map<int, uint64_t> noname_counter;
  bool shutdown_requested = false;
  bool stopped = false;
  Status health;
  EngineStats stats;
  // Timeline commands from StartTimeline/StopTimeline, applied by the background thread.
  std::optional<std::pair<std::string, bool>> timeline_start;
  bool timeline_stop = false;
  std::condition_variable timeline_done;
  Status timeline_result;
  uint64_t timeline_generation = 0;

  // Background thread only.
  std::map<int, std::unique_ptr<SetState>> sets;
  int next_set_id = 1;
  std::unique_ptr<Timeline> timeline;
  OpExecutor executor;
  std::unique_ptr<Autotuner> autotuner;
  std::optional<TunableParams> tuning_to_announce;
  std::optional<StallInspector::Finding> stall_to_announce;
  Clock::time_point last_autotune_record = Clock::now();
  uint64_t cycle_bytes = 0;
  int64_t fusion_threshold = 0;
  double cycle_time_ms = 1;
  std::thread thread;

  explicit Impl(std::unique_ptr<Communicator> c, const EngineConfig& cfg)
      : comm(std::move(c)), config(cfg), executor(*comm) {
    fusion_threshold = cfg.fusion_threshold_bytes;
    cycle_time_ms = cfg.cycle_time_ms;
  }

  int rank() const { return comm->rank(); }

  std::string DescribeSetRank(const SetState& s, int set_rank) const {
    return comm->DescribePeer(s.set.global_rank(set_rank));
  }

  SetState& AddSet(int id, ProcessSet ps) {
    auto st = std::make_unique<SetState>(id, std::move(ps), config.cache_capacity);
    const int words = (config.cache_capacity + 63) / 64;
    st->state.assign(kHeaderWords + 2 * words, 0);
    if (st->set.contains_me() && st->set.rank() == 0) {
      st->stall = std::make_unique<StallInspector>(config.stall_check, config.stall_shutdown, id,
                                                   st->set.size());
      SetState* raw = st.get();
      st->coordinator = std::make_unique<Coordinator>(
          st->set.size(), [this, raw](int r) { return DescribeSetRank(*raw, r); }, st->stall.get());
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      set_shapes[id] = {st->set.size(), st->set.rank()};
    }
    SetState& ref = *st;
    sets[id] = std::move(st);
    return ref;
  }

  // Drops set `id` (background thread, during the world's cycle: the loop over `sets` is at the
  // world's entry, which stays valid). Ops of this rank still in flight on it fail.
  void RemoveSet(int id) {
    auto it = sets.find(id);
    if (id == 0 || it == sets.end()) return;
    std::unique_ptr<SetState> st = std::move(it->second);
    sets.erase(it);
    {
      std::lock_guard<std::mutex> lock(mu);
      set_shapes.erase(id);
      joined_sets.erase(id);
    }
    for (auto& [name, op] : st->pending) {
      if (timeline) timeline->End(name);
      Complete(std::move(op),
               Aborted("tensor \"" + name + "\": process set " + std::to_string(id) + " " +
                       RanksString(st->set.ranks()) + " was removed before the op ran"));
    }
  }

  // ---- completion ----
  void Complete(std::unique_ptr<PendingOp> op, Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      in_flight.erase(std::to_string(op->set_id) + "/" + op->wire.name);
      ++stats.tensors;
    }
    // The callback runs before waiters wake, so whatever it does is visible once Wait returns.
    OpState& st = *op->state;
    DoneCallback cb;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      st.status = std::move(s);
      cb = std::move(st.callback);
    }
    if (cb) cb(st.status, st.result);
    {
      std::lock_guard<std::mutex> lock(st.mu);
      st.done = true;
    }
    st.cv.notify_all();
  }

  void FailEverything(const Status& s) {
    std::vector<std::unique_ptr<PendingOp>> ops;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (health.ok()) health = s;
      stopped = true;
      for (auto& op : incoming) ops.push_back(std::move(op));
      incoming.clear();
    }
    for (auto& [id, st] : sets) {
      for (auto& [name, op] : st->pending) ops.push_back(std::move(op));
      st->pending.clear();
      st->unsent.clear();
    }
    for (auto& op : ops) {
      const std::string name = op->wire.name;
      Complete(std::move(op), Status(s.code(), "tensor \"" + name + "\": " + s.message()));
    }
    std::lock_guard<std::mutex> lock(mu);
    timeline_done.notify_all();
  }

  // ---- intake ----
  void Classify(SetState& s, std::unique_ptr<PendingOp> op) {
    PendingOp* raw = op.get();
    if (timeline) timeline->NegotiateStart(raw->wire.name, OpTypeName(raw->wire.type));
    if (raw->wire.type == OpType::kJoin) s.joined = true;
    const bool cacheable =
        s.cache.capacity() > 0 && raw->wire.type != OpType::kJoin &&
        raw->wire.type != OpType::kAlltoall && raw->wire.type != OpType::kAddProcessSet &&
        raw->wire.type != OpType::kRemoveProcessSet && raw->wire.type != OpType::kBarrier;
    int bit = -1;
    ResponseCache::Lookup found =
        cacheable ? s.cache.Find(raw->wire, &bit) : ResponseCache::Lookup::kMiss;
    if (found == ResponseCache::Lookup::kHit) {
      raw->cache_bit = bit;
    } else {
      if (found == ResponseCache::Lookup::kInvalid) s.invalid_bits.push_back(bit);
      s.unsent.push_back(raw);
    }
    s.pending[raw->wire.name] = std::move(op);
  }

  void TakeIncoming() {
    std::vector<std::unique_ptr<PendingOp>> batch;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.swap(incoming);
    }
    for (auto& op : batch) {
      auto it = sets.find(op->set_id);
      if (it == sets.end()) {  // the set was checked at submit; defensive
        Complete(std::move(op), InvalidArgument("unknown process set"));
        continue;
      }
      Classify(*it->second, std::move(op));
    }
  }

  // ---- timeline commands ----
  void ApplyTimelineCommands() {
    std::optional<std::pair<std::string, bool>> start;
    bool stop = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      start.swap(timeline_start);
      stop = timeline_stop;
      timeline_stop = false;
    }
    if (!start && !stop) return;
    Status result;
    if (stop || start) {
      timeline.reset();
      executor.set_timeline(nullptr);
    }
    if (start) {
      TimelineOptions o;
      o.path = ExpandRank(start->first, rank());
      o.rank = rank();
      o.clock_offset_ns = clock_offset_ns;
      o.mark_cycles = start->second;
      auto t = Timeline::Open(o);
      if (t.ok()) {
        timeline = std::move(*t);
        executor.set_timeline(timeline.get());
      } else {
        result = t.status();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    timeline_result = result;
    ++timeline_generation;
    timeline_done.notify_all();
  }

  // ---- one process set's cycle ----
  // Returns a data plane failure; sets *stop when the engine must stop after this cycle.
  Status RunSetCycle(SetState& s, bool world, bool* stop, std::string* stop_reason);
  Status ExecuteResponses(SetState& s, std::vector<Response>& responses,
                          const std::vector<int>& cache_bits, bool any_joined);
  void Loop();
};

Status Engine::Impl::RunSetCycle(SetState& s, bool world, bool* stop, std::string* stop_reason) {
  const int n = s.set.size();
  const int me = s.set.rank();
  const int words = (config.cache_capacity + 63) / 64;
  const int stride = kHeaderWords + 2 * words;
  const bool busy = !s.pending.empty();
  const Clock::time_point t0 = Clock::now();

  // 1. This rank's state: flags, request payload size, cache bits ready / stale.
  std::fill(s.state.begin(), s.state.end(), 0);
  uint64_t* ready_bits = s.state.data() + kHeaderWords;
  uint64_t* invalid_bits = ready_bits + words;
  if (world) {
    std::lock_guard<std::mutex> lock(mu);
    if (shutdown_requested) s.state[0] |= kFlagShutdown;
  }
  // A joined rank reports the cached tensors it submitted before joining: they carry its data.
  if (s.joined) s.state[0] |= kFlagJoined;
  for (auto& [name, op] : s.pending) {
    if (op->cache_bit >= 0) ready_bits[op->cache_bit / 64] |= uint64_t{1} << (op->cache_bit % 64);
  }
  for (int b : s.invalid_bits) invalid_bits[b / 64] |= uint64_t{1} << (b % 64);
  s.invalid_bits.clear();
  if (s.coordinator && ((world && tuning_to_announce) || (stall_to_announce && world))) {
    s.state[0] |= kFlagNews;
  }
  std::string payload;
  if (!s.unsent.empty()) {
    std::vector<Request> reqs;
    reqs.reserve(s.unsent.size());
    for (PendingOp* op : s.unsent) {
      reqs.push_back(op->wire);
      op->sent = true;
    }
    s.unsent.clear();
    payload = EncodeRequests(reqs);
  }
  s.state[1] = payload.size();

  // 2. Everyone's state.
  s.all_states.resize(static_cast<size_t>(stride) * n);
  {
    std::vector<size_t> counts(n, stride);
    AllgatherOptions o;
    o.input = s.state.data();
    o.output = s.all_states.data();
    o.counts = counts;
    o.type = DataType::kInt64;
    o.set = &s.set;
    KV_RETURN_IF_ERROR(korovod::Allgather(*comm, o));
  }
  std::vector<bool> joined(n);
  bool any_payload = false, news = false, any_joined = false;
  int shutdown_rank = -1;
  for (int r = 0; r < n; ++r) {
    const uint64_t* st = s.all_states.data() + static_cast<size_t>(r) * stride;
    joined[r] = (st[0] & kFlagJoined) != 0;
    any_joined = any_joined || joined[r];
    if ((st[0] & kFlagShutdown) != 0 && shutdown_rank < 0) shutdown_rank = r;
    news = news || (st[0] & kFlagNews) != 0;
    any_payload = any_payload || st[1] > 0;
  }

  // 3. Stale cache entries go on every rank; this rank's ops on them are negotiated afresh.
  // Ready: every rank that has not joined has the tensor, and some rank has it.
  std::vector<uint64_t> invalid(words, 0), ready(words, ~uint64_t{0}), any(words, 0);
  for (int r = 0; r < n; ++r) {
    const uint64_t* st = s.all_states.data() + static_cast<size_t>(r) * stride;
    for (int w = 0; w < words; ++w) {
      invalid[w] |= st[kHeaderWords + words + w];
      any[w] |= st[kHeaderWords + w];
      if (!joined[r]) ready[w] &= st[kHeaderWords + w];
    }
  }
  for (int w = 0; w < words; ++w) ready[w] &= any[w];
  // A group is negotiated whole: when one member's entry goes stale (a new shape), its cached
  // siblings go too, or they would wait in the cache for a member the coordinator now holds.
  // Every rank has the same cache and the same invalid bits, so all drop the same entries.
  {
    std::set<std::string> stale_groups;
    for (int w = 0; w < words; ++w) {
      for (uint64_t bits = invalid[w]; bits != 0; bits &= bits - 1) {
        const int b = w * 64 + __builtin_ctzll(bits);
        if (s.cache.occupied(b) && !s.cache.response(b).group.empty()) {
          stale_groups.insert(s.cache.response(b).group);
        }
      }
    }
    if (!stale_groups.empty()) {
      for (int b = 0; b < s.cache.capacity(); ++b) {
        if (s.cache.occupied(b) && stale_groups.count(s.cache.response(b).group) != 0) {
          invalid[b / 64] |= uint64_t{1} << (b % 64);
        }
      }
    }
  }
  for (int w = 0; w < words; ++w) {
    uint64_t bits = invalid[w];
    while (bits != 0) {
      const int b = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      s.cache.Erase(b);
      for (auto& [name, op] : s.pending) {
        if (op->cache_bit == b) {
          op->cache_bit = -1;
          s.unsent.push_back(op.get());
        }
      }
    }
  }

  // 4. Cached tensors every contributing rank has ready run without the coordinator.
  std::vector<Response> responses;
  std::vector<int> cache_bits;
  {
    // Joined ranks without a ready tensor contribute its identity (absent).
    auto cached = [&](int b) {
      Response r = s.cache.response(b);
      for (int q = 0; q < n; ++q) {
        const uint64_t word = s.all_states[static_cast<size_t>(q) * stride + kHeaderWords + b / 64];
        if ((word >> (b % 64) & 1) != 0) continue;
        r.absent.push_back(q);
        if (r.type == OpType::kAllgather) r.first_dims[q] = 0;
      }
      if (!RunsWithJoinedRanks(r.type)) {
        for (int q : r.absent) {
          if (!joined[q]) continue;
          r.error = JoinRefusal(r.type, r.name, DescribeSetRank(s, q));
          break;
        }
      }
      responses.push_back(std::move(r));
      cache_bits.push_back(b);
    };
    // A cached op that cannot run with joined ranks fails as soon as a rank has it ready while a
    // joined rank lacks it (see JoinRefusal); the others get the same error when they submit it.
    std::vector<uint64_t> refused(words, 0);
    if (any_joined) {
      for (int w = 0; w < words; ++w) {
        uint64_t live = 0, joined_all = ~uint64_t{0};
        for (int r = 0; r < n; ++r) {
          const uint64_t word = s.all_states[static_cast<size_t>(r) * stride + kHeaderWords + w];
          if (joined[r]) {
            joined_all &= word;
          } else {
            live |= word;
          }
        }
        uint64_t bits = live & ~joined_all & ~ready[w] & ~invalid[w];
        while (bits != 0) {
          const int b = w * 64 + __builtin_ctzll(bits);
          bits &= bits - 1;
          if (s.cache.occupied(b) && !RunsWithJoinedRanks(s.cache.response(b).type)) {
            refused[w] |= uint64_t{1} << (b % 64);
          }
        }
      }
    }
    std::map<std::string, std::vector<int>> groups;
    for (int w = 0; w < words; ++w) {
      uint64_t bits = (ready[w] | refused[w]) & ~invalid[w];
      while (bits != 0) {
        const int b = w * 64 + __builtin_ctzll(bits);
        bits &= bits - 1;
        if (!s.cache.occupied(b)) continue;
        const Response& r = s.cache.response(b);
        if (!r.group.empty() && r.group_size > 1) {
          groups[r.group].push_back(b);
          continue;
        }
        cached(b);
      }
    }
    for (auto& [g, bits] : groups) {  // a group runs only once all its members are ready
      if (static_cast<int32_t>(bits.size()) < s.cache.response(bits.front()).group_size) continue;
      for (int b : bits) cached(b);
    }
  }
  // The coordinator watches partially ready cached tensors for stalls.
  if (s.stall) {
    const Clock::time_point now = Clock::now();
    for (int w = 0; w < words; ++w) {
      uint64_t any = 0;
      for (int r = 0; r < n; ++r) {
        if (!joined[r]) any |= s.all_states[static_cast<size_t>(r) * stride + kHeaderWords + w];
      }
      uint64_t partial = any & ~ready[w];
      while (partial != 0) {
        const int b = w * 64 + __builtin_ctzll(partial);
        partial &= partial - 1;
        if (!s.cache.occupied(b)) continue;
        for (int r = 0; r < n; ++r) {
          const uint64_t word = s.all_states[static_cast<size_t>(r) * stride + kHeaderWords + w];
          if (!joined[r] && (word >> (b % 64) & 1) != 0) {
            s.stall->Reported(s.cache.response(b).name, r, now);
          }
        }
      }
    }
    for (const Response& r : responses) s.stall->Resolved(r.name);
  }

  // 5. New tensors: the coordinator gathers every rank's requests and answers for all.
  ResponseList list;
  if (any_payload || news) {
    ++stats.full_negotiations;
    std::vector<size_t> counts(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts[r] = s.all_states[static_cast<size_t>(r) * stride + 1];
      total += counts[r];
    }
    s.payloads.resize(total);
    AllgatherOptions o;
    o.input = payload.data();
    o.output = s.payloads.data();
    o.counts = counts;
    o.type = DataType::kUint8;
    o.set = &s.set;
    KV_RETURN_IF_ERROR(korovod::Allgather(*comm, o));

    std::string encoded;
    uint64_t len = 0;
    if (s.coordinator) {
      size_t off = 0;
      const Clock::time_point now = Clock::now();
      for (int r = 0; r < n; ++r) {
        if (counts[r] == 0) continue;
        auto reqs = DecodeRequests(s.payloads.data() + off, counts[r]);
        off += counts[r];
        if (!reqs.ok()) return reqs.status().WithContext("from " + DescribeSetRank(s, r));
        if (timeline) {
          for (const Request& q : *reqs) timeline->NegotiateRankReady(q.name, s.set.global_rank(r));
        }
        s.coordinator->Ingest(r, *reqs, now);
      }
      list.responses = s.coordinator->TakeReady();
      if (world && tuning_to_announce) {
        list.tuning = tuning_to_announce;
        tuning_to_announce.reset();
      }
      if (world && stall_to_announce) {
        list.shutdown = true;
        list.shutdown_reason = stall_to_announce->report;
        stall_to_announce.reset();
      }
      encoded = EncodeResponses(list);
      len = encoded.size();
    }
    BroadcastOptions b;
    b.buffer = &len;
    b.count = 1;
    b.type = DataType::kInt64;
    b.set = &s.set;
    KV_RETURN_IF_ERROR(korovod::Broadcast(*comm, b));
    if (!s.coordinator) encoded.resize(len);
    b.buffer = encoded.data();
    b.count = len;
    b.type = DataType::kUint8;
    KV_RETURN_IF_ERROR(korovod::Broadcast(*comm, b));
    if (!s.coordinator) {
      auto decoded = DecodeResponses(reinterpret_cast<const std::byte*>(encoded.data()), len);
      if (!decoded.ok()) return decoded.status().WithContext("from the coordinator");
      list = std::move(*decoded);
    }
  }

  // Stall inspection on the coordinator: a report is logged here; a shutdown is announced to
  // every rank in the next cycle's response list.
  if (s.stall) {
    auto finding = s.stall->Check(
        Clock::now(), [&](int r) { return DescribeSetRank(s, r); }, joined);
    if (finding) {
      Log(rank(), finding->report);
      if (finding->shutdown) stall_to_announce = finding;
    }
  }
  if (busy) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.busy_cycles;
    stats.negotiation_ns += ElapsedNs(t0);
  }

  if (list.tuning) {
    fusion_threshold = list.tuning->fusion_threshold_bytes;
    cycle_time_ms = list.tuning->cycle_time_ms;
    comm->Tune(static_cast<size_t>(list.tuning->small_allreduce_max_bytes),
               static_cast<size_t>(list.tuning->tcp_stripe_min_bytes));
  }
  if (me >= 0 && !list.responses.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    stats.negotiated += list.responses.size();
  }
  for (size_t i = 0; i < list.responses.size(); ++i) cache_bits.push_back(-1);
  responses.insert(responses.end(), std::make_move_iterator(list.responses.begin()),
                   std::make_move_iterator(list.responses.end()));

  const Clock::time_point t1 = Clock::now();
  KV_RETURN_IF_ERROR(ExecuteResponses(s, responses, cache_bits, any_joined));
  if (!responses.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    stats.execution_ns += ElapsedNs(t1);
  }

  if (shutdown_rank >= 0) {
    *stop = true;
    *stop_reason = "the engine was shut down by " + DescribeSetRank(s, shutdown_rank);
  }
  if (list.shutdown) {
    *stop = true;
    *stop_reason = list.shutdown_reason;
  }
  return OkStatus();
}

Status Engine::Impl::ExecuteResponses(SetState& s, std::vector<Response>& responses,
                                      const std::vector<int>& cache_bits, bool any_joined) {
  if (responses.empty()) return OkStatus();
  const auto plan = PlanFusion(responses, fusion_threshold, config.fusion_tensor_max_bytes);
  if (timeline) {
    for (const Response& r : responses) {
      if (s.pending.count(r.name) != 0) {
        timeline->NegotiateEnd(r.name);
        timeline->Start(r.name, "QUEUE");
      }
    }
  }
  for (const FusedOp& f : plan) {
    const Response& head = responses[f.responses.front()];
    // Control responses: errors, join, process sets.
    if (!head.error.empty() || head.type == OpType::kJoin || head.type == OpType::kAddProcessSet ||
        head.type == OpType::kRemoveProcessSet) {
      // A join completes this rank's join op, whatever the rank named it.
      std::string name = head.name;
      if (head.type == OpType::kJoin && head.error.empty()) {
        for (auto& [n, p] : s.pending) {
          if (p->wire.type == OpType::kJoin) name = n;
        }
      }
      auto node = s.pending.extract(name);
      std::unique_ptr<PendingOp> op = node.empty() ? nullptr : std::move(node.mapped());
      if (op && timeline) timeline->End(name);
      if (!head.error.empty()) {
        if (op) Complete(std::move(op), InvalidArgument(head.error));
        continue;
      }
      if (head.type == OpType::kJoin) {
        s.joined = false;
        {
          std::lock_guard<std::mutex> lock(mu);
          joined_sets.erase(s.id);
        }
        if (op) {
          op->state->result.last_joined_rank =
              head.last_joined_rank >= 0 ? s.set.global_rank(head.last_joined_rank) : -1;
          Complete(std::move(op), OkStatus());
        }
        continue;
      }
      if (head.type == OpType::kRemoveProcessSet) {
        // Every rank drops the set here, in the same (world) cycle.
        const int id = head.set_ranks.empty() ? -1 : head.set_ranks.front();
        RemoveSet(id);
        if (op) Complete(std::move(op), OkStatus());
        continue;
      }
      // AddProcessSet: every rank creates the set here, in the same cycle, with the same id. The
      // set tables agree everywhere, so every rank refuses a duplicate alike.
      std::vector<int> ranks(head.set_ranks.begin(), head.set_ranks.end());
      auto ps = ProcessSet::Create(ranks, comm->size(), rank());
      if (ps.ok()) {
        for (const auto& [other_id, other] : sets) {
          if (other->set.ranks() != ps->ranks()) continue;
          ps = FailedPrecondition("process set " + RanksString(ps->ranks()) +
                                  " already exists (id " + std::to_string(other_id) +
                                  (other_id == 0 ? ", the world" : "") + ")");
          break;
        }
      }
      const int id = ps.ok() ? next_set_id++ : -1;
      if (ps.ok()) AddSet(id, std::move(*ps));
      if (op) {
        op->state->result.process_set_id = id;
        Complete(std::move(op), ps.ok() ? OkStatus() : ps.status());
      }
      continue;
    }
    std::vector<OpExecutor::Item> items;
    items.reserve(f.responses.size());
    for (int i : f.responses) {
      auto it = s.pending.find(responses[i].name);
      items.push_back({&responses[i], it == s.pending.end() ? nullptr : it->second.get(), {}});
      if (timeline && it != s.pending.end()) timeline->End(responses[i].name);  // QUEUE
    }
    uint64_t bytes = 0;
    Status st = executor.Run(s.set, items, &bytes);
    cycle_bytes += bytes;
    {
      std::lock_guard<std::mutex> lock(mu);
      stats.bytes += bytes;
      ++stats.collectives;
    }
    if (!st.ok()) return st;
    for (size_t k = 0; k < items.size(); ++k) {
      const int idx = f.responses[k];
      const Response& r = responses[idx];
      if (cache_bits[idx] >= 0) {
        s.cache.Touch(cache_bits[idx]);
      } else if (!any_joined && s.cache.capacity() > 0 && r.type != OpType::kAlltoall &&
                 r.type != OpType::kBarrier) {
        Request mine;
        if (items[k].op) mine = items[k].op->wire;
        const int evicted = s.cache.Put(r, mine);
        if (evicted >= 0) {
          for (auto& [name, op] : s.pending) {
            if (op->cache_bit == evicted) {
              op->cache_bit = -1;
              s.unsent.push_back(op.get());
            }
          }
        }
      }
      if (items[k].op == nullptr) continue;
      auto node = s.pending.extract(r.name);
      if (cache_bits[idx] >= 0) {
        std::lock_guard<std::mutex> lock(mu);
        ++stats.cache_hits;
      }
      Complete(std::move(node.mapped()), items[k].status);
    }
  }
  return OkStatus();
}

void Engine::Impl::Loop() {
  Clock::time_point next = Clock::now();
  std::string stop_reason;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu);
      wake.wait_until(lock, next, [&] { return shutdown_requested; });
    }
    const Clock::time_point start = Clock::now();
    next = start + std::chrono::microseconds(static_cast<int64_t>(cycle_time_ms * 1000));
    ApplyTimelineCommands();
    if (timeline) timeline->MarkCycle();
    TakeIncoming();
    {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.cycles;
    }
    bool stop = false;
    Status failure;
    cycle_bytes = 0;
    for (auto& [id, st] : sets) {
      if (!st->set.contains_me()) continue;
      failure = RunSetCycle(*st, id == 0, &stop, &stop_reason);
      if (!failure.ok() || stop) break;  // shutdown is agreed in the world's cycle, first
    }
    if (!failure.ok()) {
      (void)comm->MarkBroken(failure);
      Log(rank(), "engine stopped: " + failure.ToString());
      FailEverything(failure);
      return;
    }
    if (autotuner && cycle_bytes > 0) {
      const double secs =
          std::chrono::duration<double>(Clock::now() - last_autotune_record).count();
      last_autotune_record = Clock::now();
      if (autotuner->Record(cycle_bytes, secs)) tuning_to_announce = autotuner->current();
    } else if (autotuner) {
      // Idle cycles between steps still count toward the sample's elapsed time.
    }
    if (stop) {
      FailEverything(Aborted(stop_reason));
      timeline.reset();
      return;
    }
  }
}

// ---- public API ----

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { Shutdown(); }

int Engine::rank() const { return impl_->comm->rank(); }
int Engine::size() const { return impl_->comm->size(); }

StatusOr<std::unique_ptr<Engine>> Engine::Start(std::unique_ptr<Communicator> comm,
                                                const EngineConfig& config) {
  KV_RETURN_IF_ERROR(config.Validate());
  if (comm == nullptr) return InvalidArgument("engine needs a communicator");
  auto impl = std::make_unique<Impl>(std::move(comm), config);
  Communicator& c = *impl->comm;

  // Every rank must run with the same settings: fusion plans and cache bits depend on them.
  struct Settings {
    int64_t fusion;
    int64_t fusion_tensor_max;
    double cycle;
    int64_t cache;
    int64_t stall_check;
    int64_t stall_shutdown;
    int64_t autotune;
  } mine{config.fusion_threshold_bytes, config.fusion_tensor_max_bytes,
         config.cycle_time_ms,          config.cache_capacity,
         config.stall_check.count(),    config.stall_shutdown.count(),
         config.autotune ? 1 : 0};
  std::vector<Settings> all(c.size());
  {
    constexpr size_t kWords = sizeof(Settings) / 8;
    std::vector<size_t> counts(c.size(), kWords);
    AllgatherOptions o;
    o.input = &mine;
    o.output = all.data();
    o.counts = counts;
    o.type = DataType::kInt64;
    KV_RETURN_IF_ERROR(korovod::Allgather(c, o));
  }
  for (int r = 1; r < c.size(); ++r) {
    auto differs = [&](const char* var, auto a, auto b) -> Status {
      if (a == b) return OkStatus();
      return InvalidArgument(std::string("engine settings differ between ranks: ") + var + " is " +
                             std::to_string(a) + " on " + c.DescribePeer(0) + " but " +
                             std::to_string(b) + " on " + c.DescribePeer(r));
    };
    KV_RETURN_IF_ERROR(differs("KOROVOD_FUSION_THRESHOLD", all[0].fusion, all[r].fusion));
    KV_RETURN_IF_ERROR(
        differs("KOROVOD_FUSION_TENSOR_MAX", all[0].fusion_tensor_max, all[r].fusion_tensor_max));
    KV_RETURN_IF_ERROR(differs("KOROVOD_CYCLE_TIME", all[0].cycle, all[r].cycle));
    KV_RETURN_IF_ERROR(differs("KOROVOD_CACHE_CAPACITY", all[0].cache, all[r].cache));
    KV_RETURN_IF_ERROR(
        differs("KOROVOD_STALL_CHECK_TIME_SECONDS (ms)", all[0].stall_check, all[r].stall_check));
    KV_RETURN_IF_ERROR(differs("KOROVOD_STALL_SHUTDOWN_TIME_SECONDS (ms)", all[0].stall_shutdown,
                               all[r].stall_shutdown));
    KV_RETURN_IF_ERROR(differs("KOROVOD_AUTOTUNE", all[0].autotune, all[r].autotune));
  }
  KV_ASSIGN_OR_RETURN(impl->clock_offset_ns, MeasureClockOffset(c, 8, c.OpDeadline()));

  impl->AddSet(0, ProcessSet::World(c.size(), c.rank()));
  if (!config.timeline_path.empty()) {
    const bool every_rank = config.timeline_path.find("{rank}") != std::string::npos;
    if (every_rank || c.rank() == 0) {
      impl->timeline_start = std::make_pair(config.timeline_path, config.timeline_mark_cycles);
      impl->ApplyTimelineCommands();
      KV_RETURN_IF_ERROR(impl->timeline_result);
    }
  }
  if (config.autotune && c.rank() == 0) {
    AutotuneOptions a;
    a.initial.fusion_threshold_bytes = config.fusion_threshold_bytes;
    a.initial.cycle_time_ms = config.cycle_time_ms;
    a.initial.small_allreduce_max_bytes = static_cast<int64_t>(c.small_allreduce_max_bytes());
    a.initial.tcp_stripe_min_bytes = static_cast<int64_t>(c.options().tcp_stripe_min);
    a.log_path = config.autotune_log;
    a.warmup_samples = config.autotune_warmup_samples;
    a.cycles_per_sample = config.autotune_cycles_per_sample;
    a.samples_per_trial = config.autotune_samples_per_trial;
    a.max_trials = config.autotune_max_trials;
    KV_ASSIGN_OR_RETURN(impl->autotuner, Autotuner::Create(a));
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Loop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

StatusOr<OpHandle> Engine::Submit(OpRequest req, DoneCallback done) {
  KV_ASSIGN_OR_RETURN(auto handles, SubmitGroup(
                                        [&] {
                                          std::vector<OpRequest> v;
                                          v.push_back(std::move(req));
                                          return v;
                                        }(),
                                        std::move(done)));
  return handles.front();
}

namespace {

Status CheckRequest(const OpRequest& r, int set_size, int set_rank) {
  const std::string who = "tensor \"" + r.name + "\": ";
  for (int64_t d : r.shape) {
    if (d < 0) return InvalidArgument(who + "negative dimension in shape " + ShapeString(r.shape));
  }
  const int64_t elems = NumElements(r.shape);
  const bool has_data = r.type != OpType::kBarrier && r.type != OpType::kJoin &&
                        r.type != OpType::kAddProcessSet && r.type != OpType::kRemoveProcessSet;
  if (has_data && elems > 0 && r.input == nullptr) {
    if (!(r.type == OpType::kBroadcast && set_rank != r.root)) {
      return InvalidArgument(who + "null input for " + std::to_string(elems) + " elements");
    }
  }
  switch (r.type) {
    case OpType::kAllgather:
    case OpType::kAlltoall:
    case OpType::kReduceScatter:
      if (r.shape.empty()) {
        return InvalidArgument(who + OpTypeName(r.type) +
                               " needs a tensor with at least one dimension");
      }
      break;
    case OpType::kBroadcast:
      if (r.root < 0 || r.root >= set_size) {
        return InvalidArgument(who + "broadcast root " + std::to_string(r.root) +
                               " is not a rank of a set of " + std::to_string(set_size));
      }
      break;
    default:
      break;
  }
  if (r.type == OpType::kAlltoall && !r.splits.empty()) {
    if (static_cast<int>(r.splits.size()) != set_size) {
      return InvalidArgument(who + "alltoall has " + std::to_string(r.splits.size()) +
                             " splits for a set of " + std::to_string(set_size) + " ranks");
    }
    int64_t sum = 0;
    for (int64_t v : r.splits) {
      if (v < 0) return InvalidArgument(who + "alltoall split is negative");
      sum += v;
    }
    if (sum != r.shape[0]) {
      return InvalidArgument(who + "alltoall splits sum to " + std::to_string(sum) +
                             " but the first dimension is " + std::to_string(r.shape[0]));
    }
  }
  if (r.type == OpType::kAlltoall && r.splits.empty() && r.shape[0] % set_size != 0) {
    return InvalidArgument(who + "alltoall without splits needs the first dimension (" +
                           std::to_string(r.shape[0]) + ") divisible by the set size (" +
                           std::to_string(set_size) + ")");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<OpHandle>> Engine::SubmitGroup(std::vector<OpRequest> requests,
                                                    DoneCallback done) {
  std::vector<DoneCallback> each(requests.size(), done);
  return SubmitGroup(std::move(requests), std::move(each));
}

StatusOr<std::vector<OpHandle>> Engine::SubmitGroup(std::vector<OpRequest> requests,
                                                    std::vector<DoneCallback> done) {
  if (requests.empty()) return InvalidArgument("empty group");
  if (done.size() != requests.size()) {
    return InvalidArgument("SubmitGroup: " + std::to_string(done.size()) + " callbacks for " +
                           std::to_string(requests.size()) + " requests");
  }
  Impl& im = *impl_;
  std::vector<std::unique_ptr<PendingOp>> ops;
  std::vector<OpHandle> handles;
  std::lock_guard<std::mutex> lock(im.mu);
  if (!im.health.ok() || im.stopped) {
    return im.health.ok() ? FailedPrecondition("the engine has shut down") : im.health;
  }
  std::string group;
  if (requests.size() > 1) {
    for (const OpRequest& r : requests) {
      if (r.type != OpType::kAllreduce) return InvalidArgument("groups are allreduce only");
    }
  }
  std::unordered_set<std::string> names_in_call;
  for (OpRequest& r : requests) {
    auto shape_it = im.set_shapes.find(r.process_set);
    if (shape_it == im.set_shapes.end()) {
      return InvalidArgument("tensor \"" + r.name + "\": unknown process set " +
                             std::to_string(r.process_set));
    }
    if (shape_it->second.my_rank < 0) {
      return InvalidArgument("tensor \"" + r.name +
                             "\": this rank is not a member of process set " +
                             std::to_string(r.process_set));
    }
    if (im.joined_sets.count(r.process_set) != 0) {
      return FailedPrecondition("tensor \"" + r.name + "\": this rank has joined process set " +
                                std::to_string(r.process_set) +
                                "; it submits nothing until the join completes");
    }
    if (r.name.empty()) {
      const uint64_t n = im.noname_counter[static_cast<int>(r.type) * 1000 + r.process_set]++;
      std::string lower = OpTypeName(r.type);
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      r.name = lower + ".noname." + std::to_string(n);
    }
    KV_RETURN_IF_ERROR(CheckRequest(r, shape_it->second.size, shape_it->second.my_rank));
    const std::string key = std::to_string(r.process_set) + "/" + r.name;
    if (im.in_flight.count(key) != 0 || !names_in_call.insert(key).second) {
      return InvalidArgument("tensor \"" + r.name +
                             "\" is already in flight on this rank (names "
                             "must be unique among ops not yet completed)");
    }
  }
  if (requests.size() > 1) group = requests.front().name + "+" + std::to_string(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    OpRequest& r = requests[i];
    auto op = std::make_unique<PendingOp>();
    op->set_id = r.process_set;
    op->wire.type = r.type;
    op->wire.name = r.name;
    op->wire.dtype = r.dtype;
    op->wire.shape = r.shape;
    op->wire.op = r.op;
    op->wire.prescale = r.prescale;
    op->wire.postscale = r.postscale;
    op->wire.root = r.root;
    op->wire.group = group;
    op->wire.group_size = group.empty() ? 0 : static_cast<int32_t>(requests.size());
    op->wire.set_ranks = r.members;
    if (r.type == OpType::kAlltoall && r.splits.empty()) {
      const int n = im.set_shapes[r.process_set].size;
      r.splits.assign(n, r.shape[0] / n);
    }
    op->state = std::make_shared<OpState>();
    op->state->name = r.name;
    op->state->callback = std::move(done[i]);
    op->request = std::move(r);
    im.in_flight.insert(std::to_string(op->set_id) + "/" + op->wire.name);
    if (op->wire.type == OpType::kJoin) im.joined_sets.insert(op->set_id);
    handles.emplace_back(op->state);
    ops.push_back(std::move(op));
  }
  for (auto& op : ops) im.incoming.push_back(std::move(op));
  return handles;
}

StatusOr<int> Engine::AddProcessSet(std::vector<int> ranks, Deadline deadline) {
  std::sort(ranks.begin(), ranks.end());
  OpRequest r;
  r.type = OpType::kAddProcessSet;
  r.name = "process_set.add";
  for (int x : ranks) {
    r.name += '.';
    r.name += std::to_string(x);
  }
  r.members.assign(ranks.begin(), ranks.end());
  // Validated here so that a bad list fails on this rank at once.
  KV_RETURN_IF_ERROR(ProcessSet::Create(ranks, size(), rank()).status());
  OpHandle h;
  { KV_ASSIGN_OR_RETURN(h, Submit(std::move(r))); }
  // The wire request carries the members (set through the pending op below).
  KV_RETURN_IF_ERROR(h.Wait(deadline));
  return h.result().process_set_id;
}

StatusOr<bool> Engine::RemoveProcessSet(int id, Deadline deadline) {
  if (id == 0) return false;  // the world stays
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->set_shapes.count(id) == 0) return false;
  }
  OpRequest r;
  r.type = OpType::kRemoveProcessSet;
  r.name = "process_set.remove." + std::to_string(id);
  r.members = {id};
  OpHandle h;
  { KV_ASSIGN_OR_RETURN(h, Submit(std::move(r))); }
  KV_RETURN_IF_ERROR(h.Wait(deadline));
  return true;
}

StatusOr<Engine::SetInfo> Engine::ProcessSetInfo(int id) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->set_shapes.find(id);
  if (it == impl_->set_shapes.end()) {
    return InvalidArgument("unknown process set " + std::to_string(id));
  }
  return SetInfo{it->second.size, it->second.my_rank};
}

Status Engine::StartTimeline(const std::string& path, bool mark_cycles) {
  Impl& im = *impl_;
  std::unique_lock<std::mutex> lock(im.mu);
  if (im.stopped) return FailedPrecondition("the engine has shut down");
  im.timeline_start = std::make_pair(path, mark_cycles);
  const uint64_t gen = im.timeline_generation;
  im.timeline_done.wait(lock, [&] { return im.timeline_generation != gen || im.stopped; });
  return im.timeline_result;
}

Status Engine::StopTimeline() {
  Impl& im = *impl_;
  std::unique_lock<std::mutex> lock(im.mu);
  if (im.stopped) return OkStatus();
  im.timeline_stop = true;
  const uint64_t gen = im.timeline_generation;
  im.timeline_done.wait(lock, [&] { return im.timeline_generation != gen || im.stopped; });
  return im.timeline_result;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineStats s = impl_->stats;
  s.fusion_threshold_bytes = impl_->fusion_threshold;
  s.cycle_time_ms = impl_->cycle_time_ms;
  return s;
}

Status Engine::health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->health;
}

void Engine::Shutdown() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->shutdown_requested = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

bool OpHandle::Poll() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

Status OpHandle::Wait(Deadline deadline) const {
  std::unique_lock<std::mutex> lock(state_->mu);
  if (deadline.at() == Clock::time_point::max()) {
    state_->cv.wait(lock, [&] { return state_->done; });
  } else if (!state_->cv.wait_until(lock, deadline.at(), [&] { return state_->done; })) {
    return DeadlineExceeded("tensor \"" + state_->name +
                            "\" did not complete before the deadline "
                            "(it is still in flight)");
  }
  return state_->status;
}

}  // namespace korovod
