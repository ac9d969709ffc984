// BodyBudget: bounds the memory that review bodies in flight can take (issue 31).
//
// A request's body is held whole in memory before it is parsed. At the body limit (4 MiB) and
// the connection cap (256) that is 1 GiB, four times the operator's memory limit in the chart,
// for anyone who can reach the webhook Service and send large bodies slowly. So each request
// reserves its declared Content-Length (the body limit when it declares none) before a byte of
// its body is read, and a reservation past the total budget, or past one address's share of it,
// is answered 503 at once. The API server's reviews are tens of KiB: hundreds fit in one
// address's share; a few attackers' addresses are needed to use up the total.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace korovod::k8s_operator {

struct BodyBudgetLimits {
  size_t total_bytes = 32u << 20;
  // Two of the largest reviews the API server can send (3 MiB) from one address at once.
  size_t per_source_bytes = 8u << 20;
};

class BodyBudget {
 public:
  // Bytes held until it is destroyed.
  class Reservation {
   public:
    Reservation(BodyBudget* budget, std::string source, size_t bytes)
        : budget_(budget), source_(std::move(source)), bytes_(bytes) {}
    Reservation(Reservation&& other) noexcept
        : budget_(other.budget_), source_(std::move(other.source_)), bytes_(other.bytes_) {
      other.budget_ = nullptr;
    }
    Reservation& operator=(Reservation&&) = delete;
    Reservation(const Reservation&) = delete;
    ~Reservation();

   private:
    BodyBudget* budget_;
    std::string source_;
    size_t bytes_;
  };

  explicit BodyBudget(BodyBudgetLimits limits) : limits_(limits) {}
  BodyBudget(const BodyBudget&) = delete;
  BodyBudget& operator=(const BodyBudget&) = delete;

  // nullopt when `bytes` more would exceed the total or `source`'s share.
  std::optional<Reservation> TryReserve(const std::string& source, size_t bytes);

  const BodyBudgetLimits& limits() const { return limits_; }
  size_t in_use() const;

 private:
  void Release(const std::string& source, size_t bytes);

  const BodyBudgetLimits limits_;
  mutable std::mutex mu_;
  size_t total_ = 0;
  std::map<std::string, size_t> by_source_;  // only sources with bytes reserved
};

}  // namespace korovod::k8s_operator
