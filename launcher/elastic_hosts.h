// ElasticHosts: which slots an elastic korovodrun job may use. The hosts come from the discovery
// script (or -H), less those blacklisted: a host where a worker failed stays out for good, or with
// --blacklist-cooldown-range LO HI for min(LO * 2^(failures - 1), HI) seconds. Workers take slots
// in the order the hosts are listed; a slot stops being offered when its host leaves the list,
// shrinks below it, or is blacklisted.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "launcher/rank_layout.h"

namespace korovod::launcher {

using Slot = std::pair<std::string, int>;  // (host, slot index on it)

class ElasticHosts {
 public:
  explicit ElasticHosts(std::optional<std::pair<double, double>> cooldown_s = std::nullopt)
      : cooldown_s_(cooldown_s) {}

  void SetDiscovered(std::vector<HostSlots> hosts) { discovered_ = std::move(hosts); }
  const std::vector<HostSlots>& discovered() const { return discovered_; }

  // A worker on `host` failed: blacklists it, for the returned cooldown (nullopt: for good).
  std::optional<std::chrono::milliseconds> RecordFailure(const std::string& host,
                                                         Clock::time_point now);
  bool Blacklisted(const std::string& host, Clock::time_point now) const;

  bool Offered(const Slot& slot, Clock::time_point now) const;
  // Slots offered and not in `occupied`, in listing order, at most `want`.
  std::vector<Slot> FreeSlots(const std::set<Slot>& occupied, int want,
                              Clock::time_point now) const;
  int OfferedSlots(Clock::time_point now) const;

 private:
  struct Failures {
    int count = 0;
    std::optional<Clock::time_point> until;  // nullopt: for good
  };
  std::optional<std::pair<double, double>> cooldown_s_;
  std::vector<HostSlots> discovered_;
  std::map<std::string, Failures> failures_;
};

// Parses the discovery script's output: one "host" or "host:slots" per line (blank lines and
// "#" comments ignored); a host without slots gets `default_slots`. Errors name the line.
StatusOr<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& text, int default_slots);

// Runs `script` with /bin/sh -c and returns its standard output; an exit status other than 0, or
// no exit within `timeout`, is an error naming the script (its last stderr line included).
StatusOr<std::string> RunDiscoveryScript(const std::string& script,
                                         std::chrono::milliseconds timeout);

}  // namespace korovod::launcher
