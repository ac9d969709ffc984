#include "runtime/world/membership_listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <vector>

#include "common/log.h"
#include "runtime/transport/socket.h"
#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/rendezvous_frame.h"

namespace korovod {
namespace {

constexpr uint32_t kMaxRequest = 64 << 10;

}  // namespace

StatusOr<std::shared_ptr<MembershipListener>> MembershipListener::Start(
    MembershipListenerOptions options) {
  Fd fd;
  if (options.listen_fd >= 0) {
    fd = Fd(options.listen_fd);  // taken over
  } else {
    auto l = ListenTcp(options.host, options.port, 1024);
    if (!l.ok()) return l.status().WithContext("elastic membership listener");
    fd = std::move(l).value();
  }
  KV_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd.get()));
  return std::shared_ptr<MembershipListener>(
      new MembershipListener(std::move(fd), port, std::move(options)));
}

MembershipListener::MembershipListener(Fd listener, uint16_t port,
                                       MembershipListenerOptions options)
    : listener_(std::move(listener)), port_(port), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  HandshakeListenerOptions h;
  h.owner = "the elastic membership listener on port " + std::to_string(port_);
  h.max_per_source = options.max_per_source;
  h.max_in_flight = options.max_in_flight;
  JobRouting routing;
  routing.key_for_job = [this](const std::string& job) -> std::optional<std::string> {
    std::lock_guard<std::mutex> lock(keys_mu_);
    auto it = keys_.find(job);
    if (it == keys_.end()) return std::nullopt;
    return it->second;
  };
  // The first request is read here, on the handshake's thread: one that stalls holds up only its
  // own connection. The frame type travels as the payload's first byte.
  routing.after_handshake = [](AuthenticatedConnection& c, Deadline d) -> Status {
    FrameType type{};
    KV_ASSIGN_OR_RETURN(std::string text, ReadFrame(c.fd.get(), "RQ", kMaxRequest, d,
                                                    "elastic worker at " + c.source, &type));
    c.payload = static_cast<char>(type) + text;
    return OkStatus();
  };
  // Only rendezvous connections: mesh streams and probes belong to the sidecars' own listeners.
  handshakes_ = std::make_unique<HandshakeListener>(
      listener_.get(), std::move(h),
      [](const Hello& hello) -> std::string {
        return hello.stream == kRendezvousStream ? "" : "not a membership connection";
      },
      std::move(routing));
  thread_ = std::thread([this] { Run(); });
}

MembershipListener::~MembershipListener() {
  stop_.store(true);
  Wake();
  if (thread_.joinable()) thread_.join();
  handshakes_.reset();  // its threads read keys_: they stop first
}

size_t MembershipListener::jobs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return servers_.size();
}

Status MembershipListener::Attach(const std::string& job_id, const std::string& key,
                                  ElasticRendezvousServer* s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!servers_.emplace(job_id, s).second) {
      return FailedPrecondition("the membership listener on port " + std::to_string(port_) +
                                " already serves a job with this job key (id " + job_id + ")");
    }
  }
  std::lock_guard<std::mutex> lock(keys_mu_);
  keys_[job_id] = key;
  return OkStatus();
}

void MembershipListener::Detach(const std::string& job_id, ElasticRendezvousServer* s) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = servers_.find(job_id);
  if (it == servers_.end() || it->second != s) return;  // another server's job (a refused twin)
  servers_.erase(it);
  std::lock_guard<std::mutex> keys(keys_mu_);
  keys_.erase(job_id);
}

void MembershipListener::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void MembershipListener::Run() {
  std::vector<pollfd> fds;
  std::map<int, short> revents;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({handshakes_->ready_fd(), POLLIN, 0});
    fds.push_back({wake_.get(), POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, s] : servers_) s->AppendFds(fds);
    }
    (void)::poll(fds.data(), fds.size(), static_cast<int>(kServiceSlice.count()));
    uint64_t drained = 0;
    (void)!::read(wake_.get(), &drained, sizeof drained);
    revents.clear();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents != 0) revents[fds[i].fd] = fds[i].revents;
    }
    std::lock_guard<std::mutex> lock(mu_);
    while (true) {
      auto c = handshakes_->Next(Deadline::After(std::chrono::milliseconds(0)));
      if (!c.ok()) break;
      auto it = servers_.find(c->job);
      // Its server stopped since the handshake: the connection closes, the worker retries.
      if (it != servers_.end()) it->second->Accept(std::move(c).value());
    }
    for (auto& [id, s] : servers_) s->Service(revents);
  }
}

}  // namespace korovod
