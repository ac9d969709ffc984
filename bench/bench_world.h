// BenchWorld: what one korovod-bench rank runs the protocol (protocol.h) and the measured
// collectives (bench_ops.h) on. In process it is a Communicator (InprocWorld); with `--via
// sidecar` it is this rank's korovod-sidecar, reached through the C++ client (SidecarWorld). The
// ops keep their byte conventions and verification patterns in one place (bench_ops.cc); where
// the bytes live and which call moves them belongs to the world, so both paths measure the same
// ops with the same protocol and print the same rows.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "runtime/collectives/collectives.h"
#include "common/data_type.h"
#include "common/status.h"

namespace korovod::bench {

// Memory a world's collectives read and write in place: a heap block in process, an arena block
// through a sidecar (zero copy). Zero-filled when allocated, so page faults are paid there and
// never inside a timed op. A world only ever receives buffers it allocated itself.
class BenchBuffer {
 public:
  virtual ~BenchBuffer() = default;
  virtual std::byte* data() = 0;
  virtual size_t size() const = 0;
};

class BenchWorld {
 public:
  virtual ~BenchWorld() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The rows' transport label: the communicator's ("shm", "tcp"), "+sidecar" through sidecars.
  virtual std::string transport_label() const = 0;

  // The protocol's helpers, on the world's own collectives like the peers' (MPI_Barrier...).
  virtual Status Barrier() = 0;
  virtual Status MaxDoubles(double* v, size_t n) = 0;  // in place, MAX over ranks

  virtual StatusOr<std::unique_ptr<BenchBuffer>> Allocate(size_t bytes) = 0;
  // An out-of-place op's output buffer, or nullptr where the world places each op's output
  // itself (a sidecar's result heap): the op's call then returns where it went.
  virtual StatusOr<std::unique_ptr<BenchBuffer>> AllocateOutput(size_t bytes) = 0;

  // In place (SUM for allreduce).
  virtual Status Allreduce(BenchBuffer& buf, size_t count, DataType type,
                           AllreduceAlgorithm algo) = 0;
  virtual Status Broadcast(BenchBuffer& buf, size_t count, DataType type, int root) = 0;
  // Out of place, `block` elements per rank. The returned span holds the output (in `out`, or
  // where the world placed it) and stays valid until the next op on this world.
  virtual StatusOr<std::span<const std::byte>> Allgather(BenchBuffer& in, BenchBuffer* out,
                                                         size_t block, DataType type) = 0;
  virtual StatusOr<std::span<const std::byte>> Alltoall(BenchBuffer& in, BenchBuffer* out,
                                                        size_t block, DataType type) = 0;
  virtual StatusOr<std::span<const std::byte>> ReduceScatter(BenchBuffer& in, BenchBuffer* out,
                                                             size_t block, DataType type) = 0;
};

}  // namespace korovod::bench
