#include "sidecar/daemon/rank_epochs.h"

#include <utility>

namespace korovod::sidecar {

void ServedEpoch::End() {
  if (engine != nullptr) engine->Shutdown();
  if (loop != nullptr) loop->Stop();
}

RankEpochs::RankEpochs(std::shared_ptr<ServedEpoch> only) : current_(std::move(only)) {}

RankEpochs::RankEpochs(Former form, Query query)
    : form_(std::move(form)), query_(std::move(query)) {}

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
  KV_ASSIGN_OR_RETURN(MembershipVersion v, query_(e->formed_version, deadline));
  m.version = v.version;
  m.update = v.update;
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
