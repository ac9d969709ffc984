#include "runtime/world/elastic_rendezvous.h"

#include <algorithm>

#include "common/log.h"
#include "runtime/world/elastic_wire.h"
#include "runtime/world/membership_listener.h"
#include "runtime/world/rendezvous_frame.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

using elastic_wire::kPerConnection;
using elastic_wire::Seconds;
using elastic_wire::ValidWorkerId;

// Workers the driver listed and then removed, remembered to refuse them at once.
constexpr size_t kMaxRemembered = 4096;

}  // namespace

// A connection the server answers later.
struct HeldConnection {
  Fd fd;
  bool polled = false;  // in the listener's poll set now: its revents are this connection's
};

struct ElasticRendezvousServer::Waiting : HeldConnection {
  uint32_t last_epoch = 0;
  RankEntry entry;
  uint64_t order = 0;
  Clock::time_point since;  // registered; a worker the driver does not list waits from then
};

struct ElasticRendezvousServer::Watcher : HeldConnection {
  uint64_t since = 0;
  uint64_t seen = 0;
  Clock::time_point until;
  std::string who;
};

StatusOr<std::unique_ptr<ElasticRendezvousServer>> ElasticRendezvousServer::Start(
    ElasticServerOptions options) {
  if (options.min_workers < 1) {
    return InvalidArgument("elastic: the minimum number of workers must be at least 1, got " +
                           std::to_string(options.min_workers));
  }
  if (options.max_workers > 0 && options.max_workers < options.min_workers) {
    return InvalidArgument("elastic: the maximum number of workers (" +
                           std::to_string(options.max_workers) + ") is below the minimum (" +
                           std::to_string(options.min_workers) + ")");
  }
  if (options.resume_epoch == 0 && !options.resume_members.empty()) {
    return InvalidArgument("elastic: members to resume need the epoch they formed");
  }
  for (const std::string& m : options.resume_members) {
    if (!ValidWorkerId(m)) {
      return InvalidArgument("elastic: resumed member \"" + m + "\" is not a valid worker id");
    }
  }
  std::shared_ptr<MembershipListener> listener = options.listener;
  if (listener == nullptr) {
    MembershipListenerOptions l;
    l.listen_fd = options.listen_fd;
    l.port = options.port;
    auto started = MembershipListener::Start(l);
    if (!started.ok()) return started.status().WithContext("elastic rendezvous server");
    listener = std::move(started).value();
  }
  std::unique_ptr<ElasticRendezvousServer> server(
      new ElasticRendezvousServer(std::move(options), listener));
  KV_RETURN_IF_ERROR(listener->Attach(server->job_id_, server->options_.job_key, server.get()));
  return server;
}

ElasticRendezvousServer::ElasticRendezvousServer(ElasticServerOptions options,
                                                 std::shared_ptr<MembershipListener> l)
    : options_(std::move(options)),
      job_id_(ElasticJobId(options_.job_key)),
      listener_(std::move(l)) {
  epoch_ = options_.resume_epoch;
  members_ = options_.resume_members;
  live_.insert(members_.begin(), members_.end());
  version_ = formed_version_ = options_.resume_version;
  if (epoch_ > 0) formations_ = 1 + std::max(0, options_.resume_resets);
}

ElasticRendezvousServer::~ElasticRendezvousServer() {
  // Once detached the listener's thread never calls in again; the held connections close with
  // the members below, and their workers look for another server.
  listener_->Detach(job_id_, this);
}

uint16_t ElasticRendezvousServer::port() const { return listener_->port(); }

void ElasticRendezvousServer::SetLiveWorkers(const std::vector<std::string>& workers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::string> next(workers.begin(), workers.end());
    int bits = kNoHostUpdate;
    for (const std::string& w : next) {
      if (live_.count(w) != 0) continue;
      bits |= kHostsAdded;
      removed_.erase(w);
      // A held registration counts from now: the driver has just listed it.
      if (waiting_.count(w) != 0 && !first_registered_) first_registered_ = Clock::now();
    }
    for (const std::string& w : live_) {
      if (next.count(w) != 0) continue;
      bits |= kHostsRemoved;
      if (removed_.size() >= kMaxRemembered) removed_.erase(removed_.begin());
      removed_.insert(w);
    }
    live_ = std::move(next);
    if (bits != kNoHostUpdate) AddUpdate(bits);
  }
  listener_->Wake();  // held queries hear of it, held registrations may form, now
}

void ElasticRendezvousServer::AddUpdate(int bits) {
  updates_.emplace_back(++version_, bits);
  if (updates_.size() > kMaxUpdateLog) {
    // The two oldest become one: an asker between them reads the older bits too (a reset more,
    // never a change missed).
    updates_[1].second |= updates_[0].second;
    updates_.erase(updates_.begin());
  }
}

uint32_t ElasticRendezvousServer::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

uint64_t ElasticRendezvousServer::formed_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return formed_version_;
}

std::vector<std::string> ElasticRendezvousServer::members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

int ElasticRendezvousServer::resets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(0, formations_ - 1);
}

Status ElasticRendezvousServer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::vector<std::string> ElasticRendezvousServer::TakeLost() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(lost_, {});
}

size_t ElasticRendezvousServer::update_log_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return updates_.size();
}

void ElasticRendezvousServer::AppendFds(std::vector<pollfd>& fds) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, w] : waiting_) {
    fds.push_back({w->fd.get(), POLLIN, 0});
    w->polled = true;
  }
  for (auto& w : watchers_) {
    fds.push_back({w->fd.get(), POLLIN, 0});
    w->polled = true;
  }
}

void ElasticRendezvousServer::Service(const std::map<int, short>& revents) {
  std::lock_guard<std::mutex> lock(mu_);
  // A waiting worker or query says nothing until answered: input or a hang-up means it went away.
  auto gone = [&](const HeldConnection& h) { return h.polled && revents.count(h.fd.get()) != 0; };
  std::erase_if(waiting_, [&](const auto& entry) { return gone(*entry.second); });
  std::erase_if(watchers_, [&](const auto& w) { return gone(*w); });
  AnswerWatchers(/*all=*/false);
  HoldUnlisted();
  if (failure_.ok()) TryForm();
}

// One authenticated request: a query (answered now, or held until the version moves) or a
// registration (held until its epoch forms, or refused with the reason).
void ElasticRendezvousServer::Accept(AuthenticatedConnection c) {
  if (c.payload.empty()) return;
  const auto type = static_cast<FrameType>(c.payload[0]);
  const std::string text = c.payload.substr(1);
  std::lock_guard<std::mutex> lock(mu_);
  const std::string who = "elastic worker at " + c.source;
  if (type == FrameType::kQuery) {
    const ParsedMembershipQuery q = ParseMembershipQueryFields(text);
    if (q.fence > options_.fencing_token) {
      return Fence(c.fd.get(), q.fence, who);
    }
    const auto wait = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(q.wait_ms),
                                                          elastic_wire::kMaxQueryWait);
    if (wait.count() == 0 || version_ > q.seen) return AnswerQuery(c.fd.get(), q.since, who);
    auto w = std::make_unique<Watcher>();
    w->fd = std::move(c.fd);
    w->since = q.since;
    w->seen = q.seen;
    w->until = Clock::now() + wait;
    w->who = who;
    watchers_.push_back(std::move(w));
    return;
  }
  Register(c, text);
}

void ElasticRendezvousServer::Fence(int fd, uint64_t fence, const std::string& who) {
  if (!told_deposed_) {
    told_deposed_ = true;
    KV_LOG(kWarning, kWorld,
           "elastic: a worker of this job met fencing token %llu, above this server's %llu: "
           "another driver (a newer operator leader) serves the job; this one refuses its "
           "workers",
           static_cast<unsigned long long>(fence),
           static_cast<unsigned long long>(options_.fencing_token));
  }
  (void)WriteFrame(
      fd, FrameType::kFenced,
      "token=" + std::to_string(options_.fencing_token) + " fence=" + std::to_string(fence),
      Deadline::After(kPerConnection), who);
}

void ElasticRendezvousServer::AnswerQuery(int fd, uint64_t since, const std::string& who) {
  (void)WriteFrame(fd, FrameType::kVersion, VersionAnswer(since), Deadline::After(kPerConnection),
                   who);
}

std::string ElasticRendezvousServer::VersionAnswer(uint64_t since) const {
  int bits = kNoHostUpdate;
  for (const auto& [v, b] : updates_) {
    if (v > since) bits |= b;
  }
  std::string answer = "version=" + std::to_string(version_) + " epoch=" + std::to_string(epoch_) +
                       " update=" + std::to_string(bits) +
                       " token=" + std::to_string(options_.fencing_token);
  for (const std::string& m : members_) {
    if (live_.count(m) == 0) answer += "\n" + m;  // gone: one per line
  }
  return answer;
}

void ElasticRendezvousServer::AnswerWatchers(bool all) {
  const auto now = Clock::now();
  // Members of one epoch ask from one version: one text for all of them (a thousand held queries
  // answered at a change would otherwise walk the member list a thousand times).
  std::map<uint64_t, std::string> answers;
  std::erase_if(watchers_, [&](const std::unique_ptr<Watcher>& w) {
    if (!all && version_ <= w->seen && now < w->until) return false;
    auto it = answers.find(w->since);
    if (it == answers.end()) it = answers.emplace(w->since, VersionAnswer(w->since)).first;
    (void)WriteFrame(w->fd.get(), FrameType::kVersion, it->second, Deadline::After(kPerConnection),
                     w->who);
    return true;
  });
}

void ElasticRendezvousServer::Register(AuthenticatedConnection& c, const std::string& text) {
  const std::string who = "elastic worker at " + c.source;
  const Deadline d = Deadline::After(kPerConnection);
  auto refuse = [&](const std::string& why) {
    (void)WriteFrame(c.fd.get(), FrameType::kRefusal, why, d, who);
  };
  auto reg = ParseElasticRegistration(text);
  if (!reg.ok()) return refuse(reg.status().message());
  if (reg->fence > options_.fencing_token) return Fence(c.fd.get(), reg->fence, who);
  const std::string& worker = reg->worker;
  const uint64_t last_epoch = reg->last_epoch;
  if (!failure_.ok()) return refuse(failure_.message());
  if (removed_.count(worker) != 0) {
    return refuse("worker " + worker +
                  " is not a live worker of this job (the driver removed it): it may not join "
                  "epoch " +
                  std::to_string(epoch_ + 1));
  }
  const bool member = std::find(members_.begin(), members_.end(), worker) != members_.end();
  // A member registering from epoch 0 is a fresh process of that worker: its sidecar restarted
  // in place (a native sidecar restarted by the kubelet) and lost its epoch. It joins the next
  // epoch like a newcomer, keeping its place; one from an older nonzero epoch is a stale process.
  if (member && last_epoch == 0 && epoch_ > 0) {
    KV_LOG(kInfo, kWorld,
           "elastic: worker %s registers afresh while a member of epoch %u (its sidecar "
           "restarted): it joins epoch %u",
           worker.c_str(), epoch_, epoch_ + 1);
  } else if (last_epoch > epoch_ || (member && last_epoch != epoch_)) {
    return refuse("worker " + worker + " registers from epoch " + std::to_string(last_epoch) +
                  " but the job is at epoch " + std::to_string(epoch_) +
                  (member ? ", which formed with it: a stale member is refused" : ""));
  }
  const bool listed = live_.count(worker) != 0;
  if (!listed) {
    // Its pod may be running before the driver saw it so (the operator's informer lags the
    // kubelet): held, not refused, until the driver lists it or the timeout passes.
    KV_LOG(kInfo, kWorld,
           "elastic: worker %s registers before the driver lists it: held for up to %s",
           worker.c_str(), Seconds(options_.timeout).c_str());
  }
  auto w = std::make_unique<Waiting>();
  w->fd = std::move(c.fd);
  w->last_epoch = static_cast<uint32_t>(last_epoch);
  w->entry = std::move(reg->entry);
  w->order = ++registrations_;
  w->since = Clock::now();
  waiting_[worker] = std::move(w);  // a worker that registers again replaces its registration
  if (listed && !first_registered_) first_registered_ = Clock::now();
}

void ElasticRendezvousServer::HoldUnlisted() {
  const auto now = Clock::now();
  std::erase_if(waiting_, [&](const auto& entry) {
    const auto& [name, w] = entry;
    if (live_.count(name) != 0 || now - w->since < options_.timeout) return false;
    (void)WriteFrame(w->fd.get(), FrameType::kRefusal,
                     "worker " + name +
                         " is not a live worker of this job: the driver did not list it within "
                         "the elastic timeout (" +
                         Seconds(options_.timeout) +
                         ", its pod not seen running): it may not join epoch " +
                         std::to_string(epoch_ + 1),
                     Deadline::After(kPerConnection), "elastic worker " + name);
    return true;
  });
}

void ElasticRendezvousServer::FailAll(const Status& s) {
  failure_ = s;
  for (auto& [name, w] : waiting_) {
    (void)WriteFrame(w->fd.get(), FrameType::kRefusal, s.message(), Deadline::After(kPerConnection),
                     "elastic worker " + name);
  }
  waiting_.clear();
}

void ElasticRendezvousServer::TryForm() {
  const auto now = Clock::now();
  const int alive = static_cast<int>(live_.size());
  if (alive < options_.min_workers) {
    if (!below_min_since_) below_min_since_ = now;
    if (!waiting_.empty() && now - *below_min_since_ >= options_.timeout) {
      FailAll(FailedPrecondition("elastic: " + std::to_string(alive) + " worker" +
                                 (alive == 1 ? "" : "s") + " alive, at least " +
                                 std::to_string(options_.min_workers) +
                                 " needed (the minimum number of workers); waited " +
                                 Seconds(options_.timeout) + " for more"));
    }
    return;
  }
  below_min_since_.reset();
  std::vector<std::string> missing;
  for (const std::string& w : live_) {
    if (waiting_.count(w) == 0) missing.push_back(w);
  }
  if (static_cast<int>(missing.size()) == alive || !first_registered_) return;  // none listed
  if (!missing.empty()) {
    if (now - *first_registered_ < options_.timeout) return;
    // Alive but silent for the whole timeout: left out, and the driver stops it.
    for (const std::string& w : missing) {
      live_.erase(w);
      lost_.push_back(w);
    }
    AddUpdate(kHostsRemoved);
    if (static_cast<int>(live_.size()) < options_.min_workers) return;
  }
  if (options_.reset_limit >= 0 && formations_ >= 1 + options_.reset_limit) {
    FailAll(FailedPrecondition("elastic: the reset limit (" + std::to_string(options_.reset_limit) +
                               ") is reached: the job stops instead of forming epoch " +
                               std::to_string(epoch_ + 1)));
    return;
  }
  // Members of the last epoch keep their order; newcomers follow in registration order.
  std::vector<std::string> order;
  for (const std::string& m : members_) {
    if (waiting_.count(m) != 0 && live_.count(m) != 0) order.push_back(m);
  }
  std::vector<std::pair<uint64_t, std::string>> newcomers;
  for (const auto& [name, w] : waiting_) {
    if (live_.count(name) != 0 && std::find(order.begin(), order.end(), name) == order.end()) {
      newcomers.emplace_back(w->order, name);
    }
  }
  std::sort(newcomers.begin(), newcomers.end());
  for (const auto& [o, name] : newcomers) order.push_back(name);
  Form(order);
}

void ElasticRendezvousServer::Form(const std::vector<std::string>& order) {
  std::vector<std::string> chosen = order;
  if (options_.max_workers > 0 && static_cast<int>(chosen.size()) > options_.max_workers) {
    chosen.resize(static_cast<size_t>(options_.max_workers));
  }
  ++epoch_;
  ++formations_;
  members_ = chosen;
  formed_version_ = version_;
  // The members of this epoch ask about the changes after formed_version_: what came before is
  // merged into one entry (read only by members of older epochs, who reset anyway).
  const auto older = std::find_if(updates_.begin(), updates_.end(),
                                  [&](const auto& u) { return u.first > formed_version_; });
  if (older - updates_.begin() > 1) {
    int bits = kNoHostUpdate;
    for (auto it = updates_.begin(); it != older; ++it) bits |= it->second;
    const uint64_t last = std::prev(older)->first;
    updates_.erase(updates_.begin(), older);
    updates_.insert(updates_.begin(), {last, bits});
  }
  std::vector<RankEntry> table;
  for (const std::string& m : chosen) table.push_back(waiting_[m]->entry);
  ApplyLoopbackRule(table);
  const std::string text = FormatWorldTable(table);
  const Deadline d = Deadline::After(kPerConnection);
  for (size_t r = 0; r < chosen.size(); ++r) {
    Waiting& w = *waiting_[chosen[r]];
    (void)WriteFrame(w.fd.get(), FrameType::kTable,
                     "epoch=" + std::to_string(epoch_) + " rank=" + std::to_string(r) + " size=" +
                         std::to_string(chosen.size()) + " version=" + std::to_string(version_) +
                         " token=" + std::to_string(options_.fencing_token) + "\n" + text,
                     d, "elastic worker " + chosen[r]);
  }
  // Those the driver does not list yet stay held for a later epoch.
  std::erase_if(waiting_, [&](const auto& entry) {
    const auto& [name, w] = entry;
    if (live_.count(name) == 0) return false;
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) {
      (void)WriteFrame(w->fd.get(), FrameType::kRefusal,
                       "elastic: epoch " + std::to_string(epoch_) + " is full (" +
                           std::to_string(options_.max_workers) +
                           " workers, the maximum): worker " + name + " waits for a later one",
                       d, "elastic worker " + name);
    }
    return true;
  });
  first_registered_.reset();
}

}  // namespace korovod
