// Runs N engines (one per rank, as threads of this process) on loopback for the core tests.
// Each rank: Communicator::Create on a pre-bound listener, Engine::Start, the body, then a closing
// barrier through the engine (so no rank shuts the engine down under another's feet), then
// destruction on the rank's own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/engine.h"
#include "runtime/world/world.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {

struct EngineWorldSpec {
  int size = 4;
  TransportKind transport = TransportKind::kTcp;
  EngineConfig config;
  // Per-rank last word on the engine config (tests that make ranks disagree).
  std::function<void(int rank, EngineConfig&)> customize;
  bool closing_barrier = true;
  // The device backend each rank's engine gets (none: device tensors are refused).
  std::function<DeviceBackend(int rank)> device;
};

class EngineRank {
 public:
  EngineRank(int rank, Engine* engine) : rank_(rank), engine_(engine) {}
  int rank() const { return rank_; }
  Engine& engine() { return *engine_; }
  void Fail(const std::string& what) {
    failures_.push_back("rank " + std::to_string(rank_) + ": " + what);
  }
  bool Check(bool ok, const std::string& what) {
    if (!ok) Fail(what);
    return ok;
  }
  const std::vector<std::string>& failures() const { return failures_; }

 private:
  int rank_;
  Engine* engine_;
  std::vector<std::string> failures_;
};

struct EngineRankReport {
  Status start;  // Communicator::Create / Engine::Start
  Status body;
  std::vector<std::string> failures;
  EngineStats stats;
  Status health;
};

std::vector<EngineRankReport> RunEngineRanks(const EngineWorldSpec& spec,
                                             const std::function<Status(EngineRank&)>& body);
// Test failures for every rank whose start or body failed or that recorded failed checks.
void ExpectEnginesOk(const std::vector<EngineRankReport>& reports);

// Submits and waits (60 s); returns the op's status and fills *result.
Status RunOp(Engine& e, OpRequest r, OpResult* result = nullptr);

// Engine-level barrier: every rank submits a barrier named `name` and waits.
Status EngineBarrier(Engine& e, const std::string& name);

}  // namespace korovod::testing
