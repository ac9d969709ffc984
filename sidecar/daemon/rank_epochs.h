// RankEpochs: the membership epochs one served rank runs through. A static job has one, built at
// start and kept for the sidecar's life. An elastic job forms one per trainer session: every
// Hello ends the current epoch (its engine shuts down, failing whatever was still in flight with
// the cause, then its op loop stops) and forms the next through the membership server, so a
// trainer that resets (hvd.elastic: shutdown, then init) lands in the new world with its new rank.
// Nothing of an old epoch reaches the new one: the engine, the op loop and every peer connection
// are new, and the epoch is part of the peers' handshake.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "common/status.h"
#include "runtime/core/engine.h"
#include "runtime/world/elastic_rendezvous.h"
#include "sidecar/daemon/op_loop.h"

namespace korovod::sidecar {

// One epoch of a served rank: who it is there, and the engine and op loop that serve its trainer.
struct ServedEpoch {
  uint32_t epoch = 0;  // 0: a static job
  uint64_t formed_version = 0;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string transport;       // for the start-up line
  std::string listen_address;  // this rank's data address
  std::unique_ptr<Engine> engine;
  std::unique_ptr<OpLoop> loop;

  // Engine first: ops in flight fail and are answered while the op loop still serves the arena.
  // Idempotent.
  void End();
  ~ServedEpoch() { End(); }
};

class RankEpochs {
 public:
  using Former =
      std::function<StatusOr<std::shared_ptr<ServedEpoch>>(uint32_t last_epoch, Deadline)>;
  using Query = std::function<StatusOr<MembershipVersion>(const MembershipQuery&, Deadline)>;

  // Static: `only` serves every session.
  explicit RankEpochs(std::shared_ptr<ServedEpoch> only);
  // Elastic: each session's epoch comes from `form`; `query` answers Membership. The current
  // epoch keeps one query held at the server (a long poll of up to `long_poll`, answered as soon
  // as the membership moves) to learn whether a member is gone (the driver removed it: its pod
  // was deleted, its node went NotReady) and aborts its engine naming them, so a member that
  // vanished without closing its connections (a frozen or partitioned host) does not hold the
  // others until their op deadline. `watch_every` spaces the questions when the server does not
  // answer, or answers at once without news (a server that does not hold queries).
  RankEpochs(Former form, Query query,
             std::chrono::milliseconds watch_every = std::chrono::milliseconds(1000),
             std::chrono::milliseconds long_poll = std::chrono::milliseconds(10000));
  ~RankEpochs();

  bool elastic() const { return static_cast<bool>(form_); }
  std::shared_ptr<ServedEpoch> current() const;

  // The epoch a new trainer session runs in (Hello). Static: the one. Elastic: ends the current
  // epoch and forms the next (one Hello at a time; the wait ends at `deadline`).
  StatusOr<std::shared_ptr<ServedEpoch>> ForSession(Deadline deadline);

  // Whether the membership moved since the current epoch formed. Static: all zeros. Elastic: the
  // membership watch's last answer while it stands (under the long poll's bound plus 2 s old: a
  // change would have been answered at once), so a commit costs no round trip to the server (the
  // epoch's first commit asks itself); a server that does not answer (an operator failing over)
  // reads as "no change", said once per epoch, so training goes on and the next answer tells.
  struct Membership {
    uint32_t epoch = 0;
    uint64_t formed_version = 0;
    uint64_t version = 0;
    int update = 0;
  };
  StatusOr<Membership> QueryMembership(Deadline deadline) const;

  // Ends the current epoch (sidecar shutdown).
  void EndCurrent();

 private:
  Former form_;
  Query query_;
  void Watch(std::stop_token stop, std::chrono::milliseconds every);
  const std::chrono::milliseconds long_poll_{0};

  std::mutex form_mu_;  // one formation at a time
  mutable std::mutex mu_;
  std::shared_ptr<ServedEpoch> current_;
  // The watch's last answer, for the epoch it asked about (under mu_).
  struct Answer {
    uint32_t epoch = 0;
    Clock::time_point at;
    MembershipVersion v;
  };
  mutable std::optional<Answer> last_answer_;
  mutable uint32_t unreachable_said_ = 0;  // the epoch whose unreachable server was logged
  std::condition_variable_any watch_cv_;
  std::jthread watch_;  // last: stops before the members it reads go
};

}  // namespace korovod::sidecar
