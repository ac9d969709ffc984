// OpLoop: serves the arena's submission queue. One thread pops SubmissionRecords, validates them,
// turns them into engine OpRequests with pointers into the arena and submits them; the engine's
// DoneCallback answers with a CompletionRecord. Each attached client is a session: when the
// client goes away (detached, or its pid is gone), the session ends, its pending completions are
// discarded and the queues and result heap are reset so that a new client can attach.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/common/deadline.h"
#include "runtime/common/status.h"
#include "runtime/core/engine.h"
#include "sidecar/http/engine_metrics.h"
#include "sidecar/protocol/arena.h"
#include "sidecar/protocol/record_validation.h"

namespace korovod::sidecar {

class OpLoop {
 public:
  // `engine`, `arena` and `metrics` (may be null) must outlive the loop.
  OpLoop(Engine& engine, Arena& arena, EngineMetrics* metrics);
  ~OpLoop();  // Stop()
  OpLoop(const OpLoop&) = delete;
  OpLoop& operator=(const OpLoop&) = delete;

  void Start();
  void Stop();

  // Waits (until `deadline`) until the arena has no client attached and its queues are fresh,
  // so that a new client may Open it. Hello calls this.
  Status WaitReadyForClient(Deadline deadline);

  // Hello: the client that is about to attach says its pid. If this process can see it (same pid
  // namespace), the client's death is noticed by its pid even if it dies right after attaching.
  void ExpectClient(int pid);

  struct Session;

 private:
  void Run();
  void CheckClient();
  void EndSession(const char* why);
  void Handle(const SubmissionRecord& record);
  Status SubmitOp(const ValidatedOp& op);

  Engine& engine_;
  Arena& arena_;
  EngineMetrics* metrics_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Session> session_;  // replaced by EndSession (op loop thread only)
  bool client_seen_ = false;          // the current session has had a client attached
  bool client_pid_visible_ = false;   // its pid was alive in our pid namespace when first seen
  int hello_pid_ = 0;                 // ExpectClient
  bool hello_pid_visible_ = false;
};

}  // namespace korovod::sidecar
