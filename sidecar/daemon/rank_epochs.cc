#include "sidecar/daemon/rank_epochs.h"

#include <utility>

#include "common/log.h"

namespace korovod::sidecar {
namespace {

// A membership answer stands for a fresh one this long after its long poll's bound.
constexpr auto kAnswerSlack = std::chrono::milliseconds(2000);

}  // namespace

void ServedEpoch::End() {
  if (engine != nullptr) engine->Shutdown();
  if (loop != nullptr) loop->Stop();
}

RankEpochs::RankEpochs(std::shared_ptr<ServedEpoch> only) : current_(std::move(only)) {}

RankEpochs::RankEpochs(Former form, Query query, std::chrono::milliseconds watch_every,
                       std::chrono::milliseconds long_poll)
    : form_(std::move(form)), query_(std::move(query)), long_poll_(long_poll) {
  watch_ = std::jthread([this, watch_every](std::stop_token stop) { Watch(stop, watch_every); });
}

RankEpochs::~RankEpochs() {
  if (watch_.joinable()) {
    watch_.request_stop();
    watch_cv_.notify_all();
    watch_.join();
  }
}

void RankEpochs::Watch(std::stop_token stop, std::chrono::milliseconds every) {
  uint32_t aborted = 0;  // the epoch already ended by this watch
  uint32_t asked_epoch = 0;
  uint64_t seen = 0;  // the last version read for asked_epoch: the long poll waits past it
  std::mutex sleep_mu;
  std::unique_lock<std::mutex> sleep(sleep_mu);
  auto pause = [&](std::chrono::milliseconds d) {
    return watch_cv_.wait_for(sleep, stop, d, [&stop] { return stop.stop_requested(); });
  };
  while (!stop.stop_requested()) {
    std::shared_ptr<ServedEpoch> e = current();
    if (e == nullptr || e->epoch == aborted) {
      if (pause(every)) break;
      continue;
    }
    if (e->epoch != asked_epoch) {
      asked_epoch = e->epoch;
      seen = e->formed_version;
    }
    MembershipQuery q;
    q.since = e->formed_version;
    q.seen = seen;
    q.wait = long_poll_;
    q.stop = stop;
    const auto asked = Clock::now();
    auto v = query_(q, Deadline::After(long_poll_ + kAnswerSlack));
    if (!v.ok()) {
      KV_LOG(kDebug, kSidecar, "membership watch: %s", v.status().ToString().c_str());
      // A server that does not answer ends nothing: the next formation will tell.
      if (pause(every)) break;
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_answer_ = Answer{e->epoch, Clock::now(), *v};
    }
    const bool news = v->version > seen;
    seen = std::max(seen, v->version);
    if (v->epoch == e->epoch && !v->gone.empty() && e->engine != nullptr) {
      std::string who;
      for (const std::string& g : v->gone) who += (who.empty() ? "" : ", ") + g;
      const std::string why = "elastic: epoch " + std::to_string(e->epoch) + " lost " + who +
                              " (the job's driver no longer lists " +
                              (v->gone.size() == 1 ? "it" : "them") +
                              ": its pod or host is gone); the epoch ends";
      KV_LOG(kWarning, kSidecar, "%s", why.c_str());
      e->engine->Abort(Aborted(why));
      aborted = e->epoch;
    }
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked);
    if (!news && took < every && pause(every - took)) break;
  }
}

std::shared_ptr<ServedEpoch> RankEpochs::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

StatusOr<std::shared_ptr<ServedEpoch>> RankEpochs::ForSession(Deadline deadline) {
  if (!elastic()) {
    std::shared_ptr<ServedEpoch> only = current();
    if (only == nullptr) return FailedPrecondition("the sidecar is shutting down");
    return only;
  }
  std::lock_guard<std::mutex> formation(form_mu_);
  std::shared_ptr<ServedEpoch> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::exchange(current_, nullptr);
  }
  const uint32_t last_epoch = old != nullptr ? old->epoch : 0;
  // Its peers learn that this rank left (their collectives fail and their trainers reset too).
  if (old != nullptr) old->End();
  old.reset();
  KV_ASSIGN_OR_RETURN(std::shared_ptr<ServedEpoch> next, form_(last_epoch, deadline));
  std::lock_guard<std::mutex> lock(mu_);
  current_ = next;
  return next;
}

StatusOr<RankEpochs::Membership> RankEpochs::QueryMembership(Deadline deadline) const {
  std::shared_ptr<ServedEpoch> e = current();
  Membership m;
  if (!elastic() || e == nullptr) return m;
  m.epoch = e->epoch;
  m.formed_version = e->formed_version;
  m.version = e->formed_version;  // "no change" unless an answer says otherwise
  std::optional<Answer> known;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (last_answer_ && last_answer_->epoch == e->epoch) known = last_answer_;
  }
  Status unreachable;
  if (known && Clock::now() - known->at < long_poll_ + kAnswerSlack) {
    m.version = known->v.version;
    m.update = known->v.update;
    return m;
  }
  if (known) {
    // The watch has asked in vain for a while: the server is away. No commit waits for it.
    unreachable = Unavailable(
        "no answer for " +
        std::to_string(
            std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - known->at).count()) +
        " s");
  } else {
    // The epoch's first question: ask now (the server formed the epoch a moment ago).
    MembershipQuery q;
    q.since = e->formed_version;
    q.seen = e->formed_version;
    auto v = query_(q, deadline.Sooner(kAnswerSlack));
    if (v.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!last_answer_ || last_answer_->epoch != e->epoch) {
        last_answer_ = Answer{e->epoch, Clock::now(), *v};
      }
      m.version = v->version;
      m.update = v->update;
      return m;
    }
    unreachable = v.status();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (unreachable_said_ != e->epoch) {
    unreachable_said_ = e->epoch;
    KV_LOG(kWarning, kSidecar,
           "membership server unreachable (%s): commits read \"no change\" until it answers",
           unreachable.ToString().c_str());
  }
  return m;
}

void RankEpochs::EndCurrent() {
  std::shared_ptr<ServedEpoch> e;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e = std::exchange(current_, nullptr);
  }
  if (e != nullptr) e->End();
}

}  // namespace korovod::sidecar
