#include "sidecar/daemon/rank_epochs.h"

#include <utility>

#include "common/log.h"

namespace korovod::sidecar {
namespace {

// A membership answer this young stands for a fresh one (the watch asks every second).
constexpr auto kFreshAnswer = std::chrono::milliseconds(2000);

}  // namespace

void ServedEpoch::End() {
  if (engine != nullptr) engine->Shutdown();
  if (loop != nullptr) loop->Stop();
}

RankEpochs::RankEpochs(std::shared_ptr<ServedEpoch> only) : current_(std::move(only)) {}

RankEpochs::RankEpochs(Former form, Query query, std::chrono::milliseconds watch_every)
    : form_(std::move(form)), query_(std::move(query)) {
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
  std::mutex sleep_mu;
  std::unique_lock<std::mutex> sleep(sleep_mu);
  while (!watch_cv_.wait_for(sleep, stop, every, [&stop] { return stop.stop_requested(); })) {
    std::shared_ptr<ServedEpoch> e = current();
    if (e == nullptr || e->epoch == aborted) continue;
    auto v = query_(e->formed_version, Deadline::After(std::chrono::milliseconds(2000)));
    if (!v.ok()) {
      KV_LOG(kDebug, kSidecar, "membership watch: %s", v.status().ToString().c_str());
      continue;  // a server that does not answer ends nothing: the next formation will tell
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_answer_ = Answer{e->epoch, Clock::now(), *v};
    }
    if (v->epoch != e->epoch || v->gone.empty() || e->engine == nullptr) continue;
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
  if (known && Clock::now() - known->at < kFreshAnswer) {
    m.version = known->v.version;
    m.update = known->v.update;
    return m;
  }
  if (known) {
    // The watch has asked in vain for a while: the server is away. No commit waits for it.
    unreachable = Unavailable("no answer for " + std::to_string(std::chrono::duration_cast<
                                  std::chrono::seconds>(Clock::now() - known->at).count()) +
                              " s");
  } else {
    // The epoch's first question: ask now (the server formed the epoch a moment ago).
    auto v = query_(e->formed_version, deadline.Sooner(kFreshAnswer));
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
