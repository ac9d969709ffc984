#include "operator/manager/elastic_servers.h"

#include <chrono>
#include <utility>

#include "common/log.h"

namespace korovod::k8s_operator {
namespace {

// How often the watcher looks at the servers: the reconciler hears of a formed epoch or a
// failure within this.
constexpr auto kWatchInterval = std::chrono::milliseconds(200);

}  // namespace

ElasticServers::ElasticServers(std::function<void(const std::string&)> changed, uint16_t port)
    : changed_(std::move(changed)), port_(port) {
  watch_ = std::jthread([this](std::stop_token stop) { Watch(stop); });
}

ElasticServers::~ElasticServers() {
  watch_.request_stop();
  watch_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
}

std::optional<ObservedState::ElasticServer> ElasticServers::Observe(const std::string& job_key,
                                                                    const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_key);
  if (it == jobs_.end() || it->second.uid != uid) return std::nullopt;
  const ElasticRendezvousServer& s = *it->second.server;
  ObservedState::ElasticServer out;
  out.port = s.port();
  out.epoch = s.epoch();
  out.members = s.members();
  out.resets = s.resets();
  out.formed_version = s.formed_version();
  const Status failure = s.failure();
  if (!failure.ok()) out.failure = failure.message();
  out.lost = it->second.lost;
  return out;
}

Status ElasticServers::Apply(const std::string& job_key, const std::string& uid,
                             const std::optional<ElasticDirective>& d) {
  std::unique_ptr<ElasticRendezvousServer> stopped;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_key);
  const auto settings =
      d ? std::make_tuple(d->min_workers, d->max_workers, d->timeout_seconds, d->reset_limit)
        : std::tuple<int64_t, int64_t, int64_t, int64_t>{};
  // Settings changed: the server starts again from the state the directive carries (the status
  // this reconcile wrote from it), on its port.
  if (it != jobs_.end() && (!d || it->second.uid != uid || it->second.settings != settings)) {
    KV_LOG(kInfo, kOperator, "elastic: stopping the membership server of %s (port %d)",
           job_key.c_str(), it->second.server->port());
    stopped = std::move(it->second.server);
    jobs_.erase(it);
    it = jobs_.end();
  }
  if (!d) return OkStatus();
  stopped.reset();  // detached before a successor attaches
  if (it == jobs_.end()) {
    if (deposed_) {
      return FailedPrecondition("elastic membership server of " + job_key +
                                ": this operator is no longer the leader");
    }
    KV_RETURN_IF_ERROR(Listen(static_cast<int>(d->port)));
    ElasticServerOptions o;
    o.job_key = d->job_key;
    o.min_workers = static_cast<int>(d->min_workers);
    o.max_workers = static_cast<int>(d->max_workers);
    o.reset_limit = static_cast<int>(d->reset_limit);
    o.timeout = std::chrono::seconds(d->timeout_seconds);
    o.resume_epoch = static_cast<uint32_t>(d->resume_epoch);
    o.resume_members = d->resume_members;
    o.resume_resets = static_cast<int>(d->resume_resets);
    o.resume_version = d->resume_version;
    o.listener = listener_;
    o.fencing_token = token_;
    auto server = ElasticRendezvousServer::Start(o);
    if (!server.ok()) return server.status().WithContext("elastic membership server of " + job_key);
    if (d->port != 0 && d->port != (*server)->port()) {
      // Workers of the running epoch dial the old port: they fail at their next reset and the
      // pods are replaced; new pods get this port.
      KV_LOG(kWarning, kOperator, "elastic: %s ran on port %d, served on %d now", job_key.c_str(),
             static_cast<int>(d->port), (*server)->port());
    }
    KV_LOG(kInfo, kOperator,
           "elastic: membership server of %s on port %d (epoch %u), fencing token %llu",
           job_key.c_str(), (*server)->port(), (*server)->epoch(),
           static_cast<unsigned long long>(token_));
    Hosted h;
    h.uid = uid;
    h.settings = settings;
    h.server = std::move(server).value();
    h.seen_epoch = h.server->epoch();
    it = jobs_.emplace(job_key, std::move(h)).first;
  }
  it->second.server->SetLiveWorkers(d->live);
  return OkStatus();
}

void ElasticServers::Forget(const std::string& job_key) {
  std::unique_ptr<ElasticRendezvousServer> stopped;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(job_key);
  if (it == jobs_.end()) return;
  stopped = std::move(it->second.server);
  jobs_.erase(it);
}

Status ElasticServers::Listen(int status_port) {
  if (listener_ != nullptr) return OkStatus();
  MembershipListenerOptions o;
  o.port = port_ != 0 ? port_ : static_cast<uint16_t>(status_port);
  auto l = MembershipListener::Start(o);
  if (!l.ok() && o.port != 0) {
    // Taken here (another replica on this host, a process not yet gone): serve on another port,
    // which new pods get; workers of running epochs fail at their next reset.
    KV_LOG(kWarning, kOperator, "elastic: port %d is taken (%s); serving on another",
           static_cast<int>(o.port), l.status().ToString().c_str());
    o.port = 0;
    l = MembershipListener::Start(o);
  }
  if (!l.ok()) return l.status();
  listener_ = std::move(l).value();
  KV_LOG(kInfo, kOperator, "elastic: membership listener on port %d", listener_->port());
  return OkStatus();
}

void ElasticServers::SetFencingToken(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  token_ = token;
}

void ElasticServers::Depose() {
  std::map<std::string, Hosted> stopped;
  std::shared_ptr<MembershipListener> closed;
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    token = token_;
    deposed_ = true;
    stopped = std::move(jobs_);
    jobs_.clear();
    closed = std::move(listener_);
  }
  KV_LOG(kWarning, kOperator,
         "elastic: no longer the leader: %zu membership server%s stopped (fencing token %llu)",
         stopped.size(), stopped.size() == 1 ? "" : "s", static_cast<unsigned long long>(token));
  stopped.clear();  // every server detaches before the listener goes
}

std::vector<std::string> ElasticServers::JobKeys() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [key, h] : jobs_) out.push_back(key);
  return out;
}

void ElasticServers::Watch(std::stop_token stop) {
  std::mutex sleep_mu;
  std::unique_lock<std::mutex> sleep(sleep_mu);
  while (
      !watch_cv_.wait_for(sleep, stop, kWatchInterval, [&stop] { return stop.stop_requested(); })) {
    std::vector<std::string> moved;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [key, h] : jobs_) {
        for (std::string& w : h.server->TakeLost()) h.lost.push_back(std::move(w));
        const uint32_t epoch = h.server->epoch();
        const bool failed = !h.server->failure().ok();
        if (epoch != h.seen_epoch || failed != h.seen_failure || h.lost.size() != h.seen_lost) {
          h.seen_epoch = epoch;
          h.seen_failure = failed;
          h.seen_lost = h.lost.size();
          moved.push_back(key);
        }
      }
    }
    for (const std::string& key : moved) changed_(key);
  }
}

}  // namespace korovod::k8s_operator
