// The collectives korovod-bench measures, behind one interface so the measurement protocol
// (protocol.h) is written once. Each op owns its buffers (allocated by the world it runs on),
// knows its nccl-tests byte convention and bus-bandwidth factor, and checks its own result.
#pragma once

#include <cstddef>
#include <memory>

#include "bench/bench_options.h"
#include "bench/bench_world.h"
#include "runtime/collectives/collectives.h"
#include "common/data_type.h"
#include "common/status.h"

namespace korovod::bench {

// Outcome of checking one result buffer against the expected pattern.
struct CheckResult {
  size_t bad = 0;        // elements that differ
  size_t checked = 0;    // elements looked at
  size_t first_bad = 0;  // index of the first difference
  double got = 0;        // value found there
  double expected = 0;   // value that should be there
};

class BenchOp {
 public:
  virtual ~BenchOp() = default;

  virtual const char* name() const = 0;
  virtual bool inplace() const = 0;
  // nccl-tests busbw = algbw * factor (the per-rank traffic of a bandwidth-optimal algorithm).
  virtual double BusFactor(int n) const = 0;
  // The size the op really moves for a requested size, in the nccl-tests convention (bytes of
  // the larger per-rank buffer, rounded down to whole blocks of one element per rank or more).
  virtual size_t RoundBytes(size_t requested) const = 0;

  virtual Status Prepare(size_t bytes) = 0;
  // Writes this rank's verification input (rank+1 based) and poisons the output with zeros, so
  // an op that silently does nothing cannot pass.
  virtual void FillForVerify() = 0;
  virtual Status Run() = 0;
  // Compares the output with what every rank's FillForVerify implies. `inject_fault` first
  // corrupts the last element (PEERBENCH_INJECT_FAULT self-test of the checker).
  virtual CheckResult Check(bool inject_fault) = 0;
  virtual void Release() = 0;
};

std::unique_ptr<BenchOp> MakeBenchOp(BenchOpKind kind, BenchWorld& world, DataType type,
                                     AllreduceAlgorithm algo);

// Largest value any verification pattern of `kind` reaches with n ranks; the element type must
// represent every integer up to it exactly (checked at parse time).
double MaxVerifyValue(BenchOpKind kind, int n);

}  // namespace korovod::bench
