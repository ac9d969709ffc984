// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: the holder renews
// renewTime every retry period; others take over once the lease record has stayed unchanged for
// leaseDurationSeconds, timed from when they first saw it by their own monotonic clock. The
// renewTime read is never compared with the local clock, so clock skew between nodes cannot make
// two leaders. Every write carries the resourceVersion read, so of two racing candidates one gets
// 409 and backs off. Stop() releases a held lease so a standby takes over at its next try.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "operator/kube/api_client.h"

namespace korovod::kube {

struct LeaderElectionConfig {
  std::string namespace_name;
  std::string lease_name;
  std::string identity;                             // unique per candidate, e.g. the pod name
  std::chrono::milliseconds lease_duration{15000};  // written in whole seconds, at least 1
  std::chrono::milliseconds renew_deadline{10000};  // a leader failing to renew this long quits
  std::chrono::milliseconds retry_period{2000};
  // Called on the elector's thread (on_stopped_leading also from Stop()'s release).
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  // Wall clock, only for the times written into the Lease.
  std::function<std::chrono::system_clock::time_point()> now = [] {
    return std::chrono::system_clock::now();
  };
  // Local monotonic clock that times how long another holder's record has stayed unchanged;
  // never compared with a time read from the Lease, so skew between nodes cannot matter.
  std::function<std::chrono::steady_clock::time_point()> steady_now = [] {
    return std::chrono::steady_clock::now();
  };
};

class LeaderElector {
 public:
  // `client` must outlive the elector.
  LeaderElector(const ApiClient& client, LeaderElectionConfig config);
  ~LeaderElector();  // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Ends the loop, releases the lease if held, and joins. Blocks at most one request timeout.
  void Stop();
  bool IsLeader() const;
  // True while this candidate leads and its last successful renewal (counted from when it was
  // sent) is younger than renew_deadline, by the monotonic clock at the time of the call. A
  // process resumed after a pause (SIGSTOP, a VM freeze) sees its leadership gone at once, before
  // the watchdog notices: callers check it right before each write, so a deposed leader's
  // threads that run on for a moment write nothing.
  bool HoldsLease() const;
  Status last_error() const;
  // The Lease's leaseTransitions as this candidate last wrote it (a new holder increments it):
  // the fencing token of its leadership, higher for every later leader. 0 before it led.
  uint64_t fencing_token() const;

  // One attempt, exposed for tests: true when this candidate holds the lease afterwards.
  StatusOr<bool> TryAcquireOrRenew();

 private:
  void Run();
  // Drops leadership once the last successful renewal is renew_deadline old, even while a
  // request hangs (one GET and PUT can take two read timeouts): a standby takes over after the
  // lease duration, and two leaders would serve two membership servers per elastic job.
  void WatchRenewDeadline();
  void Release();
  void SetLeader(bool leader);

  const ApiClient& client_;
  const LeaderElectionConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool leader_ = false;
  Status last_error_;
  // Another holder's record as last read (spec and resourceVersion) and the local time it was
  // first read; its lease ends leaseDurationSeconds after that. Only TryAcquireOrRenew() touches
  // them, on one thread at a time (the elector's, or a test's before Start()).
  std::string observed_record_;
  std::chrono::steady_clock::time_point observed_time_{};
  std::chrono::steady_clock::time_point last_renew_{};  // guarded by mu_
  uint64_t fencing_token_ = 0;                          // guarded by mu_
  std::thread thread_;
  std::thread deadline_thread_;
};

}  // namespace korovod::kube
