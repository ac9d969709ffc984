// Timeline: a Chrome trace-event JSON file (opens in Perfetto and chrome://tracing) of what the
// engine did with each tensor on this rank. One lane (tid) per tensor name, named by a thread_name
// metadata event; pid is the rank. Timestamps are this rank's steady clock in microseconds; the
// offset to rank 0's clock (measured at start-up) is written as metadata so that
// MergeTimelines (timeline_merge.h) can put several ranks on one time axis.
//
// Thread-safe: events are appended to an in-memory batch under a mutex and written by a writer
// thread, so recording costs the engine no file I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace korovod {

struct TimelineOptions {
  std::string path;
  int rank = 0;
  // This rank's clock minus rank 0's clock, in nanoseconds (0 on rank 0).
  int64_t clock_offset_ns = 0;
  bool mark_cycles = false;  // an instant event at the start of every engine cycle
};

// The tensor lanes a timeline keeps at once. Unnamed ops get a new name each time
// ("allreduce.noname.N"), so lanes are evicted least recently used first (timeline.cc): the
// sidecar's memory stays flat over any number of ops. 16384 is beyond the tensors of any model's
// step (and beyond what a trace viewer shows usefully); an evicted name seen again gets a new lane.
inline constexpr size_t kMaxTimelineLanes = size_t{1} << 14;

// `path` with every "{rank}" replaced by `rank` (KOROVOD_TIMELINE, StartTimeline).
std::string ExpandTimelinePath(std::string_view path, int rank);

class Timeline {
 public:
  // Creates (truncates) the file with mode 0644 and writes the header and metadata.
  static StatusOr<std::unique_ptr<Timeline>> Open(const TimelineOptions& options);
  ~Timeline();  // flushes, closes the JSON array
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Negotiation of one tensor: from submission until the coordinator's response. `op` is the
  // collective ("ALLREDUCE", "ALLGATHER", ...); the span is named NEGOTIATE_<op>.
  void NegotiateStart(std::string_view tensor, std::string_view op);
  // Instant mark on the tensor's lane: `rank` reported the tensor ready.
  void NegotiateRankReady(std::string_view tensor, int rank);
  void NegotiateEnd(std::string_view tensor);

  // A nested span on the tensor's lane: QUEUE, MEMCPY_IN_FUSION_BUFFER, ALLREDUCE,
  // MEMCPY_OUT_FUSION_BUFFER, transport phases (RING_REDUCE_SCATTER, ...). Spans nest: End closes
  // the innermost open span on that lane. `args` is an optional JSON object text ("{...}") put in
  // the begin event's args (e.g. {"bytes":1024,"fused_tensors":3}).
  void Start(std::string_view tensor, std::string_view activity, std::string_view args = {});
  void End(std::string_view tensor);

  // Instant event in its own "cycle" lane at the start of an engine cycle (if mark_cycles).
  void MarkCycle();

  const std::string& path() const;
  // The lanes kept now (at most kMaxTimelineLanes, plus lanes with spans open).
  size_t lanes() const;
  // First write error, if any (the engine logs it once; recording never blocks training).
  Status status() const;

 private:
  struct State;
  explicit Timeline(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace korovod
