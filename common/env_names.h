// The one home of every KOROVOD_* variable name that more than one layer spells: the readers
// (runtime/core/engine_config.cc, sidecar/daemon/sidecar_config.cc) and the writers (the
// operator's worker env, korovodrun) reference these constants, so a rename is one edit and a
// typo is a compile error. Here (in common/) because the operator must not include runtime/.
// tests/docs/test_docs_reference.py reads the blocks between the markers: keep one constant a
// line. docs/configuration.md documents each.
#pragma once

namespace korovod::env {

// engine-variables: read by the engine (HOROVOD_* of the same name when unset).
inline constexpr char kFusionThreshold[] = "KOROVOD_FUSION_THRESHOLD";
inline constexpr char kFusionTensorMax[] = "KOROVOD_FUSION_TENSOR_MAX";
inline constexpr char kCycleTime[] = "KOROVOD_CYCLE_TIME";
inline constexpr char kGatherTimeUs[] = "KOROVOD_GATHER_TIME_US";
inline constexpr char kFusionPipeline[] = "KOROVOD_FUSION_PIPELINE";
inline constexpr char kCollectiveLanes[] = "KOROVOD_COLLECTIVE_LANES";
inline constexpr char kHierarchicalAllreduce[] = "KOROVOD_HIERARCHICAL_ALLREDUCE";
inline constexpr char kStragglerThresholdMs[] = "KOROVOD_STRAGGLER_THRESHOLD_MS";
inline constexpr char kCacheCapacity[] = "KOROVOD_CACHE_CAPACITY";
inline constexpr char kStallCheckTimeSeconds[] = "KOROVOD_STALL_CHECK_TIME_SECONDS";
inline constexpr char kStallShutdownTimeSeconds[] = "KOROVOD_STALL_SHUTDOWN_TIME_SECONDS";
inline constexpr char kTimeline[] = "KOROVOD_TIMELINE";
inline constexpr char kTimelineMarkCycles[] = "KOROVOD_TIMELINE_MARK_CYCLES";
inline constexpr char kAutotune[] = "KOROVOD_AUTOTUNE";
inline constexpr char kAutotuneLog[] = "KOROVOD_AUTOTUNE_LOG";
inline constexpr char kAutotuneWarmupSamples[] = "KOROVOD_AUTOTUNE_WARMUP_SAMPLES";
inline constexpr char kAutotuneCyclesPerSample[] = "KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE";
inline constexpr char kAutotuneSamplesPerTrial[] = "KOROVOD_AUTOTUNE_SAMPLES_PER_TRIAL";
inline constexpr char kAutotuneMaxTrials[] = "KOROVOD_AUTOTUNE_MAX_TRIALS";
inline constexpr char kWireSecurity[] = "KOROVOD_WIRE_SECURITY";
// end engine-variables

// sidecar-variables: read by korovod-sidecar (its placement and wiring).
inline constexpr char kRank[] = "KOROVOD_RANK";
inline constexpr char kSidecarRanks[] = "KOROVOD_SIDECAR_RANKS";
inline constexpr char kSize[] = "KOROVOD_SIZE";
inline constexpr char kLocalRank[] = "KOROVOD_LOCAL_RANK";
inline constexpr char kLocalSize[] = "KOROVOD_LOCAL_SIZE";
inline constexpr char kCrossRank[] = "KOROVOD_CROSS_RANK";
inline constexpr char kCrossSize[] = "KOROVOD_CROSS_SIZE";
inline constexpr char kPeers[] = "KOROVOD_PEERS";
inline constexpr char kHosts[] = "KOROVOD_HOSTS";
inline constexpr char kCoordinator[] = "KOROVOD_COORDINATOR";
inline constexpr char kWorldFile[] = "KOROVOD_WORLD_FILE";
// Elastic jobs: the membership server (host:port) instead of the three above, this worker's stable
// id, the host name it registers (korovodrun's virtual host), how long an epoch may take to form.
inline constexpr char kElasticRendezvous[] = "KOROVOD_ELASTIC_RENDEZVOUS";
inline constexpr char kWorkerId[] = "KOROVOD_WORKER_ID";
inline constexpr char kHostName[] = "KOROVOD_HOST_NAME";
inline constexpr char kElasticTimeoutSeconds[] = "KOROVOD_ELASTIC_TIMEOUT_SECONDS";
inline constexpr char kIface[] = "KOROVOD_IFACE";
inline constexpr char kDataPort[] = "KOROVOD_DATA_PORT";
inline constexpr char kListenFd[] = "KOROVOD_LISTEN_FD";
inline constexpr char kJobKey[] = "KOROVOD_JOB_KEY";
inline constexpr char kJobKeyFile[] = "KOROVOD_JOB_KEY_FILE";
// Debugging only: a sidecar without a job key (no authentication at all), said loudly at start.
inline constexpr char kInsecureNoKey[] = "KOROVOD_INSECURE_NO_KEY";
inline constexpr char kSocket[] = "KOROVOD_SOCKET";
inline constexpr char kShmPrefix[] = "KOROVOD_SHM_PREFIX";
inline constexpr char kMetricsPort[] = "KOROVOD_METRICS_PORT";
// How the sidecar runs ops on device (GPU) tensors: auto (NCCL where built and a GPU is visible,
// else none), nccl, host (host memory standing in for GPUs: tests), none.
inline constexpr char kDeviceBackend[] = "KOROVOD_DEVICE_BACKEND";
inline constexpr char kStartTimeoutSeconds[] = "KOROVOD_START_TIMEOUT_SECONDS";
// One collective, start to finish, before the extra a large tensor gets (common/op_timeout.h).
inline constexpr char kOpTimeoutSeconds[] = "KOROVOD_OP_TIMEOUT_SECONDS";
inline constexpr char kArenaHeapMib[] = "KOROVOD_ARENA_HEAP_MIB";
inline constexpr char kArenaHeapMaxMib[] = "KOROVOD_ARENA_HEAP_MAX_MIB";
// The world's generation (the operator's status.epoch): part of every peer handshake, so a rank
// of an older generation can never join a newer one. The trainer gets it too.
inline constexpr char kEpoch[] = "KOROVOD_EPOCH";
// end sidecar-variables

}  // namespace korovod::env
