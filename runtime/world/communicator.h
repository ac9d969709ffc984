// Communicator: this rank's membership in a world, with the transport that reaches its peers.
// Created once per epoch; collectives (runtime/collectives) run over it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/op_timeout.h"
#include "common/status.h"
#include "runtime/transport/transport.h"
#include "runtime/world/host_layout.h"
#include "runtime/world/process_set.h"
#include "runtime/world/world.h"

namespace korovod {

// Sees the phases of each collective (the timeline draws them). Called on the collective's thread.
class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void PhaseBegin(const char* phase) = 0;
  virtual void PhaseEnd() = 0;
};

// The two ends of this rank's connection to a peer, as IPs ("" for self or when unknown).
struct LinkEnds {
  std::string local_ip;
  std::string remote_ip;
};

class Communicator {
 public:
  // Connects to every peer within options.connect_timeout: listens on peers[rank], dials the
  // others, authenticates each connection and sets up the transport. The error names the rank
  // and host:port that could not be reached. With options.ranks (a world table) preflight first
  // picks the address of each rank it dials; options().peers then holds those choices.
  static StatusOr<std::unique_ptr<Communicator>> Create(const WorldOptions& options);

  // Wraps an already connected transport (Create does this; tests may inject their own).
  Communicator(WorldOptions options, std::unique_ptr<Transport> transport);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return static_cast<int>(options_.peers.size()); }
  const WorldOptions& options() const { return options_; }
  const PeerAddress& peer(int rank) const { return options_.peers[rank]; }
  // The IPs at both ends of the connection to `rank` (Create fills them; empty otherwise).
  LinkEnds link_ends(int rank) const {
    return rank < static_cast<int>(link_ends_.size()) ? link_ends_[rank] : LinkEnds{};
  }
  std::string DescribePeer(int rank) const;  // "rank 3 (10.0.0.3:5000)"
  // Ranks on this machine, this one included (they share its cores: the wait policy's input).
  int local_ranks() const { return local_ranks_; }
  // More ranks on this machine than cores this process may run on.
  bool oversubscribed() const { return oversubscribed_; }
  const ProcessSet& world() const { return world_; }
  Transport& transport() { return *transport_; }
  const char* transport_name() const { return transport_->Name(); }

  // One collective's deadline: the op timeout, longer for large tensors (common/op_timeout.h).
  Deadline OpDeadline(uint64_t bytes = 0) const {
    return Deadline::After(ScaledOpTimeout(options_.op_timeout, bytes));
  }

  // Grow-only scratch owned by the communicator, reused across collectives (no per-op
  // allocation once warm). Two independent buffers.
  std::byte* Scratch(int which, size_t bytes);

  // Allreduce crossover (bytes) between the latency and the bandwidth algorithm.
  size_t small_allreduce_max_bytes() const;

  // Run-time tuning (autotune). Only between collectives, on the thread that issues them; every
  // rank must apply the same values before the same collective. 0 keeps the current value.
  void Tune(size_t small_allreduce_max_bytes, size_t tcp_stripe_min);

  void set_phase_observer(PhaseObserver* o) { phase_observer_ = o; }
  PhaseObserver* phase_observer() const { return phase_observer_; }

  // Which ranks share a host, and whether collectives over the world go hierarchical (and why:
  // the start-up line says it). With hierarchy().on, local_set() holds this host's ranks and
  // local_transport() reaches them over shared memory; cross_set() holds the ranks with this
  // rank's local index on every host, reached over transport().
  const HostLayout& host_layout() const { return host_layout_; }
  const HierarchyChoice& hierarchy() const { return hierarchy_; }
  const ProcessSet& local_set() const { return local_set_; }
  const ProcessSet& cross_set() const { return cross_set_; }
  Transport* local_transport() { return local_transport_.get(); }

  // The collective lanes made by Create (TCP with options.collective_lanes > 1): communicators of
  // the same world over their own connections to every peer (the peer mesh's control connection
  // is shared), each usable by one thread while this one and the others are used by theirs. A
  // failure on any of them reaches the others through the mesh (PeerMesh::failure). The caller
  // takes them once; later calls return none.
  std::vector<std::unique_ptr<Communicator>> TakeLanes() { return std::move(lanes_); }

  // Once a collective fails the communicator stays broken: later collectives return this error
  // at once instead of waiting on peers in an unknown state. Shutdown still works.
  const Status& broken() const { return broken_; }
  // Thread-safe (the mesh locks): every transport of this world, lanes included, fails with
  // `why` within a poll slice and the peers are told.
  void Abort(const Status& why) {
    transport_->Abort(why);
    if (local_transport_ != nullptr) local_transport_->Abort(why);
  }
  Status MarkBroken(Status s) {
    if (broken_.ok() && !s.ok()) {
      broken_ = s;
      transport_->Abort(s);
      if (local_transport_ != nullptr) local_transport_->Abort(s);
    }
    return s;
  }

 private:
  WorldOptions options_;
  ProcessSet world_;
  std::unique_ptr<Transport> transport_;
  std::vector<std::unique_ptr<std::byte[]>> scratch_{2};
  std::vector<size_t> scratch_size_ = {0, 0};
  Status broken_;
  PhaseObserver* phase_observer_ = nullptr;
  std::vector<LinkEnds> link_ends_;
  int local_ranks_ = 1;
  bool oversubscribed_ = false;
  std::vector<std::unique_ptr<Communicator>> lanes_;
  HostLayout host_layout_;
  HierarchyChoice hierarchy_;
  ProcessSet local_set_;
  ProcessSet cross_set_;
  std::unique_ptr<Transport> local_transport_;
};

}  // namespace korovod
