#include "runtime/core/engine_config.h"

#include "common/env_names.h"
#include "common/env_settings.h"
#include "runtime/transport/wire_security.h"

namespace korovod {
namespace {

constexpr int64_t kMaxCount = 1'000'000'000;  // counts are ints; anything larger is a typo

std::string Name(const char* variable) { return variable; }

}  // namespace

const std::vector<EngineVariable>& EngineVariables() {
  static const std::vector<EngineVariable> vars = {
      {env::kFusionThreshold, "64M",
       "Tensor Fusion buffer size in bytes (suffix K/M/G allowed); 0 disables fusion"},
      {env::kFusionTensorMax, "1M",
       "tensors of at least this many bytes run alone, in place, never copied into the fusion "
       "buffer; 0: no limit"},
      {env::kCycleTime, "1",
       "the longest an idle engine waits before it reports to the other ranks, milliseconds "
       "(> 0); a submit wakes it sooner"},
      {env::kGatherTimeUs, "5",
       "an idle engine woken by a submit starts its cycle once no new op has arrived for this "
       "many microseconds (at most the cycle time), so a burst fuses; 0: at once"},
      {env::kFusionPipeline, "auto",
       "1: a fused allreduce of at least 8 MiB over the network runs in ~4 MiB segments whose "
       "copies overlap the neighbouring segments' collectives (never on one host's shared "
       "memory, where it is reduced in place); 0: one collective per fused buffer; auto: 1 "
       "unless this host's ranks outnumber its cores"},
      {env::kCollectiveLanes, "4",
       "over TCP, allreduces of at least 64 KiB run on this many lanes, each with its own "
       "connections to every peer, several at once and alongside the next cycle's negotiation "
       "(overlaps the network's latency); 1: one collective at a time"},
      {env::kHierarchicalAllreduce, "auto",
       "1: large world allreduces reduce within each host over shared memory and across hosts "
       "between the ranks of equal local rank (every host must hold the same number of ranks); "
       "0: one flat ring over every rank; auto: 1 when the world spans several hosts of more "
       "than one rank each. The start-up line says which and why"},
      {env::kStragglerThresholdMs, "5",
       "a step's straggler is the rank the others waited for longest, if longer than this many "
       "milliseconds"},
      {env::kCacheCapacity, "1024", "response cache entries; 0 disables the cache"},
      {env::kStallCheckTimeSeconds, "60",
       "report tensors submitted by some ranks but not others after this long; 0 disables"},
      {env::kStallShutdownTimeSeconds, "0",
       "fail the job with the stall report after this long (> check time); 0: never"},
      {env::kTimeline, "",
       "timeline file; \"{rank}\" in the path makes every rank record, otherwise rank 0 only"},
      {env::kTimelineMarkCycles, "0", "1: mark every engine cycle in the timeline"},
      {env::kAutotune, "0", "1: search fusion threshold, cycle time and chunking online"},
      {env::kAutotuneLog, "", "CSV file with one row per autotune trial"},
      {env::kAutotuneWarmupSamples, "3", "autotune samples discarded before the first trial"},
      {env::kAutotuneCyclesPerSample, "10", "engine cycles that moved data per sample"},
      {env::kAutotuneSamplesPerTrial, "3", "samples per trial (median scores the trial)"},
      {env::kAutotuneMaxTrials, "24", "trials before autotune settles on the best"},
      {env::kWireSecurity, "none",
       "what protects tensors on the TCP connections between ranks: none (as they are: anyone on"
       " the network path can read and alter them; the job-key handshake still keeps strangers "
       "out), integrity (every record authenticated, AES-256-GMAC: altered, replayed or "
       "reordered bytes fail the op naming the peer), encrypt (AES-256-GCM: also unreadable on "
       "the path). integrity and encrypt need a job key; shared memory within a pod is not "
       "affected (docs/security.md)"},
  };
  return vars;
}

StatusOr<EngineConfig> EngineConfig::FromEnvironment(const Getenv& getenv) {
  EnvSettings settings(getenv, logging::Subsystem::kEngine);
  settings.WithFallbackPrefix("KOROVOD_", "HOROVOD_");
  EngineConfig c;
  KV_ASSIGN_OR_RETURN(c.fusion_threshold_bytes,
                      settings.Bytes(env::kFusionThreshold, c.fusion_threshold_bytes));
  KV_ASSIGN_OR_RETURN(c.fusion_tensor_max_bytes,
                      settings.Bytes(env::kFusionTensorMax, c.fusion_tensor_max_bytes));
  StatusOr<std::string> pipeline =
      settings.Choice(env::kFusionPipeline, "auto", {"auto", "1", "0"});
  if (!pipeline.ok()) return pipeline.status();
  if (*pipeline == "1") c.fusion_pipeline = EngineConfig::Pipeline::kOn;
  if (*pipeline == "0") c.fusion_pipeline = EngineConfig::Pipeline::kOff;
  KV_ASSIGN_OR_RETURN(c.collective_lanes,
                      settings.Int(env::kCollectiveLanes, c.collective_lanes, 1, 16));
  StatusOr<std::string> hierarchical =
      settings.Choice(env::kHierarchicalAllreduce, "auto", {"auto", "1", "0"});
  if (!hierarchical.ok()) return hierarchical.status();
  if (*hierarchical == "1") c.hierarchical = HierarchyMode::kOn;
  if (*hierarchical == "0") c.hierarchical = HierarchyMode::kOff;
  KV_ASSIGN_OR_RETURN(const std::string wire, settings.Choice(env::kWireSecurity, "none",
                                                              {"none", "integrity", "encrypt"}));
  c.wire_security = ParseWireSecurity(wire).value_or(WireSecurity::kNone);
  // The upper bound is Validate()'s, which words its own error for values set in code.
  KV_ASSIGN_OR_RETURN(c.cycle_time_ms, settings.Number(env::kCycleTime, c.cycle_time_ms, 1e-9, 1e9,
                                                       "expected milliseconds > 0"));
  KV_ASSIGN_OR_RETURN(c.gather_time_us,
                      settings.Int(env::kGatherTimeUs, c.gather_time_us, 0, 60'000'000));
  KV_ASSIGN_OR_RETURN(
      const int64_t straggler_ms,
      settings.Int(env::kStragglerThresholdMs, c.straggler_threshold.count(), 0, 3'600'000));
  c.straggler_threshold = std::chrono::milliseconds(straggler_ms);
  KV_ASSIGN_OR_RETURN(c.cache_capacity,
                      settings.Int(env::kCacheCapacity, c.cache_capacity, 0, kMaxCount));
  KV_ASSIGN_OR_RETURN(c.stall_check, settings.Seconds(env::kStallCheckTimeSeconds, c.stall_check));
  KV_ASSIGN_OR_RETURN(c.stall_shutdown,
                      settings.Seconds(env::kStallShutdownTimeSeconds, c.stall_shutdown));
  KV_ASSIGN_OR_RETURN(c.timeline_path, settings.String(env::kTimeline));
  KV_ASSIGN_OR_RETURN(c.timeline_mark_cycles,
                      settings.Bool(env::kTimelineMarkCycles, c.timeline_mark_cycles));
  KV_ASSIGN_OR_RETURN(c.autotune, settings.Bool(env::kAutotune, c.autotune));
  KV_ASSIGN_OR_RETURN(c.autotune_log, settings.String(env::kAutotuneLog));
  KV_ASSIGN_OR_RETURN(
      c.autotune_warmup_samples,
      settings.Int(env::kAutotuneWarmupSamples, c.autotune_warmup_samples, 0, kMaxCount));
  KV_ASSIGN_OR_RETURN(
      c.autotune_cycles_per_sample,
      settings.Int(env::kAutotuneCyclesPerSample, c.autotune_cycles_per_sample, 1, kMaxCount));
  KV_ASSIGN_OR_RETURN(
      c.autotune_samples_per_trial,
      settings.Int(env::kAutotuneSamplesPerTrial, c.autotune_samples_per_trial, 1, kMaxCount));
  KV_ASSIGN_OR_RETURN(c.autotune_max_trials,
                      settings.Int(env::kAutotuneMaxTrials, c.autotune_max_trials, 1, kMaxCount));
  KV_RETURN_IF_ERROR(c.Validate());
  return c;
}

StatusOr<EngineConfig> EngineConfig::FromProcessEnvironment() {
  return FromEnvironment(ProcessGetenv());
}

Status EngineConfig::Validate() const {
  if (fusion_tensor_max_bytes < 0) {
    return InvalidArgument(Name(env::kFusionTensorMax) + " must be >= 0 bytes, got " +
                           std::to_string(fusion_tensor_max_bytes));
  }
  if (fusion_threshold_bytes < 0) {
    return InvalidArgument("fusion threshold (" + Name(env::kFusionThreshold) +
                           ") must be >= 0 bytes, got " + std::to_string(fusion_threshold_bytes));
  }
  if (!(cycle_time_ms > 0) || cycle_time_ms > 60000) {
    return InvalidArgument("cycle time (" + Name(env::kCycleTime) +
                           ") must be in (0, 60000] ms, got " + std::to_string(cycle_time_ms));
  }
  if (gather_time_us < 0 || gather_time_us > 60'000'000) {
    return InvalidArgument(Name(env::kGatherTimeUs) + " must be in [0, 60000000] us, got " +
                           std::to_string(gather_time_us));
  }
  if (collective_lanes < 1 || collective_lanes > 16) {
    return InvalidArgument(Name(env::kCollectiveLanes) + " must be in [1, 16], got " +
                           std::to_string(collective_lanes));
  }
  if (cache_capacity < 0 || cache_capacity > (1 << 20)) {
    return InvalidArgument("cache capacity (" + Name(env::kCacheCapacity) +
                           ") must be in [0, 1048576], got " + std::to_string(cache_capacity));
  }
  if (stall_check.count() < 0 || stall_shutdown.count() < 0) {
    return InvalidArgument("stall times (KOROVOD_STALL_*_TIME_SECONDS) must be >= 0");
  }
  if (stall_shutdown.count() > 0 && stall_check.count() > 0 && stall_shutdown <= stall_check) {
    return InvalidArgument(Name(env::kStallShutdownTimeSeconds) + " (" +
                           std::to_string(stall_shutdown.count() / 1000.0) +
                           " s) must be longer than " + env::kStallCheckTimeSeconds + " (" +
                           std::to_string(stall_check.count() / 1000.0) + " s)");
  }
  if (autotune_warmup_samples < 0 || autotune_cycles_per_sample < 1 ||
      autotune_samples_per_trial < 1 || autotune_max_trials < 1) {
    return InvalidArgument("autotune sample counts must be positive");
  }
  return OkStatus();
}

}  // namespace korovod
