// Engine settings, each with one environment variable (KOROVOD_*; the HOROVOD_* name of the same
// setting is accepted when the KOROVOD_* one is unset, so existing job specs keep working).
// Values are validated when read: a bad value is an error naming the variable, never a silent
// default. docs/configuration.md lists them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

struct EngineConfig {
  // Tensor Fusion: ready tensors of one dtype/op/set are packed up to this many bytes; 0 disables.
  int64_t fusion_threshold_bytes = 64 << 20;
  // Tensors of at least this many bytes are never staged in the fusion buffer (they run alone, in
  // place: for them the two copies cost more than the latency fusion saves); 0: no limit.
  int64_t fusion_tensor_max_bytes = 1 << 20;
  // A fused allreduce of at least 8 MiB over the network runs in segments of ~4 MiB whose copies
  // into and out of the fusion buffers overlap the neighbouring segments' collectives (on a copy
  // thread). Never on one host's shared memory, where the buffer is built in the shared window and
  // reduced there. kAuto: unless this host's ranks already outnumber its cores (the copy thread
  // would take a core another rank's collective needs: measured 0.90x at 4 ranks on 2 cores).
  enum class Pipeline { kAuto, kOn, kOff };
  Pipeline fusion_pipeline = Pipeline::kAuto;
  // Over TCP, allreduces of the world of at least 64 KiB run on this many collective lanes, each
  // with its own connections to every peer, several at once, while the engine thread negotiates
  // the next ones (runtime/core/collective_lanes.h); 1: one collective at a time, on the engine
  // thread. The connections are made with the world (TransportOptions::collective_lanes), so the
  // launcher passes this on; shared memory always runs one at a time.
  int collective_lanes = 4;
  // Hierarchical allreduce (runtime/world/host_layout.h); the world is made with it
  // (WorldOptions::hierarchical), so the sidecar passes it on before connecting.
  HierarchyMode hierarchical = HierarchyMode::kAuto;
  // KOROVOD_WIRE_SECURITY (runtime/transport/wire_security.h): the world's connections are
  // made with it (TransportOptions::wire_security), so the sidecar passes it on; the mesh
  // refuses a peer with another value, naming both.
  WireSecurity wire_security = WireSecurity::kNone;
  // Background cycle: the longest an idle engine waits before it reports to the other ranks (a
  // submit wakes it sooner).
  double cycle_time_ms = 1.0;
  // An idle engine woken by a submit waits until no new op has arrived for this long (at most
  // until the cycle time is up), so that a burst of tensors submitted together fuses; 0: it starts
  // the cycle at once.
  int gather_time_us = 5;
  // A step's straggler is the rank the others waited for longest, if longer than this.
  std::chrono::milliseconds straggler_threshold{5};
  // Response cache entries (tensor names negotiated once, then agreed by bit vector); 0 disables.
  int cache_capacity = 1024;
  // Stall inspector: report tensors some ranks submitted and others not after this long; 0
  // disables. With stall_shutdown > 0 the job fails with the report after that long.
  std::chrono::milliseconds stall_check{60000};
  std::chrono::milliseconds stall_shutdown{0};
  // Timeline: "{rank}" in the path is replaced by the rank and every rank records; without it
  // only rank 0 records (Horovod's behaviour). Empty: off until StartTimeline.
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  // Autotune: searches fusion threshold, cycle time and data plane chunking online.
  bool autotune = false;
  std::string autotune_log;
  int autotune_warmup_samples = 3;
  int autotune_cycles_per_sample = 10;
  int autotune_samples_per_trial = 3;
  int autotune_max_trials = 24;

  // Reads every variable through `getenv` (tests pass their own); unset ones keep the defaults.
  static StatusOr<EngineConfig> FromEnvironment(
      const std::function<std::optional<std::string>(const std::string&)>& getenv);
  static StatusOr<EngineConfig> FromProcessEnvironment();

  // Checks ranges (also of values set in code). The message names the setting.
  Status Validate() const;
};

// One documented variable: name, default as text, meaning. The docs test checks docs against it.
struct EngineVariable {
  const char* name;
  const char* default_value;
  const char* meaning;
};
const std::vector<EngineVariable>& EngineVariables();

}  // namespace korovod
