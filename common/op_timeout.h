// How long one collective may take: KOROVOD_OP_TIMEOUT_SECONDS, plus time for the bytes at the
// slowest link rate the job is expected to survive, so that a 20 GB allreduce over 1 Gbit/s (a
// ring moves about twice the tensor through each link: ~320 s) is not a false timeout, while a
// small op on a dead link still fails within the base timeout.
#pragma once

#include <chrono>
#include <cstdint>

namespace korovod {

// 25 MB/s of tensor bytes: a ring allreduce at 50 MB/s per link, far below any datacenter NIC.
inline constexpr uint64_t kOpTimeoutFloorBytesPerSecond = 25'000'000;

inline std::chrono::milliseconds ScaledOpTimeout(std::chrono::milliseconds base, uint64_t bytes) {
  return base + std::chrono::milliseconds(bytes / (kOpTimeoutFloorBytesPerSecond / 1000));
}

}  // namespace korovod
