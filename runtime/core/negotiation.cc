#include "runtime/core/negotiation.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/collectives/collectives.h"

namespace korovod {
namespace {

// Flags in word 0 of a rank's per-cycle state.
constexpr uint64_t kFlagShutdown = 1;  // this rank asked the engine to stop
constexpr uint64_t kFlagJoined = 2;    // this rank has joined the set
constexpr uint64_t kFlagNews = 4;      // the coordinator has something to announce
constexpr uint64_t kFlagPending = 8;   // this rank has ops in flight in this set
constexpr int kHeaderWords = 2;        // flags, request payload bytes

int CacheWords(int cache_capacity) { return (cache_capacity + 63) / 64; }

// Fills this rank's state words and returns its new requests, encoded.
std::string WriteOwnState(SetState& s, int words, bool shutdown, bool news) {
  std::fill(s.state.begin(), s.state.end(), 0);
  uint64_t* ready_bits = s.state.data() + kHeaderWords;
  uint64_t* invalid_bits = ready_bits + words;
  if (shutdown) s.state[0] |= kFlagShutdown;
  // A joined rank reports the cached tensors it submitted before joining: they carry its data.
  if (s.joined) s.state[0] |= kFlagJoined;
  for (auto& [name, op] : s.pending) {
    if (op->cache_bit >= 0) ready_bits[op->cache_bit / 64] |= uint64_t{1} << (op->cache_bit % 64);
  }
  for (int b : s.invalid_bits) invalid_bits[b / 64] |= uint64_t{1} << (b % 64);
  s.invalid_bits.clear();
  if (s.coordinator && news) s.state[0] |= kFlagNews;
  if (!s.pending.empty()) s.state[0] |= kFlagPending;
  std::string payload;
  if (!s.unsent.empty()) {
    // At most what a peer accepts in one message (negotiation_messages.h); the rest go in the
    // next cycles, in order.
    std::vector<Request> reqs;
    size_t bytes = 8, taken = 0;
    for (PendingOp* op : s.unsent) {
      const size_t b = EncodedRequestBytes(op->report);
      if (taken > 0 && (taken == kMaxRequestsPerMessage || bytes + b > kMaxRequestPayloadBytes)) {
        break;
      }
      bytes += b;
      reqs.push_back(op->report);
      op->sent = true;
      ++taken;
    }
    s.unsent.erase(s.unsent.begin(), s.unsent.begin() + static_cast<std::ptrdiff_t>(taken));
    payload = EncodeRequests(reqs);
  }
  s.state[1] = payload.size();
  return payload;
}

// A group is negotiated whole: when one member's entry goes stale (a new shape), its cached
// siblings go too, or they would wait in the cache for a member the coordinator now holds.
// Every rank has the same cache and the same stale bits, so all drop the same entries.
void AddStaleGroupMembers(const ResponseCache& cache, std::vector<uint64_t>& stale) {
  std::set<std::string> stale_groups;
  for (size_t w = 0; w < stale.size(); ++w) {
    for (uint64_t bits = stale[w]; bits != 0; bits &= bits - 1) {
      const int b = static_cast<int>(w) * 64 + __builtin_ctzll(bits);
      if (cache.occupied(b) && !cache.response(b).group.empty()) {
        stale_groups.insert(cache.response(b).group);
      }
    }
  }
  if (stale_groups.empty()) return;
  for (int b = 0; b < cache.capacity(); ++b) {
    if (cache.occupied(b) && stale_groups.count(cache.response(b).group) != 0) {
      stale[b / 64] |= uint64_t{1} << (b % 64);
    }
  }
}

// Cached ops that cannot run with joined ranks and that some live rank has ready while a joined
// rank lacks them: they fail now (see JoinRefusal); the others get the same error when they
// submit them.
std::vector<uint64_t> RefusedWithJoinedRanks(const SetState& s, const StateExchange& x,
                                             const CacheAgreement& agreed) {
  const int n = s.set.size();
  std::vector<uint64_t> refused(x.words, 0);
  if (!x.any_joined) return refused;
  for (int w = 0; w < x.words; ++w) {
    uint64_t live = 0, joined_all = ~uint64_t{0};
    for (int r = 0; r < n; ++r) {
      const uint64_t word = x.ready_bits(r)[w];
      if (x.joined[r]) {
        joined_all &= word;
      } else {
        live |= word;
      }
    }
    uint64_t bits = live & ~joined_all & ~agreed.ready[w] & ~agreed.stale[w];
    while (bits != 0) {
      const int b = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      if (s.cache.occupied(b) && !RunsWithJoinedRanks(s.cache.response(b).type)) {
        refused[w] |= uint64_t{1} << (b % 64);
      }
    }
  }
  return refused;
}

}  // namespace

void EnterNegotiation(SetState& s, std::unique_ptr<PendingOp> op) {
  PendingOp* raw = op.get();
  if (raw->report.type == OpType::kJoin) s.joined = true;
  const bool cacheable =
      s.cache.capacity() > 0 && raw->report.type != OpType::kJoin &&
      raw->report.type != OpType::kAlltoall && raw->report.type != OpType::kAddProcessSet &&
      raw->report.type != OpType::kRemoveProcessSet && raw->report.type != OpType::kBarrier;
  int bit = -1;
  ResponseCache::Lookup found =
      cacheable ? s.cache.Find(raw->report, &bit) : ResponseCache::Lookup::kMiss;
  if (found == ResponseCache::Lookup::kHit) {
    raw->cache_bit = bit;
  } else {
    if (found == ResponseCache::Lookup::kInvalid) s.invalid_bits.push_back(bit);
    s.unsent.push_back(raw);
  }
  s.pending[raw->report.name] = std::move(op);
}

size_t StateWordCount(int cache_capacity) { return kHeaderWords + 2 * CacheWords(cache_capacity); }

const uint64_t* StateExchange::ready_bits(int set_rank) const {
  return all + static_cast<size_t>(set_rank) * stride + kHeaderWords;
}

const uint64_t* StateExchange::stale_bits(int set_rank) const {
  return ready_bits(set_rank) + words;
}

uint64_t StateExchange::payload_bytes(int set_rank) const {
  return all[static_cast<size_t>(set_rank) * stride + 1];
}

StatusOr<StateExchange> ExchangeStates(Communicator& comm, SetState& s, bool shutdown, bool news) {
  const int n = s.set.size();
  StateExchange x;
  x.words = CacheWords(s.cache.capacity());
  x.stride = kHeaderWords + 2 * x.words;
  x.payload = WriteOwnState(s, x.words, shutdown, news);

  s.all_states.resize(static_cast<size_t>(x.stride) * n);
  {
    std::vector<size_t> counts(n, x.stride);
    AllgatherOptions o;
    o.input = s.state.data();
    o.output = s.all_states.data();
    o.counts = counts;
    o.type = DataType::kInt64;
    o.set = &s.set;
    KV_RETURN_IF_ERROR(korovod::Allgather(comm, o));
  }
  x.all = s.all_states.data();
  x.joined.assign(n, false);
  x.in_flight.assign(n, false);
  for (int r = 0; r < n; ++r) {
    const uint64_t* st = x.all + static_cast<size_t>(r) * x.stride;
    x.joined[r] = (st[0] & kFlagJoined) != 0;
    x.any_joined = x.any_joined || x.joined[r];
    if ((st[0] & kFlagShutdown) != 0 && x.shutdown_rank < 0) x.shutdown_rank = r;
    x.news = x.news || (st[0] & kFlagNews) != 0;
    x.any_payload = x.any_payload || st[1] > 0;
    x.in_flight[r] = (st[0] & kFlagPending) != 0;
  }
  return x;
}

CacheAgreement AgreeOnCache(SetState& s, const StateExchange& x) {
  const int n = s.set.size();
  const int words = x.words;
  // Ready: every rank that has not joined has the tensor, and some rank has it.
  CacheAgreement a;
  a.stale.assign(words, 0);
  a.ready.assign(words, ~uint64_t{0});
  std::vector<uint64_t> any(words, 0);
  for (int r = 0; r < n; ++r) {
    for (int w = 0; w < words; ++w) {
      a.stale[w] |= x.stale_bits(r)[w];
      any[w] |= x.ready_bits(r)[w];
      if (!x.joined[r]) a.ready[w] &= x.ready_bits(r)[w];
    }
  }
  for (int w = 0; w < words; ++w) a.ready[w] &= any[w];
  AddStaleGroupMembers(s.cache, a.stale);
  for (int w = 0; w < words; ++w) {
    uint64_t bits = a.stale[w];
    while (bits != 0) {
      const int b = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      s.cache.Erase(b);
      s.Renegotiate(b);
    }
  }
  return a;
}

CycleResponses CachedResponses(const Communicator& comm, const SetState& s, const StateExchange& x,
                               const CacheAgreement& agreed) {
  const int n = s.set.size();
  CycleResponses out;
  // Joined ranks without a ready tensor contribute its identity (absent).
  auto run_cached = [&](int b) {
    Response r = s.cache.response(b);
    for (int q = 0; q < n; ++q) {
      if ((x.ready_bits(q)[b / 64] >> (b % 64) & 1) != 0) continue;
      r.absent.push_back(q);
      if (r.type == OpType::kAllgather) r.first_dims[q] = 0;
    }
    if (!RunsWithJoinedRanks(r.type)) {
      for (int q : r.absent) {
        if (!x.joined[q]) continue;
        r.error = JoinRefusal(r.type, r.name, s.DescribeRank(comm, q));
        break;
      }
    }
    out.responses.push_back(std::move(r));
    out.cache_bits.push_back(b);
  };
  const std::vector<uint64_t> refused = RefusedWithJoinedRanks(s, x, agreed);
  std::map<std::string, std::vector<int>> groups;
  for (int w = 0; w < x.words; ++w) {
    uint64_t bits = (agreed.ready[w] | refused[w]) & ~agreed.stale[w];
    while (bits != 0) {
      const int b = w * 64 + __builtin_ctzll(bits);
      bits &= bits - 1;
      if (!s.cache.occupied(b)) continue;
      const Response& r = s.cache.response(b);
      if (!r.group.empty() && r.group_size > 1) {
        groups[r.group].push_back(b);
        continue;
      }
      run_cached(b);
    }
  }
  for (auto& [g, bits] : groups) {  // a group runs only once all its members are ready
    if (static_cast<int32_t>(bits.size()) < s.cache.response(bits.front()).group_size) continue;
    for (int b : bits) run_cached(b);
  }
  return out;
}

std::vector<StragglerMonitor::RankView> RankViews(const StateExchange& x,
                                                  const CacheAgreement& agreed) {
  const int n = static_cast<int>(x.in_flight.size());
  std::vector<StragglerMonitor::RankView> views(n);
  for (int w = 0; w < x.words; ++w) {
    uint64_t any = 0;
    for (int r = 0; r < n; ++r) {
      if (!x.joined[r]) any |= x.ready_bits(r)[w];
    }
    const uint64_t partial = any & ~agreed.ready[w] & ~agreed.stale[w];
    if (partial == 0) continue;
    for (int r = 0; r < n; ++r) {
      if (x.joined[r]) continue;
      const uint64_t mine = x.ready_bits(r)[w];
      views[r].lacks = views[r].lacks || (partial & ~mine) != 0;
      views[r].holds = views[r].holds || (partial & mine) != 0;
    }
  }
  for (int r = 0; r < n; ++r) views[r].in_flight = x.in_flight[r];
  return views;
}

void WatchCachedStalls(SetState& s, const StateExchange& x, const CacheAgreement& agreed,
                       const std::vector<Response>& running) {
  const int n = s.set.size();
  const Clock::time_point now = Clock::now();
  for (int w = 0; w < x.words; ++w) {
    uint64_t any = 0;
    for (int r = 0; r < n; ++r) {
      if (!x.joined[r]) any |= x.ready_bits(r)[w];
    }
    uint64_t partial = any & ~agreed.ready[w];
    while (partial != 0) {
      const int b = w * 64 + __builtin_ctzll(partial);
      partial &= partial - 1;
      if (!s.cache.occupied(b)) continue;
      for (int r = 0; r < n; ++r) {
        if (!x.joined[r] && (x.ready_bits(r)[w] >> (b % 64) & 1) != 0) {
          s.stall->Reported(s.cache.response(b).name, r, now);
        }
      }
    }
  }
  for (const Response& r : running) s.stall->Resolved(r.name);
}

namespace {

// Every rank's request payloads, back to back in set rank order, into s.payloads.
Status GatherRequests(Communicator& comm, SetState& s, const StateExchange& x,
                      std::vector<size_t>& counts) {
  const int n = s.set.size();
  counts.assign(n, 0);
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    // Declared by the peer: checked before it sizes the buffer (every rank sees the same words,
    // so every rank refuses the same peer).
    if (x.payload_bytes(r) > kMaxRequestPayloadBytes) {
      return Internal("corrupt negotiation state from " + s.DescribeRank(comm, r) + ": " +
                      std::to_string(x.payload_bytes(r)) + " bytes of requests, more than " +
                      std::to_string(kMaxRequestPayloadBytes));
    }
    counts[r] = x.payload_bytes(r);
    total += counts[r];
  }
  s.payloads.resize(total);
  AllgatherOptions o;
  o.input = x.payload.data();
  o.output = s.payloads.data();
  o.counts = counts;
  o.type = DataType::kUint8;
  o.set = &s.set;
  return korovod::Allgather(comm, o);
}

// On the coordinator: the ranks' requests enter the message table; the answer is what is ready
// now, with the world's announcements.
StatusOr<std::string> Answer(Communicator& comm, SetState& s, const std::vector<size_t>& counts,
                             Timeline* timeline, Announcements* announce, ResponseList& list) {
  size_t off = 0;
  const Clock::time_point now = Clock::now();
  for (int r = 0; r < s.set.size(); ++r) {
    if (counts[r] == 0) continue;
    auto reqs = DecodeRequests(s.payloads.data() + off, counts[r]);
    off += counts[r];
    if (!reqs.ok()) return reqs.status().WithContext("from " + s.DescribeRank(comm, r));
    if (timeline) {
      for (const Request& q : *reqs) timeline->NegotiateRankReady(q.name, s.set.global_rank(r));
    }
    s.coordinator->Ingest(r, *reqs, now);
  }
  list.responses = s.coordinator->TakeReady();
  if (announce != nullptr && announce->tuning) {
    list.tuning = announce->tuning;
    announce->tuning.reset();
  }
  if (announce != nullptr && announce->stall) {
    list.shutdown = true;
    list.shutdown_reason = announce->stall->report;
    announce->stall.reset();
  }
  return EncodeResponses(list);
}

// The coordinator's encoded answer to every rank of the set: its length, then its bytes.
Status BroadcastAnswer(Communicator& comm, SetState& s, std::string& encoded) {
  uint64_t len = s.coordinator ? encoded.size() : 0;
  BroadcastOptions b;
  b.buffer = &len;
  b.count = 1;
  b.type = DataType::kInt64;
  b.set = &s.set;
  KV_RETURN_IF_ERROR(korovod::Broadcast(comm, b));
  // Checked by every rank (the coordinator too) before anything is sized by it.
  if (len > kMaxResponsePayloadBytes) {
    return Internal("the coordinator, " + s.DescribeRank(comm, 0) + ", answered with " +
                    std::to_string(len) + " bytes of responses, more than " +
                    std::to_string(kMaxResponsePayloadBytes));
  }
  if (!s.coordinator) encoded.resize(len);
  b.buffer = encoded.data();
  b.count = len;
  b.type = DataType::kUint8;
  return korovod::Broadcast(comm, b);
}

}  // namespace

StatusOr<ResponseList> NegotiateNewRequests(Communicator& comm, SetState& s, const StateExchange& x,
                                            Timeline* timeline, Announcements* announce) {
  std::vector<size_t> counts;
  KV_RETURN_IF_ERROR(GatherRequests(comm, s, x, counts));
  ResponseList list;
  std::string encoded;
  if (s.coordinator) {
    KV_ASSIGN_OR_RETURN(encoded, Answer(comm, s, counts, timeline, announce, list));
  }
  KV_RETURN_IF_ERROR(BroadcastAnswer(comm, s, encoded));
  if (s.coordinator) return list;
  auto decoded =
      DecodeResponses(reinterpret_cast<const std::byte*>(encoded.data()), encoded.size());
  const std::string from = "from the coordinator, " + s.DescribeRank(comm, 0);
  if (!decoded.ok()) return decoded.status().WithContext(from);
  if (Status c = CheckResponsesForSet(*decoded, s.set.size()); !c.ok()) return c.WithContext(from);
  return std::move(*decoded);
}

}  // namespace korovod
