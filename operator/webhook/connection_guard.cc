#include "operator/webhook/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <list>
#include <vector>

namespace korovod::k8s_operator {
namespace {

using Clock = std::chrono::steady_clock;

// The connection the current thread serves (0: none yet, or refused). A connection is served
// start to end on one thread, so its handshake, its handler and its end meet here.
thread_local uint64_t current_connection = 0;

int GuardIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

std::string PeerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown";
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, text, sizeof(text));
  } else if (addr.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, text, sizeof(text));
  } else {
    return "local";
  }
  return text;
}

void OnTlsInfo(const SSL* ssl, int where, int /*ret*/) {
  if ((where & SSL_CB_HANDSHAKE_START) == 0) return;
  auto* guard =
      static_cast<ConnectionGuard*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), GuardIndex()));
  if (guard != nullptr) guard->OnHandshakeStart(SSL_get_fd(ssl));
}

// One thread per connection, at most `max` at once; connections beyond wait in FIFO order. A
// thread that finds nothing left to serve ends (no idle threads are kept).
class ThreadPerConnection : public httplib::TaskQueue {
 public:
  ThreadPerConnection(ConnectionGuard& guard, size_t max) : guard_(guard), max_(max) {}
  ~ThreadPerConnection() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    JoinFinished();
    queue_.push_back(std::move(fn));
    if (running_ < max_) {
      ++running_;
      threads_.emplace_back();
      auto self = std::prev(threads_.end());
      *self = std::thread([this, self] { Serve(self); });
    }
  }

  // Serves what is queued, then joins every thread (httplib calls it once its accept loop ends).
  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return running_ == 0; });
    JoinFinished();
  }

 private:
  void Serve(std::list<std::thread>::iterator self) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!queue_.empty()) {
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();  // serves the connection and closes its socket
      guard_.OnConnectionEnd();
      lock.lock();
    }
    finished_.push_back(self);
    if (--running_ == 0) idle_.notify_all();
  }

  // Guarded by mu_. A finished thread has left Serve's loop; joining it waits only for its exit.
  void JoinFinished() {
    for (auto it : finished_) {
      if (it->get_id() == std::this_thread::get_id()) continue;
      it->join();
      threads_.erase(it);
    }
    finished_.clear();
  }

  ConnectionGuard& guard_;
  const size_t max_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  std::list<std::thread> threads_;
  std::vector<std::list<std::thread>::iterator> finished_;
  size_t running_ = 0;
};

}  // namespace

ConnectionGuard::ConnectionGuard(ConnectionLimits limits, Log log)
    : limits_(limits), log_(std::move(log)), watchdog_([this] { Watch(); }) {}

ConnectionGuard::~ConnectionGuard() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  for (auto& [id, t] : tracked_) ::close(t.fd);
}

httplib::TaskQueue* ConnectionGuard::NewTaskQueue() {
  return new ThreadPerConnection(*this, limits_.max_connections);
}

void ConnectionGuard::InstallOn(SSL_CTX& ctx) {
  SSL_CTX_set_ex_data(&ctx, GuardIndex(), this);
  SSL_CTX_set_info_callback(&ctx, &OnTlsInfo);
}

void ConnectionGuard::OnHandshakeStart(int fd) {
  if (current_connection != 0 || fd < 0) return;  // a renegotiation: already admitted
  const std::string source = PeerAddress(fd);
  std::lock_guard<std::mutex> lock(mu_);
  size_t& from_source = per_source_[source];
  if (from_source >= limits_.max_connections_per_source) {
    // Closed before the handshake reads anything: the client sees a reset, the thread is free.
    ::shutdown(fd, SHUT_RDWR);
    ++counts_.refused;
    ++refused_unlogged_[source];
    return;
  }
  // A dup keeps the socket alive until we close it, so the watchdog never shuts down a number
  // that httplib has closed and the kernel has given to a new connection.
  const int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    ::shutdown(fd, SHUT_RDWR);  // out of descriptors: refusing is the safe answer
    ++counts_.refused;
    return;
  }
  ++from_source;
  ++counts_.admitted;
  current_connection = next_id_++;
  tracked_[current_connection] = Tracked{dup, source, Clock::now() + limits_.request_deadline};
}

void ConnectionGuard::RequestRead() {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tracked_.find(current_connection);
  if (it != tracked_.end()) it->second.deadline = Clock::now() + limits_.request_deadline;
}

void ConnectionGuard::OnConnectionEnd() {
  const uint64_t id = current_connection;
  current_connection = 0;
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tracked_.find(id);
  if (it == tracked_.end()) return;
  ::close(it->second.fd);
  auto source = per_source_.find(it->second.source);
  if (source != per_source_.end() && --source->second == 0) per_source_.erase(source);
  tracked_.erase(it);
}

ConnectionGuardCounts ConnectionGuard::Counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  ConnectionGuardCounts c = counts_;
  c.open = tracked_.size();
  return c;
}

void ConnectionGuard::Watch() {
  // A tenth of the deadline (at most 250 ms): a connection is cut at most that late.
  const auto tick = std::min<std::chrono::milliseconds>(limits_.request_deadline / 10,
                                                        std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, tick, [this] { return stop_; })) {
    const auto now = Clock::now();
    if (!refused_unlogged_.empty() && log_) {
      std::string sources;
      for (const auto& [source, n] : refused_unlogged_) {
        sources += (sources.empty() ? "" : ", ") + source + " (" + std::to_string(n) + ")";
      }
      log_("refused connections over the limit of " +
           std::to_string(limits_.max_connections_per_source) + " per address: " + sources);
    }
    refused_unlogged_.clear();
    std::vector<Tracked*> expired;
    std::map<std::string, size_t> by_source;
    for (auto& [id, t] : tracked_) {
      if (t.cut || now < t.deadline) continue;
      expired.push_back(&t);
      ++by_source[t.source];
    }
    if (expired.empty()) continue;
    counts_.cut += expired.size();
    // Logged before the sockets close, so whoever sees a connection cut finds the line.
    if (log_) {
      std::string sources;
      for (const auto& [source, n] : by_source) {
        sources += (sources.empty() ? "" : ", ") + source + " (" + std::to_string(n) + ")";
      }
      // One line per tick, not per connection: a flood must not flood the log too.
      log_("closing " + std::to_string(expired.size()) + " connection(s) that did not send a " +
           "whole request within " + std::to_string(limits_.request_deadline.count()) +
           " ms: " + sources);
    }
    for (Tracked* t : expired) {
      // The blocked read (or handshake) on the connection's thread returns at once.
      ::shutdown(t->fd, SHUT_RDWR);
      t->cut = true;
    }
  }
}

}  // namespace korovod::k8s_operator
