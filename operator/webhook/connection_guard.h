// ConnectionGuard: keeps the webhook answering under slow clients and floods (issue 31).
//
// cpp-httplib serves each connection on one thread of a fixed pool (8 threads on a small node)
// and bounds each read, not the request: a client trickling a byte every few seconds, or sending
// its headers and never the body, holds a thread for as long as it likes, and a few such
// connections leave the API server's reviews queued until they time out (failurePolicy Fail: pod
// creations refused). The guard replaces the pool and adds what the server lacks:
//   - one thread per connection, at most `max_connections` at once (more wait for a thread);
//   - at most `max_connections_per_source` connections from one IP address; more are closed at
//     once, before the TLS handshake does any work;
//   - a deadline for the whole request: the handshake and the complete request must arrive
//     within `request_deadline` of the connection's start, and each next request on a kept-alive
//     connection within `request_deadline` of the previous response; a watchdog shuts down the
//     socket of a connection past it (the blocked read then fails and the thread is freed).
// The hooks: NewTaskQueue() for httplib's new_task_queue, InstallOn(SSL_CTX) (a handshake-start
// callback that admits the connection and starts its deadline), and RequestRead() from the
// server's post-routing handler.
#pragma once

#include <openssl/ssl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class TaskQueue;
}

namespace korovod::k8s_operator {

struct ConnectionLimits {
  // Threads serving connections. Each costs a stack's virtual memory and little resident memory;
  // 256 is far above what an API server needs (one connection per review in flight).
  size_t max_connections = 256;
  // The API server opens one connection per review in flight (Go's transport sets no per-host
  // limit), all from its own address: 128 leaves room for 100 concurrent reviews from one API
  // server while one attacking pod can hold at most half of the threads.
  size_t max_connections_per_source = 128;
  // The API server gives up on a review after the webhook's timeoutSeconds (10 s by default, at
  // most 30 s) and sends it in one go: a request still incomplete after 10 s is not one.
  std::chrono::milliseconds request_deadline{std::chrono::seconds(10)};
};

struct ConnectionGuardCounts {
  uint64_t admitted = 0;
  uint64_t refused = 0;  // over the per-source cap
  uint64_t cut = 0;      // past their deadline
  size_t open = 0;
};

class ConnectionGuard {
 public:
  using Log = std::function<void(const std::string&)>;
  ConnectionGuard(ConnectionLimits limits, Log log);
  ~ConnectionGuard();  // stops the watchdog; the task queues must be shut down before
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // For httplib::Server::new_task_queue (httplib owns and shuts down what it returns).
  httplib::TaskQueue* NewTaskQueue();
  // Installs the handshake-start callback on the server's TLS context.
  void InstallOn(SSL_CTX& ctx);
  // The current connection's request has been read: its next one gets a fresh deadline. Call
  // on the connection's thread (the server's post-routing handler).
  void RequestRead();

  ConnectionGuardCounts Counts() const;
  const ConnectionLimits& limits() const { return limits_; }

  // Internal, for the task queue and the TLS callback (they run on connection threads).
  void OnHandshakeStart(int fd);
  void OnConnectionEnd();

 private:
  struct Tracked {
    int fd = -1;  // a dup of the connection's socket: ours to shut down and close
    std::string source;
    std::chrono::steady_clock::time_point deadline;
    bool cut = false;
  };
  void Watch();

  const ConnectionLimits limits_;
  const Log log_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                               // guarded by mu_
  uint64_t next_id_ = 1;                            // guarded by mu_
  std::map<uint64_t, Tracked> tracked_;             // guarded by mu_
  std::map<std::string, size_t> per_source_;        // guarded by mu_
  std::map<std::string, size_t> refused_unlogged_;  // guarded by mu_; logged by the watchdog
  ConnectionGuardCounts counts_;                    // guarded by mu_
  std::thread watchdog_;                            // last: starts once the above is set
};

}  // namespace korovod::k8s_operator
