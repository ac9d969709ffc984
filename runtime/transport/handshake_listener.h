// HandshakeListener: accepts connections on a listening socket and runs the acceptor's half of
// the job-key handshake (handshake.h) for each on a thread of its own, so that nothing a client
// sends or withholds can stop the owner from serving the genuine ones.
//
// Every listener that faces the network goes through it: the mesh acceptor (data, control and
// preflight probe connections), the rendezvous coordinator and the elastic membership server.
// A connection that fails (garbage, an old protocol, a stalled or half Hello, a Hello the owner's
// filter refuses, a wrong proof, another epoch) is logged with its source address, counted,
// closed, and remembered for the owner's timeout message; it never takes a genuine peer's slot
// (only authenticated connections reach the owner) and never fails the job. Limits: each
// handshake has `handshake_timeout`; at most `max_per_source` handshakes per source IP and
// `max_in_flight` in all run at once (the rest are closed at once and counted), so a flood costs
// a bounded number of threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "common/fd.h"
#include "common/status.h"
#include "runtime/transport/handshake.h"

namespace korovod {

struct AuthenticatedConnection {
  Fd fd;
  Hello hello;
  std::string source;       // "ip:port" of the dialer
  ConnectionSecret secret;  // the handshake's per-connection secret (wire security)
  std::string job;          // the job the dialer named (JobRouting::key_for_job)
  std::string payload;      // what JobRouting::after_handshake read
};

// A listener shared by several jobs (the operator's one membership listener) cannot know which
// key to prove before the dialer says which job it wants: such a dialer first sends a job
// preamble, "KVJ1", one length byte and the job id (not a secret: elastic_rendezvous.h derives it
// from the key), and reads one byte back, kJobKnown or kJobUnknown, before its Hello.
inline constexpr char kJobPreambleMagic[4] = {'K', 'V', 'J', '1'};
inline constexpr char kJobKnown = 1;
inline constexpr char kJobUnknown = 0;
// Dialer side: sends the preamble and reads the answer. Unavailable naming `who` when the listener
// serves no such job; the socket's error otherwise.
Status DialJobPreamble(int fd, const std::string& job, Deadline deadline, const std::string& who);

struct HandshakeListenerOptions {
  std::string job_key;
  uint32_t epoch = 0;  // the acceptor's membership epoch (answered inside the MAC)
  std::string owner;   // who listens, for logs: "rank 0 (10.0.0.1:29500)"
  std::chrono::milliseconds handshake_timeout{5000};
  int max_per_source = 16;
  int max_in_flight = 128;
};

// For a listener shared by several jobs (the elastic membership listener).
struct JobRouting {
  // Set: every connection opens with a job preamble; the key of the job it names (nullopt: not
  // served here, answered kJobUnknown and closed) replaces job_key for its handshake.
  std::function<std::optional<std::string>(const std::string& job)> key_for_job;
  // Set: runs on the handshake's thread once the dialer is authenticated (it reads the first
  // request into `payload`), so a client that stalls after its handshake holds up only itself. An
  // error closes the connection, logged with its cause.
  std::function<Status(AuthenticatedConnection&, Deadline)> after_handshake;
};

class HandshakeListener {
 public:
  // "" accepts the Hello (the handshake goes on); any other text refuses it without an answer,
  // and is the reason logged and kept ("claims rank 7 of a world of 4").
  using HelloFilter = std::function<std::string(const Hello&)>;

  // `listen_fd` stays the caller's and must outlive this object.
  HandshakeListener(int listen_fd, HandshakeListenerOptions options, HelloFilter filter,
                    JobRouting routing = {});
  ~HandshakeListener();  // stops accepting, cuts short every handshake in flight, joins
  HandshakeListener(const HandshakeListener&) = delete;
  HandshakeListener& operator=(const HandshakeListener&) = delete;

  // The next authenticated connection; DeadlineExceeded when none came before `deadline`.
  StatusOr<AuthenticatedConnection> Next(Deadline deadline);
  // Readable while an authenticated connection waits for Next (for a poll loop).
  int ready_fd() const { return ready_.get(); }

  // Connections refused so far, and a text for a timeout message that names their sources:
  // "; 3 connections failed authentication: 127.0.0.1:53845 (claimed rank 1: wrong job key) ..."
  uint64_t rejected() const { return rejected_.load(); }
  std::string RejectionSummary() const;
  // Whether a connection claiming to be `rank` failed the key check (a wrong proof, or a hang-up
  // on ours): the missing rank may hold another key.
  bool KeyRefusedFor(int rank) const;
  // A failure of this process's own (out of file descriptors): accepting cannot go on, and the
  // owner should fail now with this rather than blame a peer at its deadline. OK otherwise.
  Status local_failure() const;

 private:
  struct InFlight {
    int fd;
    std::string ip;
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  struct SourceRecord {
    std::string first_address;
    std::string last_reason;
    uint64_t count = 0;
  };
  void AcceptLoop();
  void Admit(Fd fd);
  void Handshake(Fd fd, std::string source, std::string ip);
  // JobRouting: reads the job preamble and answers it; false with `why` when the connection named
  // none (`job` empty) or one not served here.
  bool NameJob(int fd, Deadline deadline, const std::string& source, std::string* job,
               std::string* key, std::string* why);
  void Reject(const std::string& source, const std::string& ip, const std::string& reason,
              bool quiet);
  void Reap(bool all);

  const int listen_fd_;
  const HandshakeListenerOptions options_;
  const HelloFilter filter_;
  const JobRouting routing_;
  Fd ready_;  // eventfd: counts connections queued for Next
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rejected_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AuthenticatedConnection> queue_;
  std::map<int, InFlight> in_flight_;  // by fd: cut short on stop
  std::map<std::string, int> per_source_;
  std::map<std::string, SourceRecord> sources_;  // refused, by ip (first few hundred)
  std::set<int> key_refused_;                    // claimed ranks whose key check failed
  Status local_failure_;
  std::vector<Worker> workers_;  // touched only by the accept thread and ~
  std::thread accept_thread_;    // last: starts once the members above exist
};

}  // namespace korovod
