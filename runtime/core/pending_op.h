// PendingOp: one submitted operation on this rank, from Submit until its completion.
#pragma once

#include <memory>

#include "runtime/core/engine.h"
#include "runtime/core/negotiation_messages.h"

namespace korovod {

struct PendingOp {
  OpRequest request;
  Request report;  // what this rank reports to the coordinator (negotiation_messages.h)
  std::shared_ptr<OpState> state;
  int set_id = 0;
  int cache_bit = -1;  // response cache hit: the bit reported ready every cycle
  bool sent = false;   // reported to the coordinator
};

}  // namespace korovod
