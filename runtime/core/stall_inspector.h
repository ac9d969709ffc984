// StallInspector: on the coordinator, notices tensors that some ranks submitted and others did
// not, for longer than the check time, and says which ranks are missing which tensors. The
// classic Horovod hang (one rank took a different branch, or ran out of data) becomes a message.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace korovod {

class StallInspector {
 public:
  // check: report after this long (0 disables); shutdown: fail the job after this long (0: never).
  StallInspector(std::chrono::milliseconds check, std::chrono::milliseconds shutdown, int set_id,
                 int set_size);

  void Reported(const std::string& tensor, int set_rank, Clock::time_point now);
  void Resolved(const std::string& tensor);

  struct Finding {
    std::string report;  // multi-line text naming ranks and tensors
    bool shutdown = false;
  };
  // At most one report per check interval. `describe` names a set rank ("rank 2 (host:port)");
  // joined ranks are never reported missing.
  std::optional<Finding> Check(Clock::time_point now,
                               const std::function<std::string(int)>& describe,
                               const std::vector<bool>& joined);

 private:
  struct Pending {
    Clock::time_point first_seen;
    std::vector<bool> reported;
  };
  std::chrono::milliseconds check_;
  std::chrono::milliseconds shutdown_;
  int set_id_;
  int set_size_;
  std::map<std::string, Pending> pending_;
  Clock::time_point last_report_{};
};

}  // namespace korovod
