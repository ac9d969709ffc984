// MembershipListener: one TCP listener and one event thread that serve the elastic membership
// servers (elastic_rendezvous.h) of every job a driver runs. The operator's leader has one for all
// its elastic jobs, on one well-known port, instead of a port and a thread per job; korovodrun's
// server makes one of its own.
//
// A connection names its job before the handshake (the job preamble, handshake_listener.h; the id
// is ElasticJobId(key)) and is then authenticated with that job's key; the handshake and the
// first request run on the HandshakeListener's threads, so a stalled or lying client holds up only
// itself. The event thread hands each authenticated request to its job's server, polls every
// connection the servers hold (registrations waiting for their epoch, membership queries waiting
// for the version to move) for hang-ups, and runs the servers' timers every kServiceSlice or
// sooner when a driver changes a server (Wake).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/fd.h"
#include "common/status.h"
#include "runtime/transport/handshake_listener.h"

namespace korovod {

class ElasticRendezvousServer;

struct MembershipListenerOptions {
  int listen_fd = -1;  // an already listening socket (taken over); -1: bind host:port
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0: any free port
  // HandshakeListener's limits: handshakes at once per source address and in all.
  int max_per_source = 16;
  int max_in_flight = 128;
};

class MembershipListener {
 public:
  static constexpr std::chrono::milliseconds kServiceSlice{100};

  static StatusOr<std::shared_ptr<MembershipListener>> Start(MembershipListenerOptions options);
  ~MembershipListener();  // stops the thread; every server must have detached before
  MembershipListener(const MembershipListener&) = delete;
  MembershipListener& operator=(const MembershipListener&) = delete;

  uint16_t port() const { return port_; }
  size_t jobs() const;

 private:
  friend class ElasticRendezvousServer;
  MembershipListener(Fd listener, uint16_t port, MembershipListenerOptions options);
  // A server serves `job_id` from now on; AlreadyExists-like FailedPrecondition if another does.
  Status Attach(const std::string& job_id, const std::string& key, ElasticRendezvousServer* s);
  // After this returns the thread never touches `s` again.
  void Detach(const std::string& job_id, ElasticRendezvousServer* s);
  void Wake();  // a server's state changed: serve it now, not at the next slice
  void Run();

  Fd listener_;
  const uint16_t port_;
  Fd wake_;  // eventfd
  std::unique_ptr<HandshakeListener> handshakes_;
  std::atomic<bool> stop_{false};

  mutable std::mutex keys_mu_;               // read by the handshake threads
  std::map<std::string, std::string> keys_;  // job id -> key
  // Held while the thread calls into servers, so Detach waits for a call in progress.
  mutable std::mutex mu_;
  std::map<std::string, ElasticRendezvousServer*> servers_;  // by job id
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace korovod
