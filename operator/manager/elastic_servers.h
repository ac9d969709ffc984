// ElasticServers: the membership servers of the elastic HorovodJobs this operator leads, one per
// job (runtime/world/elastic_rendezvous.h, ADR 0014), all on one listener and one thread
// (runtime/world/membership_listener.h): a connection names its job by an id derived from the
// job's key. The reconciler says what a job needs (ReconcileResult::elastic: settings and the
// live worker ids); Apply starts the job's server, or updates its live workers, or stops it when
// the job needs none. Observe hands the reconciler the server's state (port, last epoch and its
// members, failure, workers given up on).
//
// The listener opens at the first Apply on `port` (--elastic-rendezvous-port; 0: the port of the
// first job's status, else any), so a new leader serves where the pods' env says. A server
// started for a job that ran before (this operator restarted, or took over as leader) resumes
// from the job's status: its epoch, members and resets.
//
// Fencing: every server carries the token SetFencingToken gave (the Lease's transitions when this
// operator acquired it); Depose (leadership lost) stops every server and the listener at once.
//
// A watcher thread calls `changed(job key)` when a server's epoch, failure or given-up workers
// move: nothing on the API server changes then, so no watch event would wake the reconciler.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/status.h"
#include "operator/controller/action.h"
#include "operator/controller/observed_state.h"
#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/membership_listener.h"

namespace korovod::k8s_operator {

class ElasticServers {
 public:
  explicit ElasticServers(std::function<void(const std::string& job_key)> changed,
                          uint16_t port = 0);
  ~ElasticServers();
  ElasticServers(const ElasticServers&) = delete;
  ElasticServers& operator=(const ElasticServers&) = delete;

  // The job's server as the reconciler sees it; nullopt when none runs for this uid.
  std::optional<ObservedState::ElasticServer> Observe(const std::string& job_key,
                                                      const std::string& uid) const;

  // Starts, updates or (directive unset) stops the job's server. A job recreated under its name
  // (another uid) gets a new server.
  Status Apply(const std::string& job_key, const std::string& uid,
               const std::optional<ElasticDirective>& directive);

  // The job is gone: its server stops.
  void Forget(const std::string& job_key);

  std::vector<std::string> JobKeys() const;

  // The fencing token of this operator's leadership: servers started from now on carry it.
  void SetFencingToken(uint64_t token);
  // Leadership lost: every server stops now (its held workers look for the new leader's), the
  // listener closes, and Apply refuses to start another.
  void Depose();

 private:
  struct Hosted {
    std::string uid;
    // The settings it was started with: a change (spec.elastic edited) restarts it where it is.
    std::tuple<int64_t, int64_t, int64_t, int64_t> settings;
    std::unique_ptr<ElasticRendezvousServer> server;
    std::vector<std::string> lost;  // every worker given up on (kept: the pods go by themselves)
    // What the watcher last reported.
    uint32_t seen_epoch = 0;
    bool seen_failure = false;
    size_t seen_lost = 0;
  };

  void Watch(std::stop_token stop);

  // Opens the listener if it is not open yet (with mu_ held).
  Status Listen(int status_port);

  std::function<void(const std::string&)> changed_;
  const uint16_t port_;
  mutable std::mutex mu_;
  uint64_t token_ = 0;
  bool deposed_ = false;
  std::shared_ptr<MembershipListener> listener_;
  std::map<std::string, Hosted> jobs_;  // by "namespace/name"
  std::condition_variable_any watch_cv_;
  std::jthread watch_;  // last: stops before the servers go
};

}  // namespace korovod::k8s_operator
