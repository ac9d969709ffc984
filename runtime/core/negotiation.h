// Negotiation: how the ranks of one process set agree, each cycle, on which tensors run and in
// which order (steps 1 to 3 of "One cycle" in docs/engine.md). Every rank contributes a fixed-size
// state word vector (flags, the bytes of its new requests, ready and stale cache bits); that one
// small allgather is a steady-state cycle's only negotiation. Tensors every rank has in the
// response cache run without the coordinator; new requests go to the coordinator (set rank 0),
// which answers every rank with one response list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/core/autotune/autotuner.h"
#include "runtime/core/negotiation_messages.h"
#include "runtime/core/set_state.h"
#include "runtime/core/stall_inspector.h"
#include "runtime/core/straggler_monitor.h"
#include "runtime/core/timeline/timeline.h"
#include "runtime/world/communicator.h"

namespace korovod {

// A new op of this rank joins its set's negotiation: a response cache hit is reported ready by its
// bit every cycle; anything else goes to the coordinator (a stale entry is also reported, for every
// rank to drop it).
void EnterNegotiation(SetState& s, std::unique_ptr<PendingOp> op);

// Words in one rank's state vector for a cache of `cache_capacity` entries.
size_t StateWordCount(int cache_capacity);

// What the world's coordinator tells every rank in its next response list. Each is taken (reset)
// when sent.
struct Announcements {
  std::optional<TunableParams> tuning;           // autotune's next parameters
  std::optional<StallInspector::Finding> stall;  // a stall shutdown, with its report
  bool any() const { return tuning.has_value() || stall.has_value(); }
};

// Step 1 (state allgather): this rank's state, and every rank's, decoded.
struct StateExchange {
  std::string payload;  // this rank's new requests, encoded (empty: none)
  std::vector<bool> joined;
  bool any_joined = false;
  bool any_payload = false;  // some rank has new requests
  bool news = false;         // the coordinator has something to announce
  std::vector<bool> in_flight;  // per set rank: it had ops in flight in the set
  int shutdown_rank = -1;    // the first set rank that asked the engine to stop, or -1
  // Every rank's words, valid until the set's next exchange (they live in SetState::all_states).
  const uint64_t* all = nullptr;
  int words = 0;                                   // words per cache bit vector
  int stride = 0;                                  // words per rank
  const uint64_t* ready_bits(int set_rank) const;  // `words` words: cached tensors it submitted
  const uint64_t* stale_bits(int set_rank) const;  // `words` words: entries it found stale
  uint64_t payload_bytes(int set_rank) const;
};
// `shutdown`: this rank asks the engine to stop. `news`: the coordinator has announcements (only
// the coordinator's flag is sent). The ops reported are marked sent.
StatusOr<StateExchange> ExchangeStates(Communicator& comm, SetState& s, bool shutdown, bool news);

// Step 2 (cache agreement): the stale bits of every rank, and the cached tensors every rank that
// has not joined has ready (and some rank has).
struct CacheAgreement {
  std::vector<uint64_t> stale;
  std::vector<uint64_t> ready;
};
// Stale entries (and, for a group, its members) leave the cache on every rank; this rank's ops on
// them are negotiated afresh.
CacheAgreement AgreeOnCache(SetState& s, const StateExchange& x);

// The responses a set runs this cycle, in execution order: cached first, then negotiated.
struct CycleResponses {
  std::vector<Response> responses;
  std::vector<int> cache_bits;  // per response: its cache bit, or -1 when negotiated this cycle
};
// The cached tensors that run this cycle, without the coordinator, in bit order; a group only once
// all its members are ready. With joined ranks, a cached op that cannot run with them fails as
// soon as some rank has it ready.
CycleResponses CachedResponses(const Communicator& comm, const SetState& s, const StateExchange& x,
                               const CacheAgreement& agreed);

// Who waits for whom in this exchange: per set rank, whether it has ops in flight, lacks a cached
// tensor another (not joined) rank has submitted, or holds one another lacks.
std::vector<StragglerMonitor::RankView> RankViews(const StateExchange& x,
                                                  const CacheAgreement& agreed);

// On the coordinator: cached tensors some ranks have ready and others not are watched for stalls;
// those that run now are resolved.
void WatchCachedStalls(SetState& s, const StateExchange& x, const CacheAgreement& agreed,
                       const std::vector<Response>& running);

// Step 3 (negotiation of new requests; run when x.any_payload or x.news): every rank's requests
// go to the coordinator, which answers every rank. `announce` (world only, else null) is sent by
// the coordinator with its answer.
StatusOr<ResponseList> NegotiateNewRequests(Communicator& comm, SetState& s, const StateExchange& x,
                                            Timeline* timeline, Announcements* announce);

}  // namespace korovod
