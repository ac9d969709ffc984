#include "operator/kube/leader_election.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "common/json_read.h"
#include "common/rfc3339.h"
#include "operator/kube/resource.h"

namespace korovod::kube {
namespace {

constexpr char kLeaseApiVersion[] = "coordination.k8s.io/v1";

}  // namespace

LeaderElector::LeaderElector(const ApiClient& client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
  deadline_thread_ = std::thread([this] { WatchRenewDeadline(); });
}

void LeaderElector::WatchRenewDeadline() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_; });
    if (stopping_ || !leader_) continue;
    if (std::chrono::steady_clock::now() - last_renew_ < config_.renew_deadline) continue;
    lock.unlock();
    SetLeader(false);
    lock.lock();
  }
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (deadline_thread_.joinable()) deadline_thread_.join();
}

bool LeaderElector::IsLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_;
}

uint64_t LeaderElector::fencing_token() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fencing_token_;
}

bool LeaderElector::HoldsLease() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_ && std::chrono::steady_clock::now() - last_renew_ < config_.renew_deadline;
}

Status LeaderElector::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void LeaderElector::SetLeader(bool leader) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leader_ == leader) return;
    leader_ = leader;
  }
  const auto& callback = leader ? config_.on_started_leading : config_.on_stopped_leading;
  if (callback) callback();
}

StatusOr<bool> LeaderElector::TryAcquireOrRenew() {
  const std::string path = kLeases.Path(config_.namespace_name, config_.lease_name);
  const auto local_now = config_.steady_now();
  const std::string stamp = FormatRfc3339(config_.now(), 6);
  const int duration_s =
      static_cast<int>(std::max<int64_t>(1, (config_.lease_duration.count() + 999) / 1000));

  ApiResult current = client_.Get(path);
  if (IsNotFound(current)) {
    nlohmann::json lease = {
        {"apiVersion", kLeaseApiVersion},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.namespace_name}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", duration_s},
          {"acquireTime", stamp},
          {"renewTime", stamp},
          {"leaseTransitions", 0}}},
    };
    ApiResult created = client_.Create(kLeases.Path(config_.namespace_name), lease);
    if (IsAlreadyExists(created) || IsConflict(created)) return false;  // another won the race
    if (!created.ok()) return created.status();
    std::lock_guard<std::mutex> lock(mu_);
    fencing_token_ = 0;
    return true;
  }
  if (!current.ok()) return current.status();

  nlohmann::json lease = std::move(current).value();
  if (!lease.is_object()) return Internal("GET " + path + ": the lease is not an object");
  nlohmann::json& spec = lease["spec"];
  if (!spec.is_object()) spec = nlohmann::json::object();
  // renewTime comes from the holder's clock, so it is only compared with itself: any change of the
  // record (a renewal, a new holder, or any write that bumps resourceVersion) restarts the wait.
  std::string record = spec.dump() + " " + StringAt(lease, {"metadata", "resourceVersion"});
  if (record != observed_record_) {
    observed_record_ = std::move(record);
    observed_time_ = local_now;
  }
  const std::string holder = StringAt(spec, {"holderIdentity"});
  if (!holder.empty() && holder != config_.identity) {
    // The API field is an int32; clamping keeps a corrupt value from overflowing the sum below.
    const int64_t held_s = std::min<int64_t>(IntAt(spec, {"leaseDurationSeconds"}).value_or(0),
                                             std::numeric_limits<int32_t>::max());
    // Without a usable duration in the lease, ours bounds the wait, so it still ends.
    const std::chrono::milliseconds lease_duration =
        held_s > 0 ? std::chrono::seconds(held_s) : config_.lease_duration;
    if (local_now < observed_time_ + lease_duration) return false;
  }
  if (holder != config_.identity) {
    spec["acquireTime"] = stamp;
    spec["leaseTransitions"] = IntAt(spec, {"leaseTransitions"}).value_or(0) + 1;
  }
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = stamp;
  // metadata.resourceVersion is the one just read: a concurrent writer makes this a 409.
  ApiResult written = client_.Replace(path, lease);
  if (IsConflict(written)) return false;
  if (!written.ok()) return written.status();
  const int64_t transitions = IntAt(spec, {"leaseTransitions"}).value_or(0);
  std::lock_guard<std::mutex> lock(mu_);
  fencing_token_ = static_cast<uint64_t>(std::max<int64_t>(0, transitions));
  return true;
}

void LeaderElector::Release() {
  const std::string path = kLeases.Path(config_.namespace_name, config_.lease_name);
  ApiResult current = client_.Get(path);
  if (!current.ok()) return;
  nlohmann::json lease = std::move(current).value();
  if (StringAt(lease, {"spec", "holderIdentity"}) != config_.identity) return;
  const std::string stamp = FormatRfc3339(config_.now(), 6);
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = stamp;
  lease["spec"]["acquireTime"] = stamp;
  (void)client_.Replace(path, lease);  // best effort: the lease expires anyway
}

void LeaderElector::Run() {
  auto last_renew = std::chrono::steady_clock::now();
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) break;
    }
    StatusOr<bool> held = Internal("lease attempt did not run");
    // A renewal counts from when it was sent: the lease's clock starts no later than that.
    const auto attempt_start = std::chrono::steady_clock::now();
    try {
      held = TryAcquireOrRenew();
    } catch (const std::exception& e) {  // a malformed lease must not kill the thread
      held = Internal(e.what());
    }
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = held.ok() ? OkStatus()
                              : held.status().WithContext("lease " + config_.namespace_name + "/" +
                                                          config_.lease_name);
    }
    if (held.ok() && held.value()) {
      last_renew = now;
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_renew_ = attempt_start;
      }
      SetLeader(true);
    } else if (IsLeader()) {
      // Another holder: lost at once. A failed request: keep leading until the renew deadline,
      // so one slow API call does not drop leadership.
      if (held.ok() || now - last_renew >= config_.renew_deadline) SetLeader(false);
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, config_.retry_period, [this] { return stopping_; });
  }
  if (IsLeader()) {
    Release();
    SetLeader(false);
  }
}

}  // namespace korovod::kube
