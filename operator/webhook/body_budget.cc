#include "operator/webhook/body_budget.h"

namespace korovod::k8s_operator {

BodyBudget::Reservation::~Reservation() {
  if (budget_ != nullptr) budget_->Release(source_, bytes_);
}

std::optional<BodyBudget::Reservation> BodyBudget::TryReserve(const std::string& source,
                                                              size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t& mine = by_source_[source];
  if (bytes > limits_.total_bytes - total_ || bytes > limits_.per_source_bytes - mine) {
    if (mine == 0) by_source_.erase(source);
    return std::nullopt;
  }
  mine += bytes;
  total_ += bytes;
  return Reservation(this, source, bytes);
}

size_t BodyBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

void BodyBudget::Release(const std::string& source, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  total_ -= bytes;
  auto it = by_source_.find(source);
  if (it != by_source_.end() && (it->second -= bytes) == 0) by_source_.erase(it);
}

}  // namespace korovod::k8s_operator
