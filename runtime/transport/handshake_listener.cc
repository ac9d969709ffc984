#include "runtime/transport/handshake_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "runtime/transport/address_text.h"
#include "runtime/transport/socket.h"

namespace korovod {
namespace {

constexpr size_t kMaxSourcesRemembered = 256;
constexpr uint64_t kLoggedPerSource = 3;  // then every 1000th, so a flood cannot fill the log
constexpr size_t kSourcesInSummary = 8;

// "10.0.0.2:41234" and "10.0.0.2" of an accepted socket's remote end.
std::pair<std::string, std::string> RemoteEnd(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {"?", "?"};
  return AddressText(ss);
}

std::string Claim(const Hello& h) {
  return std::string(h.stream == kProbeStream ? "a preflight probe that " : "") + "claimed rank " +
         std::to_string(h.from) + " of a world of " + std::to_string(h.world) + " (epoch " +
         std::to_string(h.epoch) + ")";
}

// The job a dialer names before its Hello (JobRouting::key_for_job).
StatusOr<std::string> ReadJobPreamble(int fd, Deadline deadline) {
  char head[5];
  KV_RETURN_IF_ERROR(ReadFull(fd, head, sizeof head, deadline, "a connecting peer"));
  if (std::memcmp(head, kJobPreambleMagic, 4) != 0) {
    return InvalidArgument("a connection that does not name its job (no korovod job preamble)");
  }
  std::string job(static_cast<unsigned char>(head[4]), '\0');
  KV_RETURN_IF_ERROR(ReadFull(fd, job.data(), job.size(), deadline, "a connecting peer"));
  return job;
}

}  // namespace

Status DialJobPreamble(int fd, const std::string& job, Deadline deadline, const std::string& who) {
  if (job.size() > 255) return InvalidArgument("a job id over 255 bytes: " + job.substr(0, 64));
  std::string msg(kJobPreambleMagic, 4);
  msg += static_cast<char>(job.size());
  msg += job;
  KV_RETURN_IF_ERROR(WriteFull(fd, msg.data(), msg.size(), deadline, who));
  char answer = kJobUnknown;
  KV_RETURN_IF_ERROR(ReadFull(fd, &answer, 1, deadline, who));
  if (answer != kJobKnown) return Unavailable(who + " serves no job " + job);
  return OkStatus();
}

HandshakeListener::HandshakeListener(int listen_fd, HandshakeListenerOptions options,
                                     HelloFilter filter, JobRouting routing)
    : listen_fd_(listen_fd),
      options_(std::move(options)),
      filter_(std::move(filter)),
      routing_(std::move(routing)),
      ready_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE)),
      accept_thread_([this] { AcceptLoop(); }) {}

HandshakeListener::~HandshakeListener() {
  stop_.store(true);
  if (accept_thread_.joinable()) accept_thread_.join();
  {
    // A handshake in flight is cut short: its reads fail at once instead of at its deadline.
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [fd, f] : in_flight_) ::shutdown(fd, SHUT_RDWR);
  }
  Reap(/*all=*/true);
}

void HandshakeListener::AcceptLoop() {
  bool told_fd_limit = false;
  while (!stop_.load()) {
    Reap(/*all=*/false);
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    Fd fd(::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd.valid()) {
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the connection waits in the backlog; say so once, and do not spin.
        if (!told_fd_limit) {
          rlimit limit{};
          ::getrlimit(RLIMIT_NOFILE, &limit);
          const std::string text = options_.owner +
                                   ": cannot accept a connection: out of file descriptors (this " +
                                   "process's limit, RLIMIT_NOFILE, is " +
                                   std::to_string(limit.rlim_cur) + "; raise it)";
          KV_LOG(kError, kTransport, "%s", text.c_str());
          std::lock_guard<std::mutex> lock(mu_);
          local_failure_ = Unavailable(text);
          told_fd_limit = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    (void)SetNoDelay(fd.get());
    Admit(std::move(fd));
  }
}

void HandshakeListener::Admit(Fd fd) {
  auto [source, ip] = RemoteEnd(fd.get());
  std::string refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto mine = per_source_.find(ip);
    if (mine != per_source_.end() && mine->second >= options_.max_per_source) {
      refused = "over " + std::to_string(options_.max_per_source) +
                " connections from one source being authenticated at once";
    } else if (static_cast<int>(in_flight_.size()) >= options_.max_in_flight) {
      refused = "over " + std::to_string(options_.max_in_flight) +
                " connections being authenticated at once";
    } else {
      ++per_source_[ip];
      in_flight_[fd.get()] = InFlight{fd.get(), ip};
    }
  }
  if (!refused.empty()) {
    fd.Reset();
    Reject(source, ip, "closed unread: " + refused, /*quiet=*/false);
    return;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, done, f = std::move(fd), source, ip]() mutable {
    Handshake(std::move(f), source, ip);
    done->store(true);
  });
  workers_.push_back(Worker{std::move(t), std::move(done)});
}

void HandshakeListener::Handshake(Fd fd, std::string source, std::string ip) {
  const int raw = fd.get();
  auto finish = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(raw);
    if (--per_source_[ip] <= 0) per_source_.erase(ip);
  };
  const Deadline hs = Deadline::After(options_.handshake_timeout);
  // A connection closed without a byte is a port check (a health probe, a scanner): counted,
  // not logged as an attack.
  pollfd p{raw, POLLIN, 0};
  char first = 0;
  if (::poll(&p, 1, hs.RemainingMs()) > 0 && ::recv(raw, &first, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    finish();
    Reject(source, ip, "closed without sending anything", /*quiet=*/true);
    return;
  }
  std::string key = options_.job_key;
  std::string job;
  if (routing_.key_for_job) {
    std::string why;
    if (!NameJob(raw, hs, source, &job, &key, &why)) {
      finish();
      // A job not served here is a worker looking for its leader (a failover): no warning.
      Reject(source, ip, why, /*quiet=*/!job.empty());
      return;
    }
  }
  auto hello = ReadHello(raw, hs);
  if (!hello.ok()) {
    const StatusCode c = hello.status().code();
    std::string why = c == StatusCode::kInvalidArgument ? hello.status().message()
                      : c == StatusCode::kDeadlineExceeded
                          ? "no complete korovod Hello within " +
                                std::to_string(options_.handshake_timeout.count()) + " ms"
                          : "closed halfway through its Hello";
    finish();
    Reject(source, ip, why, /*quiet=*/false);
    return;
  }
  if (std::string refused = filter_ ? filter_(*hello) : ""; !refused.empty()) {
    finish();
    Reject(source, ip, Claim(*hello) + ": " + refused, false);
    return;
  }
  const std::string who = source + " (" + Claim(*hello) + ")";
  ConnectionSecret secret;
  const AcceptOutcome outcome = AnswerHello(raw, key, *hello, options_.epoch, hs, who, &secret);
  if (outcome == AcceptOutcome::kAuthenticated) {
    AuthenticatedConnection c{std::move(fd), *hello, source, secret, std::move(job), ""};
    if (routing_.after_handshake) {
      if (Status s = routing_.after_handshake(c, hs); !s.ok()) {
        finish();
        KV_LOG(kDebug, kTransport, "%s: authenticated connection from %s closed: %s",
               options_.owner.c_str(), source.c_str(), s.ToString().c_str());
        return;
      }
    }
    finish();
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(c));
    const uint64_t one = 1;
    (void)!::write(ready_.get(), &one, sizeof one);
    cv_.notify_all();
    return;
  }
  finish();
  const std::string claim = Claim(*hello);
  std::string why;
  switch (outcome) {
    case AcceptOutcome::kWrongKey:
      why = "presented a wrong job key";
      break;
    case AcceptOutcome::kHungUp:
      why =
          "hung up on this rank's proof of the job key (it holds another key, or its own "
          "deadline for the handshake had passed: a loaded or stopped host)";
      break;
    case AcceptOutcome::kOtherEpoch:
      why = "belongs to another membership epoch (this one is " + std::to_string(options_.epoch) +
            ")";
      break;
    default:
      why = "did not finish the handshake in time";
      break;
  }
  if (outcome == AcceptOutcome::kWrongKey || outcome == AcceptOutcome::kHungUp) {
    std::lock_guard<std::mutex> lock(mu_);
    if (key_refused_.size() < kMaxSourcesRemembered) key_refused_.insert(hello->from);
  }
  Reject(source, ip, claim + ": " + why, /*quiet=*/false);
}

bool HandshakeListener::NameJob(int fd, Deadline deadline, const std::string& source,
                                std::string* job, std::string* key, std::string* why) {
  auto named = ReadJobPreamble(fd, deadline);
  if (!named.ok()) {
    *why = named.status().message();
    return false;
  }
  *job = std::move(named).value();
  const std::optional<std::string> found = routing_.key_for_job(*job);
  const char answer = found ? kJobKnown : kJobUnknown;
  (void)WriteFull(fd, &answer, 1, deadline, source);
  if (!found) {
    *why = "named job " + *job + ", which is not served here";
    return false;
  }
  *key = *found;
  return true;
}

void HandshakeListener::Reject(const std::string& source, const std::string& ip,
                               const std::string& reason, bool quiet) {
  rejected_.fetch_add(1);
  uint64_t count = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sources_.find(ip);
    if (it == sources_.end() && sources_.size() < kMaxSourcesRemembered) {
      it = sources_.emplace(ip, SourceRecord{source, "", 0}).first;
    }
    if (it != sources_.end() && !quiet) {
      it->second.last_reason = reason;
      count = ++it->second.count;
    }
  }
  if (quiet) {
    KV_LOG(kDebug, kTransport, "%s: a connection from %s %s", options_.owner.c_str(),
           source.c_str(), reason.c_str());
    return;
  }
  if (count <= kLoggedPerSource || count % 1000 == 0) {
    KV_LOG(kWarning, kTransport,
           "%s: refused a connection from %s: %s (%llu refused from %s so far; the job goes on)",
           options_.owner.c_str(), source.c_str(), reason.c_str(),
           static_cast<unsigned long long>(count), ip.c_str());
  }
}

void HandshakeListener::Reap(bool all) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (all || it->done->load()) {
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
}

StatusOr<AuthenticatedConnection> HandshakeListener::Next(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (queue_.empty()) {
    if (deadline.Expired()) return DeadlineExceeded("no authenticated connection");
    cv_.wait_for(lock, std::chrono::milliseconds(std::min(deadline.RemainingMs(), 100)));
  }
  AuthenticatedConnection c = std::move(queue_.front());
  queue_.pop_front();
  uint64_t n = 0;
  (void)!::read(ready_.get(), &n, sizeof n);
  return c;
}

Status HandshakeListener::local_failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return local_failure_;
}

bool HandshakeListener::KeyRefusedFor(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return key_refused_.count(rank) > 0;
}

std::string HandshakeListener::RejectionSummary() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t total = 0;
  std::string list;
  size_t listed = 0;
  for (const auto& [ip, r] : sources_) {
    if (r.count == 0) continue;
    total += r.count;
    if (listed++ < kSourcesInSummary) {
      list += (listed > 1 ? "; " : "") + r.first_address + " (" + r.last_reason +
              (r.count > 1 ? ", " + std::to_string(r.count) + " times" : "") + ")";
    }
  }
  if (total == 0) return "";
  return "; " + std::to_string(total) + " connection" + (total > 1 ? "s" : "") +
         " failed authentication: " + list + (listed > kSourcesInSummary ? "; ..." : "");
}

}  // namespace korovod
