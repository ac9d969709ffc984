#include "runtime/core/engine.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <thread>

#include "common/log.h"
#include "runtime/core/admission.h"
#include "runtime/core/autotune/autotuner.h"
#include "runtime/core/clock_sync.h"
#include "runtime/core/collective_lanes.h"
#include "runtime/core/coordinator.h"
#include "runtime/core/device_executor.h"
#include "runtime/core/fusion_planner.h"
#include "runtime/core/negotiation.h"
#include "runtime/core/op_executor.h"
#include "runtime/core/pending_op.h"
#include "runtime/core/set_state.h"
#include "runtime/core/settings_agreement.h"
#include "runtime/core/stall_inspector.h"
#include "runtime/core/straggler_monitor.h"
#include "runtime/core/timeline/timeline.h"

namespace korovod {
namespace {

uint64_t ElapsedNs(Clock::time_point since) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - since).count());
}

std::string RanksString(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// Errors, join and process set changes complete ops without a collective.
bool IsControl(const Response& r) {
  return !r.error.empty() || r.type == OpType::kJoin || r.type == OpType::kAddProcessSet ||
         r.type == OpType::kRemoveProcessSet;
}

// Allreduces of the world at least this large run on a collective lane; smaller ones are latency
// bound either way and run on the engine thread, without a hand-off to another thread.
constexpr uint64_t kLaneMinBytes = 64 << 10;

}  // namespace

struct Engine::Impl {
  std::unique_ptr<Communicator> comm;
  EngineConfig config;
  int64_t clock_offset_ns = 0;

  // Shared with submitting threads.
  mutable std::mutex mu;
  std::condition_variable wake;
  std::vector<std::unique_ptr<PendingOp>> incoming;
  std::atomic<uint64_t> submitted{0};  // ops ever submitted: the gather window watches it
  Clock::time_point last_submit;       // guarded by mu: the gather window counts quiet from it
  Admission admission;
  bool shutdown_requested = false;
  bool stopped = false;
  bool stopped_in_order = false;  // guarded by mu: stopped by an agreed shutdown, not a failure
  bool stop_in_order = false;     // the background thread's: what RunSetCycle's stop was
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
  DeviceExecutor device_executor;  // ops on device tensors (OpRequest::device >= 0)
  int device_in_use = -1;          // guarded by mu: the device of this rank's device tensors
  std::unique_ptr<Autotuner> autotuner;
  DeviceBackend device;
  Announcements to_announce;  // by the world's coordinator, in its next response list
  Clock::time_point last_autotune_record = Clock::now();
  std::atomic<uint64_t> cycle_bytes{0};  // lanes add theirs as they finish
  int64_t fusion_threshold = 0;
  double cycle_time_ms = 1;
  // The world's who-waits-for-whom (guarded by `mu`: stats() and StragglerLine() read it), and
  // this rank's current activity in the timeline's "waits" lane (empty: none).
  std::unique_ptr<StragglerMonitor> stragglers;
  std::string waits_lane;
  // Collective lanes (TCP with KOROVOD_COLLECTIVE_LANES > 1): large allreduces of the world run
  // there, several at once, while this thread negotiates the next ones. Declared after `comm`:
  // destroyed (drained and joined) first.
  std::unique_ptr<CollectiveLanes> lanes;
  bool lane_failed = false;  // guarded by mu: wakes an idle engine to stop
  std::thread thread;

  Impl(std::unique_ptr<Communicator> c, const EngineConfig& cfg, DeviceBackend device)
      : comm(std::move(c)), config(cfg), executor(*comm), device_executor(*comm, device) {
    fusion_threshold = cfg.fusion_threshold_bytes;
    cycle_time_ms = cfg.cycle_time_ms;
    executor.set_pipeline(
        cfg.fusion_pipeline == EngineConfig::Pipeline::kOn ||
        (cfg.fusion_pipeline == EngineConfig::Pipeline::kAuto && !comm->oversubscribed()));
  }

  int rank() const { return comm->rank(); }

  // Submit's checks of a device tensor (mu held): a backend, a supported op, one device per rank
  // (NCCL's rule): the device of the rank's first device tensor is its device from then on.
  Status CheckDeviceTensor(const OpRequest& r) {
    if (r.device < 0) return OkStatus();
    const std::string who = "tensor \"" + r.name + "\" on device " + std::to_string(r.device);
    if (!device.enabled()) {
      return FailedPrecondition(who +
                                ": this engine has no device backend (built without CUDA "
                                "and NCCL, or started without a GPU)");
    }
    const bool sized_later = r.type == OpType::kAllgather || r.type == OpType::kAlltoall;
    if (r.type != OpType::kAllreduce && r.type != OpType::kBroadcast &&
        r.type != OpType::kReduceScatter && !sized_later) {
      return InvalidArgument(who + ": " + OpTypeName(r.type) +
                             " is not an operation on device tensors (allreduce, broadcast, "
                             "allgather, alltoall and reducescatter are)");
    }
    if (sized_later && !r.allocate && r.output == nullptr) {
      return InvalidArgument(who + ": a device " + OpTypeName(r.type) +
                             " needs an output allocator");
    }
    if (r.device >= device.api->DeviceCount()) {
      return InvalidArgument(who + ": " + std::to_string(device.api->DeviceCount()) +
                             " devices visible");
    }
    if (NumElements(r.shape) > 0 && (r.input == nullptr || (r.output == nullptr && !sized_later))) {
      return InvalidArgument(who + ": null device buffer");
    }
    if (device_in_use >= 0 && r.device != device_in_use) {
      return InvalidArgument(who + ": rank " + std::to_string(rank()) + " drives device " +
                             std::to_string(device_in_use) +
                             "; one device per rank (set it with torch.cuda.set_device("
                             "hvd.local_rank()))");
    }
    device_in_use = r.device;
    return OkStatus();
  }

  SetState& AddSet(int id, ProcessSet ps) {
    auto st = std::make_unique<SetState>(id, std::move(ps), config.cache_capacity);
    st->state.assign(StateWordCount(config.cache_capacity), 0);
    if (st->set.contains_me() && st->set.rank() == 0) {
      st->stall = std::make_unique<StallInspector>(config.stall_check, config.stall_shutdown, id,
                                                   st->set.size());
      SetState* raw = st.get();
      st->coordinator = std::make_unique<Coordinator>(
          st->set.size(), [this, raw](int r) { return raw->DescribeRank(*comm, r); },
          st->stall.get());
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      admission.AddSet(id, st->set.size(), st->set.rank());
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
    device_executor.ForgetSet(id);
    {
      std::lock_guard<std::mutex> lock(mu);
      admission.RemoveSet(id);
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
      admission.Release(op->set_id, op->report.name);
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
      const std::string name = op->report.name;
      Complete(std::move(op), Status(s.code(), "tensor \"" + name + "\": " + s.message()));
    }
    std::lock_guard<std::mutex> lock(mu);
    timeline_done.notify_all();
  }

  // ---- intake ----
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
      if (timeline) timeline->NegotiateStart(op->report.name, OpTypeName(op->report.type));
      EnterNegotiation(*it->second, std::move(op));
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
    DrainLanes();  // the lanes' executors record into the timeline being replaced
    if (stop || start) {
      if (timeline && !waits_lane.empty()) timeline->End("waits");
      waits_lane.clear();
      timeline.reset();
      executor.set_timeline(nullptr);
      device_executor.set_timeline(nullptr);
      if (lanes) lanes->set_timeline(nullptr);
    }
    if (start) {
      TimelineOptions o;
      o.path = ExpandTimelinePath(start->first, rank());
      o.rank = rank();
      o.clock_offset_ns = clock_offset_ns;
      o.mark_cycles = start->second;
      auto t = Timeline::Open(o);
      if (t.ok()) {
        timeline = std::move(*t);
        executor.set_timeline(timeline.get());
        device_executor.set_timeline(timeline.get());
        if (lanes) lanes->set_timeline(timeline.get());
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
  // *again: this rank has ops in flight in the set and the next cycle should start at once (see
  // "When a cycle starts" in docs/engine.md).
  Status RunSetCycle(SetState& s, bool world, bool* stop, std::string* stop_reason, bool* again);
  void WaitForCycle(std::unique_lock<std::mutex>& lock, Clock::time_point next);
  void InspectStalls(SetState& s, const std::vector<bool>& joined);
  void ApplyTuning(const TunableParams& tuning);
  Status ExecuteResponses(SetState& s, const CycleResponses& cycle, bool any_joined);
  void ApplyControlResponse(SetState& s, const Response& head);
  void CompleteJoin(SetState& s, const Response& head, std::unique_ptr<PendingOp> op);
  void CreateProcessSet(const Response& head, std::unique_ptr<PendingOp> op);
  Status RunCollective(SetState& s, const FusedOp& f, const CycleResponses& cycle, bool any_joined);
  void ObserveWaits(const StateExchange& x, const CacheAgreement& agreed);
  std::unique_ptr<PendingOp> Retire(SetState& s, const Response& r, int cache_bit, bool any_joined);
  void RecordAutotuneSample();
  void Loop();

  // ---- collective lanes ----
  bool OnLane(const SetState& s, const FusedOp& f, const CycleResponses& cycle) const;
  void Dispatch(SetState& s, const FusedOp& f, const CycleResponses& cycle, bool any_joined);
  void LaneFinished(CollectiveLanes::Job& job, std::vector<OpExecutor::Item>& items,
                    const Status& data_plane, uint64_t bytes, uint64_t segments);
  void DrainLanes() {
    if (lanes) lanes->Drain();
  }
};

// The steps are those of "One cycle" in docs/engine.md.
Status Engine::Impl::RunSetCycle(SetState& s, bool world, bool* stop, std::string* stop_reason,
                                 bool* again) {
  const bool busy = !s.pending.empty();
  const Clock::time_point t0 = Clock::now();

  bool shutdown = false;
  if (world) {
    std::lock_guard<std::mutex> lock(mu);
    shutdown = shutdown_requested;
  }
  KV_ASSIGN_OR_RETURN(const StateExchange x,
                      ExchangeStates(*comm, s, shutdown, world && to_announce.any()));
  const CacheAgreement agreed = AgreeOnCache(s, x);
  if (world && stragglers) ObserveWaits(x, agreed);
  CycleResponses cycle = CachedResponses(*comm, s, x, agreed);
  if (s.stall) WatchCachedStalls(s, x, agreed, cycle.responses);
  ResponseList list;
  if (x.any_payload || x.news) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ++stats.full_negotiations;
    }
    KV_ASSIGN_OR_RETURN(
        list, NegotiateNewRequests(*comm, s, x, timeline.get(), world ? &to_announce : nullptr));
  }
  if (s.stall) InspectStalls(s, x.joined);
  if (busy) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.busy_cycles;
    stats.negotiation_ns += ElapsedNs(t0);
  }

  // Step 4: new parameters apply before this cycle's fusion plan; then cached responses run
  // first, negotiated ones after.
  if (list.tuning) ApplyTuning(*list.tuning);
  if (s.set.rank() >= 0 && !list.responses.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    stats.negotiated += list.responses.size();
  }
  cycle.cache_bits.resize(cycle.cache_bits.size() + list.responses.size(), -1);
  cycle.responses.insert(cycle.responses.end(), std::make_move_iterator(list.responses.begin()),
                         std::make_move_iterator(list.responses.end()));
  const Clock::time_point t1 = Clock::now();
  KV_RETURN_IF_ERROR(ExecuteResponses(s, cycle, x.any_joined));
  if (!cycle.responses.empty()) {
    std::lock_guard<std::mutex> lock(mu);
    stats.execution_ns += ElapsedNs(t1);
  }

  // With ops in flight, this rank waits for the others inside the next exchange, so that the last
  // rank to submit completes it at once, unless every rank is waiting and nothing moved (then the
  // cycle time paces the ranks, and the next submit wakes its engine).
  const bool moved = !cycle.responses.empty() || x.any_payload || x.news;
  const bool all_in_flight =
      std::all_of(x.in_flight.begin(), x.in_flight.end(), [](bool b) { return b; });
  *again = !s.pending.empty() && (moved || !all_in_flight);
  if (x.shutdown_rank >= 0) {
    *stop = true;
    *stop_reason = "the engine was shut down by " + s.DescribeRank(*comm, x.shutdown_rank);
    stop_in_order = true;
  }
  if (list.shutdown) {  // the stall inspector's: a failure, whatever else asked to stop
    *stop = true;
    *stop_reason = list.shutdown_reason;
    stop_in_order = false;
  }
  return OkStatus();
}

// The world's exchange into the straggler monitor, this rank's totals into the stats, and this
// rank's activity into the timeline's "waits" lane.
void Engine::Impl::ObserveWaits(const StateExchange& x, const CacheAgreement& agreed) {
  const std::vector<StragglerMonitor::RankView> views = RankViews(x, agreed);
  {
    std::lock_guard<std::mutex> lock(mu);
    stragglers->Observe(Clock::now(), views);
    const StragglerMonitor::RankTotals& t = stragglers->totals(rank());
    stats.waited_for_others_ns = static_cast<uint64_t>(t.waited_for_others_s * 1e9);
    stats.others_waited_for_me_ns = static_cast<uint64_t>(t.others_waited_for_me_s * 1e9);
    stats.waited_before_first_ns = static_cast<uint64_t>(t.waited_before_first_s * 1e9);
    stats.steps = stragglers->steps();
    stats.straggler_steps = t.last_steps;
  }
  if (!timeline) return;
  const StragglerMonitor::Activity me = StragglerMonitor::Activities(views)[rank()];
  const std::string now = me.waited_for ? "OTHERS_WAIT_FOR_ME"
                          : me.waiting  ? "WAIT_FOR_OTHERS"
                                        : "";
  if (now == waits_lane) return;
  if (!waits_lane.empty()) timeline->End("waits");
  if (!now.empty()) timeline->Start("waits", now);
  waits_lane = now;
}

// On the coordinator: a stall report is logged here; a stall shutdown is announced to every rank in
// the next world cycle's response list.
void Engine::Impl::InspectStalls(SetState& s, const std::vector<bool>& joined) {
  auto finding = s.stall->Check(
      Clock::now(), [&](int r) { return s.DescribeRank(*comm, r); }, joined);
  if (!finding) return;
  KV_LOG(kWarning, kEngine, "%s", finding->report.c_str());
  if (finding->shutdown) to_announce.stall = finding;
}

void Engine::Impl::ApplyTuning(const TunableParams& tuning) {
  fusion_threshold = tuning.fusion_threshold_bytes;
  cycle_time_ms = tuning.cycle_time_ms;
  comm->Tune(static_cast<size_t>(tuning.small_allreduce_max_bytes),
             static_cast<size_t>(tuning.tcp_stripe_min_bytes));
  if (lanes) {
    // Every rank applies the tuning at the same point of the world's sequence; the lanes' running
    // collectives still use the old values everywhere.
    lanes->Drain();
    lanes->Tune(static_cast<size_t>(tuning.small_allreduce_max_bytes),
                static_cast<size_t>(tuning.tcp_stripe_min_bytes));
  }
}

Status Engine::Impl::ExecuteResponses(SetState& s, const CycleResponses& cycle, bool any_joined) {
  const std::vector<Response>& responses = cycle.responses;
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
    if (IsControl(head)) {
      // Joins and process set changes see every earlier op of this rank completed.
      DrainLanes();
      ApplyControlResponse(s, head);
      continue;
    }
    KV_RETURN_IF_ERROR(RunCollective(s, f, cycle, any_joined));
  }
  return OkStatus();
}

void Engine::Impl::ApplyControlResponse(SetState& s, const Response& head) {
  // A join completes this rank's join op, whatever the rank named it.
  std::string name = head.name;
  if (head.type == OpType::kJoin && head.error.empty()) {
    for (auto& [n, p] : s.pending) {
      if (p->report.type == OpType::kJoin) name = n;
    }
  }
  auto node = s.pending.extract(name);
  std::unique_ptr<PendingOp> op = node.empty() ? nullptr : std::move(node.mapped());
  if (op && timeline) timeline->End(name);
  if (!head.error.empty()) {
    // The ranks disagree on the op (shape, dtype, a joined rank): a failed precondition of the
    // collective, not a bad argument of this rank's (admission refuses those as InvalidArgument).
    if (op) Complete(std::move(op), FailedPrecondition(head.error));
    return;
  }
  if (head.type == OpType::kJoin) {
    CompleteJoin(s, head, std::move(op));
    return;
  }
  if (head.type == OpType::kRemoveProcessSet) {
    // Every rank drops the set here, in the same (world) cycle.
    const int id = head.set_ranks.empty() ? -1 : head.set_ranks.front();
    RemoveSet(id);
    if (op) Complete(std::move(op), OkStatus());
    return;
  }
  CreateProcessSet(head, std::move(op));
}

// Every rank has joined: the set works normally again.
void Engine::Impl::CompleteJoin(SetState& s, const Response& head, std::unique_ptr<PendingOp> op) {
  s.joined = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    admission.JoinCompleted(s.id);
  }
  if (op) {
    op->state->result.last_joined_rank =
        head.last_joined_rank >= 0 ? s.set.global_rank(head.last_joined_rank) : -1;
    Complete(std::move(op), OkStatus());
  }
}

// Every rank creates the set here, in the same cycle, with the same id. The set tables agree
// everywhere, so every rank refuses a duplicate alike.
void Engine::Impl::CreateProcessSet(const Response& head, std::unique_ptr<PendingOp> op) {
  std::vector<int> ranks(head.set_ranks.begin(), head.set_ranks.end());
  auto ps = ProcessSet::Create(ranks, comm->size(), rank());
  if (ps.ok()) {
    for (const auto& [other_id, other] : sets) {
      if (other->set.ranks() != ps->ranks()) continue;
      ps =
          FailedPrecondition("process set " + RanksString(ps->ranks()) + " already exists (id " +
                             std::to_string(other_id) + (other_id == 0 ? ", the world" : "") + ")");
      break;
    }
  }
  const int id = ps.ok() ? next_set_id++ : -1;
  if (ps.ok()) AddSet(id, std::move(*ps));
  if (op) {
    op->state->result.process_set_id = id;
    Complete(std::move(op), ps.ok() ? OkStatus() : ps.status());
  }
}

// One planned collective. A failure is the data plane's: the engine stops.
Status Engine::Impl::RunCollective(SetState& s, const FusedOp& f, const CycleResponses& cycle,
                                   bool any_joined) {
  if (lanes) {
    if (OnLane(s, f, cycle)) {
      Dispatch(s, f, cycle, any_joined);
      return OkStatus();
    }
    // Other collectives keep their order after the allreduces submitted before them; small
    // allreduces only pass large ones (which Horovod's ordering never promised either).
    const Response& head = cycle.responses[f.responses.front()];
    if (head.type != OpType::kAllreduce || head.on_device) DrainLanes();
  }
  std::vector<OpExecutor::Item> items;
  items.reserve(f.responses.size());
  for (int i : f.responses) {
    const Response& r = cycle.responses[i];
    auto it = s.pending.find(r.name);
    items.push_back({&r, it == s.pending.end() ? nullptr : it->second.get(), {}});
    if (timeline && it != s.pending.end()) timeline->End(r.name);  // QUEUE
  }
  uint64_t bytes = 0;
  const uint64_t segments_before = executor.pipelined_segments();
  Status st = cycle.responses[f.responses.front()].on_device
                  ? device_executor.Run(s.id, s.set, items, &bytes)
                  : executor.Run(s.set, items, &bytes);
  const uint64_t segments = executor.pipelined_segments() - segments_before;
  cycle_bytes += bytes;
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.bytes += bytes;
    stats.collectives += segments > 0 ? segments : 1;
    stats.pipelined_segments += segments;
  }
  if (!st.ok()) return st;
  for (size_t k = 0; k < items.size(); ++k) {
    const int idx = f.responses[k];
    std::unique_ptr<PendingOp> op =
        Retire(s, cycle.responses[idx], cycle.cache_bits[idx], any_joined);
    if (op) Complete(std::move(op), items[k].status);
  }
  return OkStatus();
}

// A response that ran (or was dispatched to a lane) enters or refreshes the response cache, in the
// same order on every rank, and this rank's op leaves the pending table: returned for completion
// (null when this rank joined without the tensor).
std::unique_ptr<PendingOp> Engine::Impl::Retire(SetState& s, const Response& r, int cache_bit,
                                                bool any_joined) {
  auto node = s.pending.extract(r.name);
  std::unique_ptr<PendingOp> op = node.empty() ? nullptr : std::move(node.mapped());
  if (cache_bit >= 0) {
    s.cache.Touch(cache_bit);
  } else if (!any_joined && s.cache.capacity() > 0 && r.type != OpType::kAlltoall &&
             r.type != OpType::kBarrier) {
    Request mine;
    if (op) mine = op->report;
    const int evicted = s.cache.Put(r, mine);
    if (evicted >= 0) s.Renegotiate(evicted);
  }
  if (op && cache_bit >= 0) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.cache_hits;
  }
  return op;
}

// A lane takes large allreduces of the world: every rank makes the same choice (same plan, same
// sizes), so each collective meets its peers on the same lane.
bool Engine::Impl::OnLane(const SetState& s, const FusedOp& f, const CycleResponses& cycle) const {
  if (s.id != 0) return false;
  uint64_t bytes = 0;
  for (int i : f.responses) {
    const Response& r = cycle.responses[i];
    if (r.type != OpType::kAllreduce || r.on_device) return false;
    bytes += static_cast<uint64_t>(NumElements(r.shape)) * DataTypeSize(r.dtype);
  }
  return bytes >= kLaneMinBytes;
}

// The collective leaves this thread: its ops leave `pending` (they are no longer reported ready)
// and the cache learns of it now, in dispatch order, which is the same on every rank.
void Engine::Impl::Dispatch(SetState& s, const FusedOp& f, const CycleResponses& cycle,
                            bool any_joined) {
  CollectiveLanes::Job job;
  for (int i : f.responses) {
    const Response& r = cycle.responses[i];
    std::unique_ptr<PendingOp> op = Retire(s, r, cycle.cache_bits[i], any_joined);
    if (timeline && op) timeline->End(r.name);  // QUEUE
    job.responses.push_back(r);
    job.ops.push_back(std::move(op));
  }
  lanes->Dispatch(std::move(job));
}

// On a lane's thread: the collective ran (or a lane had failed before it could).
void Engine::Impl::LaneFinished(CollectiveLanes::Job& job, std::vector<OpExecutor::Item>& items,
                                const Status& data_plane, uint64_t bytes, uint64_t segments) {
  cycle_bytes.fetch_add(bytes, std::memory_order_relaxed);
  const int peak = lanes->peak_busy();
  {
    std::lock_guard<std::mutex> lock(mu);
    stats.bytes += bytes;
    stats.pipelined_segments += segments;
    stats.lanes_peak_busy = std::max<uint64_t>(stats.lanes_peak_busy, peak);
    if (data_plane.ok()) {
      ++stats.lane_collectives;
      stats.collectives += segments > 0 ? segments : 1;
    } else {
      // The engine is stopped from here on, before any op reports the failure: a trainer that
      // sees it and submits again is refused with the same cause.
      if (health.ok()) health = data_plane;
      stopped = true;
      lane_failed = true;
    }
  }
  if (!data_plane.ok()) wake.notify_one();
  for (size_t k = 0; k < job.ops.size(); ++k) {
    if (job.ops[k] == nullptr) continue;
    const std::string name = job.ops[k]->report.name;
    Complete(std::move(job.ops[k]),
             data_plane.ok()
                 ? items[k].status
                 : Status(data_plane.code(), "tensor \"" + name + "\": " + data_plane.message()));
  }
}

// Rank 0 scores parameters by the bytes moved in cycles that moved data; idle cycles between steps
// still count toward the sample's elapsed time.
void Engine::Impl::RecordAutotuneSample() {
  const double secs = std::chrono::duration<double>(Clock::now() - last_autotune_record).count();
  last_autotune_record = Clock::now();
  if (autotuner->Record(cycle_bytes.load(), secs)) to_announce.tuning = autotuner->current();
}

// Waits for the next cycle (with `mu` held): until the cycle time is up, the engine is shut down,
// or an op is submitted; then, while ops keep arriving, until none has for `gather_time_us`, so
// that a burst lands in one cycle and fuses. Short windows are polled, not slept: a timed sleep
// of a few microseconds costs the kernel's timer slack (~50 us) and would tax every lone op.
void Engine::Impl::WaitForCycle(std::unique_lock<std::mutex>& lock, Clock::time_point next) {
  wake.wait_until(lock, next,
                  [&] { return shutdown_requested || lane_failed || !incoming.empty(); });
  // A world of one rank has nothing to gain from fusing: every op completes at once.
  if (shutdown_requested || incoming.empty() || config.gather_time_us <= 0 || comm->size() == 1) {
    return;
  }
  const auto quiet = std::chrono::microseconds(config.gather_time_us);
  constexpr auto kPollUpTo = std::chrono::microseconds(100);
  uint64_t seen = submitted.load(std::memory_order_acquire);
  // Quiet counts from the last submit, not from this wake-up: a lone op whose wake-up took longer
  // than the window starts its cycle at once.
  Clock::time_point last_change = last_submit;
  while (!shutdown_requested) {
    const Clock::time_point now = Clock::now();
    const Clock::time_point until = std::min(next, last_change + quiet);
    if (now >= until) return;
    if (quiet <= kPollUpTo) {
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    } else {
      wake.wait_until(lock, until, [&] {
        return shutdown_requested || submitted.load(std::memory_order_acquire) != seen;
      });
    }
    const uint64_t n = submitted.load(std::memory_order_acquire);
    if (n != seen) {
      seen = n;
      last_change = last_submit;
    }
  }
}

void Engine::Impl::Loop() {
  Clock::time_point next = Clock::now();
  std::string stop_reason;
  bool again = false;  // the previous cycle asks for the next one at once
  while (true) {
    if (!again) {
      std::unique_lock<std::mutex> lock(mu);
      WaitForCycle(lock, next);
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
    again = false;
    if (lanes) failure = lanes->health();  // a lane's collective failed
    for (auto& [id, st] : sets) {
      if (!failure.ok()) break;
      if (!st->set.contains_me()) continue;
      bool set_again = false;
      failure = RunSetCycle(*st, id == 0, &stop, &stop_reason, &set_again);
      again = again || set_again;
      if (!failure.ok() || stop) break;  // shutdown is agreed in the world's cycle, first
    }
    if (!failure.ok()) {
      (void)comm->MarkBroken(failure);
      KV_LOG(kError, kEngine, "engine stopped: %s", failure.ToString().c_str());
      if (lanes) {
        // Collectives queued on lanes fail with the cause; running ones stop within a poll slice
        // (the mesh carries this rank's abort).
        lanes->Fail(failure);
        lanes->Drain();
      }
      FailEverything(failure);
      return;
    }
    if (autotuner && cycle_bytes.load() > 0) RecordAutotuneSample();
    if (stop) {
      // Every rank stops after the same cycle: what the lanes hold runs to completion everywhere.
      DrainLanes();
      {
        std::lock_guard<std::mutex> lock(mu);
        stopped_in_order = stop_in_order;
      }
      FailEverything(Aborted(stop_reason));
      timeline.reset();
      return;
    }
    {
      // Ops submitted during this cycle have waited long enough.
      std::lock_guard<std::mutex> lock(mu);
      again = again || !incoming.empty();
    }
  }
}

// ---- public API ----

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Engine::~Engine() { Shutdown(); }

int Engine::rank() const { return impl_->comm->rank(); }
int Engine::size() const { return impl_->comm->size(); }

StatusOr<std::unique_ptr<Engine>> Engine::Start(std::unique_ptr<Communicator> comm,
                                                const EngineConfig& config, DeviceBackend device) {
  KV_RETURN_IF_ERROR(config.Validate());
  if (comm == nullptr) return InvalidArgument("engine needs a communicator");
  auto impl = std::make_unique<Impl>(std::move(comm), config, device);
  impl->device = device;
  Communicator& c = *impl->comm;

  KV_RETURN_IF_ERROR(CheckSettingsAgree(c, config));
  std::vector<std::unique_ptr<Communicator>> lane_comms = c.TakeLanes();
  if (!lane_comms.empty()) {
    Impl* raw = impl.get();
    impl->lanes = std::make_unique<CollectiveLanes>(
        std::move(lane_comms), impl->executor.pipeline(),
        [raw](CollectiveLanes::Job& job, std::vector<OpExecutor::Item>& items,
              const Status& data_plane, uint64_t bytes,
              uint64_t segments) { raw->LaneFinished(job, items, data_plane, bytes, segments); });
  }
  KV_ASSIGN_OR_RETURN(impl->clock_offset_ns, MeasureClockOffset(c, 8, c.OpDeadline()));

  impl->AddSet(0, ProcessSet::World(c.size(), c.rank()));
  if (c.size() > 1) {
    impl->stragglers = std::make_unique<StragglerMonitor>(
        c.size(),
        std::chrono::duration_cast<std::chrono::microseconds>(config.straggler_threshold));
  }
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
  std::vector<OpHandle> handles;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (!im.health.ok() || im.stopped) {
      return im.health.ok() ? FailedPrecondition("the engine has shut down") : im.health;
    }
    for (const OpRequest& r : requests) KV_RETURN_IF_ERROR(im.CheckDeviceTensor(r));
    KV_ASSIGN_OR_RETURN(auto ops, im.admission.Admit(std::move(requests), std::move(done)));
    handles.reserve(ops.size());
    for (auto& op : ops) {
      handles.emplace_back(op->state);
      im.incoming.push_back(std::move(op));
    }
    im.last_submit = Clock::now();
    im.submitted.fetch_add(handles.size(), std::memory_order_release);
  }
  im.wake.notify_one();  // outside the lock: the engine thread must not wake into a held mutex
  return handles;
}

StatusOr<int> Engine::AddProcessSet(std::vector<int> ranks, Deadline deadline) {
  std::sort(ranks.begin(), ranks.end());
  // Validated here so that a bad list fails on this rank at once (and before the name is built
  // from what may be a trainer's list of millions of ranks).
  KV_RETURN_IF_ERROR(ProcessSet::Create(ranks, size(), rank()).status());
  OpRequest r;
  r.type = OpType::kAddProcessSet;
  r.name = "process_set.add";
  for (int x : ranks) {
    r.name += '.';
    r.name += std::to_string(x);
  }
  if (r.name.size() > 256) {
    // A large set: a short name (names are capped in negotiation), the same on every rank; the
    // members themselves are compared by the coordinator.
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : r.name) h = (h ^ c) * 1099511628211ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    r.name = "process_set.add." + std::to_string(ranks.size()) + "_ranks." +
             std::to_string(ranks.front()) + "-" + std::to_string(ranks.back()) + "." + hex;
  }
  r.members.assign(ranks.begin(), ranks.end());
  OpHandle h;
  { KV_ASSIGN_OR_RETURN(h, Submit(std::move(r))); }
  // The members travel to every rank in the request's report (see Admission).
  KV_RETURN_IF_ERROR(h.Wait(deadline));
  return h.result().process_set_id;
}

StatusOr<bool> Engine::RemoveProcessSet(int id, Deadline deadline) {
  if (id == 0) return false;  // the world stays
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->admission.FindSet(id) == nullptr) return false;
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
  const Admission::SetShape* shape = impl_->admission.FindSet(id);
  if (shape == nullptr) return InvalidArgument("unknown process set " + std::to_string(id));
  return SetInfo{shape->size, shape->my_rank};
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

std::string Engine::StragglerLine(uint64_t min_steps) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->stragglers) return {};
  return impl_->stragglers->StragglerLine(min_steps,
                                          [this](int r) { return impl_->comm->DescribePeer(r); });
}

Status Engine::health() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->health;
}

bool Engine::shut_down_in_order() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stopped_in_order;
}

void Engine::Abort(const Status& why) {
  if (!impl_ || impl_->comm == nullptr) return;  // (not thread.joinable(): Shutdown may be joining)
  impl_->comm->Abort(why);
  impl_->wake.notify_all();  // an idle engine runs a cycle and meets the abort
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
