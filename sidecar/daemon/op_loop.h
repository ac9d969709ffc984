// OpLoop: serves the arena's submission queue. One thread pops SubmissionRecords, validates them,
// turns them into engine OpRequests with pointers into the arena and submits them (the members of
// a grouped allreduce together, once all have arrived); the engine's DoneCallback answers with a
// CompletionRecord. Each attached client is a session: when the
// client goes away (detached, or its pid is gone), the session ends, its pending completions are
// discarded and the queues and result heap are reset so that a new client can attach.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/core/engine.h"
#include "runtime/device/device_api.h"
#include "sidecar/arena/arena.h"
#include "sidecar/arena/record_validation.h"
#include "sidecar/daemon/device_handle_cache.h"
#include "sidecar/daemon/engine_metrics.h"
#include "sidecar/daemon/group_assembler.h"

namespace korovod::sidecar {

class OpLoop {
 public:
  // `engine`, `arena`, `metrics` (may be null) and `device` must outlive the loop. `device` (null:
  // device tensors are refused) maps the trainer's device allocations; a device op's ready event
  // is waited for up to `ready_timeout` before the op reaches the engine. `inbox` (may be null)
  // holds the descriptors of device memory without an IPC handle the trainer sent.
  OpLoop(Engine& engine, Arena& arena, EngineMetrics* metrics, DeviceApi* device = nullptr,
         std::chrono::milliseconds ready_timeout = std::chrono::seconds(60),
         MemoryInbox* inbox = nullptr);
  ~OpLoop();  // Stop()
  OpLoop(const OpLoop&) = delete;
  OpLoop& operator=(const OpLoop&) = delete;

  void Start();
  // Stops serving. Shut the engine down first: every op in flight is then answered (the engine
  // fails it) while the loop still runs, and Stop answers what it never submitted and gives an
  // attached client up to kDrainTimeout to read the completions before the arena closes.
  void Stop();
  static constexpr std::chrono::milliseconds kDrainTimeout{2000};

  // Waits (until `deadline`) until the arena has no client attached and its queues are fresh,
  // so that a new client may Open it. Hello calls this.
  Status WaitReadyForClient(Deadline deadline);

  // Hello: the client that is about to attach says its pid. If this process can see it (same pid
  // namespace), the client's death is noticed by its pid even if it dies right after attaching.
  void ExpectClient(int pid);

  struct Session;

 private:
  void Run();
  void Drain();  // op loop thread, once stopped
  void CheckClient();
  void EndSession(const char* why);
  void Handle(const SubmissionRecord& record);
  // Completes `op_id` of the current session with an error (waiting until `wait` for room).
  void Fail(uint64_t op_id, const Status& s,
            Deadline wait = Deadline::After(std::chrono::seconds(5)));
  // Applies what a group member led to: errors, and a whole group to submit.
  void Apply(GroupAssembler::Outcome outcome);
  // The engine request, completion callback and output placement of one op (Prepare), undone
  // (Unprepare: a result-heap output freed) when the engine refuses it.
  struct Prepared;
  StatusOr<Prepared> Prepare(const ValidatedOp& op);
  void Unprepare(Prepared& p);
  Status SubmitOp(const ValidatedOp& op);
  void SubmitGroup(std::vector<ValidatedOp> ops);

  // A device op's tensors in this process (mapped through the session's handle cache), after its
  // ready event completed.
  Status PrepareDevice(const ValidatedOp& op, const std::string& name, OpRequest& req);

  Engine& engine_;
  Arena& arena_;
  EngineMetrics* metrics_;
  DeviceApi* device_;
  std::chrono::milliseconds ready_timeout_;
  MemoryInbox* inbox_;
  std::atomic<bool> stop_{false};
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<Session> session_;  // replaced by EndSession (op loop thread only)
  GroupAssembler groups_;             // the session's incomplete groups (op loop thread only)
  bool client_seen_ = false;          // the current session has had a client attached
  bool client_pid_visible_ = false;   // its pid was alive in our pid namespace when first seen
  int hello_pid_ = 0;                 // ExpectClient
  bool hello_pid_visible_ = false;
};

}  // namespace korovod::sidecar
