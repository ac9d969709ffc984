#include "runtime/world/elastic_rendezvous.h"

#include <poll.h>

#include <algorithm>
#include <sstream>

#include "common/log.h"
#include "runtime/transport/handshake.h"
#include "runtime/transport/socket.h"
#include "runtime/world/rendezvous_frame.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

constexpr uint32_t kMaxRegistration = 64 << 10;
constexpr uint32_t kMaxAnswer = 64 << 20;
constexpr auto kPerConnection = std::chrono::milliseconds(5000);
constexpr auto kPollSlice = std::chrono::milliseconds(100);

std::string Seconds(std::chrono::milliseconds d) {
  std::ostringstream out;
  out << d.count() / 1000.0 << " s";
  return out.str();
}

// "key=value key=value" (the first line of a frame) into a map; words without '=' are ignored.
std::map<std::string, std::string> Fields(std::string_view line) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(line)};
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::stoull(s);
  return true;
}

// A worker id is one word of printable ASCII (it travels inside "key=value" lines).
bool ValidWorkerId(const std::string& id) {
  return !id.empty() && id.size() <= 253 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > ' ' && c < 127 && c != '='; });
}

}  // namespace

StatusOr<ElasticRegistration> ParseElasticRegistration(std::string_view text) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  const auto worker_it = fields.find("worker");
  const auto epoch_it = fields.find("epoch");
  ElasticRegistration reg;
  if (worker_it == fields.end() || !ValidWorkerId(worker_it->second) || epoch_it == fields.end() ||
      !ParseU64(epoch_it->second, &reg.last_epoch) || reg.last_epoch > UINT32_MAX ||
      eol == std::string_view::npos) {
    return InvalidArgument(
        "malformed elastic registration (want \"worker=ID epoch=N\" and a rank line)");
  }
  reg.worker = worker_it->second;
  auto entry = ParseRankLine(text.substr(eol + 1), "worker " + reg.worker + "'s registration: ");
  if (!entry.ok()) return entry.status();
  reg.entry = std::move(entry->second);
  return reg;
}

uint64_t ParseMembershipQuery(std::string_view text) {
  uint64_t since = 0;
  const auto fields = Fields(text.substr(0, text.find('\n')));
  if (auto it = fields.find("since"); it != fields.end()) (void)ParseU64(it->second, &since);
  return since;
}

StatusOr<ElasticAssignment> ParseElasticAssignment(std::string_view text, const std::string& me,
                                                   const std::string& server) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  uint64_t epoch = 0, rank = 0, size = 0, version = 0;
  auto get = [&](const char* k, uint64_t* v) {
    auto it = fields.find(k);
    return it != fields.end() && ParseU64(it->second, v);
  };
  // The epoch travels as 32 bits and the size as an int everywhere after this: a larger value
  // would wrap (a negative world size), so it is refused here.
  if (eol == std::string_view::npos || !get("epoch", &epoch) || !get("rank", &rank) ||
      !get("size", &size) || !get("version", &version) || rank >= size ||
      size > kMaxElasticWorldSize || epoch > UINT32_MAX) {
    return InvalidArgument(me + ": " + server + " sent a malformed epoch");
  }
  ElasticAssignment a;
  a.epoch = static_cast<uint32_t>(epoch);
  a.rank = static_cast<int>(rank);
  a.size = static_cast<int>(size);
  a.version = version;
  auto table = ParseWorldTable(text.substr(eol + 1),
                               "the world table of epoch " + std::to_string(epoch), a.size);
  if (!table.ok()) return table.status().WithContext(me);
  a.table = std::move(table).value();
  return a;
}

StatusOr<MembershipVersion> ParseMembershipVersion(std::string_view text, const std::string& who) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  MembershipVersion v;
  uint64_t epoch = 0, update = 0;
  auto version = fields.find("version");
  auto e = fields.find("epoch");
  auto u = fields.find("update");
  if (version == fields.end() || e == fields.end() || u == fields.end() ||
      !ParseU64(version->second, &v.version) || !ParseU64(e->second, &epoch) ||
      !ParseU64(u->second, &update) || epoch > UINT32_MAX ||
      update > (kHostsRemoved | kHostsAdded)) {
    return InvalidArgument(who + " sent a malformed membership version");
  }
  v.epoch = static_cast<uint32_t>(epoch);
  v.update = static_cast<int>(update);
  if (eol != std::string_view::npos) {
    std::istringstream gone{std::string(text.substr(eol + 1))};
    for (std::string id; std::getline(gone, id);) {
      if (!id.empty()) v.gone.push_back(id);
    }
  }
  return v;
}

struct ElasticRendezvousServer::Waiting {
  Fd fd;
  uint32_t last_epoch = 0;
  RankEntry entry;
  uint64_t order = 0;
};

StatusOr<std::unique_ptr<ElasticRendezvousServer>> ElasticRendezvousServer::Start(
    ElasticServerOptions options) {
  if (options.min_workers < 1) {
    return InvalidArgument("elastic: the minimum number of workers must be at least 1, got " +
                           std::to_string(options.min_workers));
  }
  if (options.max_workers > 0 && options.max_workers < options.min_workers) {
    return InvalidArgument("elastic: the maximum number of workers (" +
                           std::to_string(options.max_workers) + ") is below the minimum (" +
                           std::to_string(options.min_workers) + ")");
  }
  if (options.resume_epoch == 0 && !options.resume_members.empty()) {
    return InvalidArgument("elastic: members to resume need the epoch they formed");
  }
  for (const std::string& m : options.resume_members) {
    if (!ValidWorkerId(m)) {
      return InvalidArgument("elastic: resumed member \"" + m + "\" is not a valid worker id");
    }
  }
  Fd owned;
  int fd = options.listen_fd;
  if (fd < 0) {
    auto l = ListenTcp("0.0.0.0", options.port, 128);
    if (!l.ok()) return l.status().WithContext("elastic rendezvous server");
    owned = std::move(l).value();
    fd = owned.get();
  } else {
    owned = Fd(fd);  // taken over
  }
  KV_ASSIGN_OR_RETURN(uint16_t port, LocalPort(fd));
  std::unique_ptr<ElasticRendezvousServer> server(
      new ElasticRendezvousServer(std::move(options), std::move(owned), port));
  server->thread_ = std::thread([s = server.get()] { s->Run(); });
  return server;
}

ElasticRendezvousServer::ElasticRendezvousServer(ElasticServerOptions options, Fd listener,
                                                 uint16_t port)
    : options_(std::move(options)), listener_(std::move(listener)), port_(port) {
  handshakes_ = std::make_unique<HandshakeListener>(
      listener_.get(),
      HandshakeListenerOptions{options_.job_key, 0,
                               "the elastic membership server on port " + std::to_string(port),
                               kPerConnection},
      [](const Hello& h) -> std::string {
        return h.stream == kRendezvousStream ? "" : "not an elastic registration or query";
      });
  epoch_ = options_.resume_epoch;
  members_ = options_.resume_members;
  live_.insert(members_.begin(), members_.end());
  version_ = formed_version_ = options_.resume_version;
  if (epoch_ > 0) formations_ = 1 + std::max(0, options_.resume_resets);
}

ElasticRendezvousServer::~ElasticRendezvousServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void ElasticRendezvousServer::SetLiveWorkers(const std::vector<std::string>& workers) {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> next(workers.begin(), workers.end());
  int bits = kNoHostUpdate;
  for (const std::string& w : next) {
    if (live_.count(w) == 0) bits |= kHostsAdded;
  }
  for (const std::string& w : live_) {
    if (next.count(w) == 0) bits |= kHostsRemoved;
  }
  live_ = std::move(next);
  if (bits != kNoHostUpdate) updates_.emplace_back(++version_, bits);
}

uint32_t ElasticRendezvousServer::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

uint64_t ElasticRendezvousServer::formed_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return formed_version_;
}

std::vector<std::string> ElasticRendezvousServer::members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

int ElasticRendezvousServer::resets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(0, formations_ - 1);
}

Status ElasticRendezvousServer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

std::vector<std::string> ElasticRendezvousServer::TakeLost() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(lost_, {});
}

void ElasticRendezvousServer::Run() {
  while (!stop_.load()) {
    std::vector<pollfd> fds{{handshakes_->ready_fd(), POLLIN, 0}};
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [name, w] : waiting_) {
        fds.push_back({w->fd.get(), POLLIN, 0});
        names.push_back(name);
      }
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(kPollSlice.count()));
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      auto accepted = handshakes_->Next(Deadline::After(std::chrono::milliseconds(0)));
      if (accepted.ok()) Accept(std::move(accepted).value());
    }
    std::lock_guard<std::mutex> lock(mu_);
    // A waiting worker says nothing until answered: input or a hang-up means it went away.
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = waiting_.find(names[i - 1]);
      if (it != waiting_.end() && it->second->fd.get() == fds[i].fd) waiting_.erase(it);
    }
    if (failure_.ok()) TryForm();
  }
}

// One connection: the handshake, then a query (answered at once) or a registration (kept open
// until its epoch forms, or refused with the reason).
void ElasticRendezvousServer::Accept(AuthenticatedConnection c) {
  Fd fd = std::move(c.fd);
  const Deadline hs = Deadline::After(kPerConnection);
  const std::string who = "elastic worker at " + c.source;
  FrameType type{};
  auto text = ReadFrame(fd.get(), "RQ", kMaxRegistration, hs, who, &type);
  if (!text.ok()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (type == FrameType::kQuery) {
    const uint64_t since = ParseMembershipQuery(*text);
    int bits = kNoHostUpdate;
    for (const auto& [v, b] : updates_) {
      if (v > since) bits |= b;
    }
    std::string answer = "version=" + std::to_string(version_) +
                         " epoch=" + std::to_string(epoch_) + " update=" + std::to_string(bits);
    for (const std::string& m : members_) {
      if (live_.count(m) == 0) answer += "\n" + m;  // gone: one per line
    }
    (void)WriteFrame(fd.get(), FrameType::kVersion, answer, hs, who);
    return;
  }
  auto refuse = [&](const std::string& why) {
    (void)WriteFrame(fd.get(), FrameType::kRefusal, why, hs, who);
  };
  auto reg = ParseElasticRegistration(*text);
  if (!reg.ok()) return refuse(reg.status().message());
  const std::string& worker = reg->worker;
  const uint64_t last_epoch = reg->last_epoch;
  if (!failure_.ok()) return refuse(failure_.message());
  if (live_.count(worker) == 0) {
    return refuse("worker " + worker +
                  " is not a live worker of this job (the launcher removed it, or never started "
                  "it): it may not join epoch " +
                  std::to_string(epoch_ + 1));
  }
  const bool member = std::find(members_.begin(), members_.end(), worker) != members_.end();
  // A member registering from epoch 0 is a fresh process of that worker: its sidecar restarted
  // in place (a native sidecar restarted by the kubelet) and lost its epoch. It joins the next
  // epoch like a newcomer, keeping its place; one from an older nonzero epoch is a stale process.
  if (member && last_epoch == 0 && epoch_ > 0) {
    KV_LOG(kInfo, kWorld,
           "elastic: worker %s registers afresh while a member of epoch %u (its sidecar "
           "restarted): it joins epoch %u",
           worker.c_str(), epoch_, epoch_ + 1);
  } else if (last_epoch > epoch_ || (member && last_epoch != epoch_)) {
    return refuse("worker " + worker + " registers from epoch " + std::to_string(last_epoch) +
                  " but the job is at epoch " + std::to_string(epoch_) +
                  (member ? ", which formed with it: a stale member is refused" : ""));
  }
  auto w = std::make_unique<Waiting>();
  w->fd = std::move(fd);
  w->last_epoch = static_cast<uint32_t>(last_epoch);
  w->entry = std::move(reg->entry);
  w->order = ++registrations_;
  waiting_[worker] = std::move(w);  // a worker that registers again replaces its registration
  if (!first_registered_) first_registered_ = Clock::now();
}

void ElasticRendezvousServer::FailAll(const Status& s) {
  failure_ = s;
  for (auto& [name, w] : waiting_) {
    (void)WriteFrame(w->fd.get(), FrameType::kRefusal, s.message(), Deadline::After(kPerConnection),
                     "elastic worker " + name);
  }
  waiting_.clear();
}

void ElasticRendezvousServer::TryForm() {
  const auto now = Clock::now();
  const int alive = static_cast<int>(live_.size());
  if (alive < options_.min_workers) {
    if (!below_min_since_) below_min_since_ = now;
    if (!waiting_.empty() && now - *below_min_since_ >= options_.timeout) {
      FailAll(FailedPrecondition("elastic: " + std::to_string(alive) + " worker" +
                                 (alive == 1 ? "" : "s") + " alive, at least " +
                                 std::to_string(options_.min_workers) +
                                 " needed (the minimum number of workers); waited " +
                                 Seconds(options_.timeout) + " for more"));
    }
    return;
  }
  below_min_since_.reset();
  std::vector<std::string> missing;
  for (const std::string& w : live_) {
    if (waiting_.count(w) == 0) missing.push_back(w);
  }
  if (waiting_.empty() || !first_registered_) return;
  if (!missing.empty()) {
    if (now - *first_registered_ < options_.timeout) return;
    // Alive but silent for the whole timeout: left out, and the driver stops it.
    for (const std::string& w : missing) {
      live_.erase(w);
      lost_.push_back(w);
    }
    updates_.emplace_back(++version_, kHostsRemoved);
    if (static_cast<int>(live_.size()) < options_.min_workers) return;
  }
  if (options_.reset_limit >= 0 && formations_ >= 1 + options_.reset_limit) {
    FailAll(FailedPrecondition("elastic: the reset limit (" + std::to_string(options_.reset_limit) +
                               ") is reached: the job stops instead of forming epoch " +
                               std::to_string(epoch_ + 1)));
    return;
  }
  // Members of the last epoch keep their order; newcomers follow in registration order.
  std::vector<std::string> order;
  for (const std::string& m : members_) {
    if (waiting_.count(m) != 0 && live_.count(m) != 0) order.push_back(m);
  }
  std::vector<std::pair<uint64_t, std::string>> newcomers;
  for (const auto& [name, w] : waiting_) {
    if (live_.count(name) != 0 && std::find(order.begin(), order.end(), name) == order.end()) {
      newcomers.emplace_back(w->order, name);
    }
  }
  std::sort(newcomers.begin(), newcomers.end());
  for (const auto& [o, name] : newcomers) order.push_back(name);
  Form(order);
}

void ElasticRendezvousServer::Form(const std::vector<std::string>& order) {
  std::vector<std::string> chosen = order;
  if (options_.max_workers > 0 && static_cast<int>(chosen.size()) > options_.max_workers) {
    chosen.resize(static_cast<size_t>(options_.max_workers));
  }
  ++epoch_;
  ++formations_;
  members_ = chosen;
  formed_version_ = version_;
  std::vector<RankEntry> table;
  for (const std::string& m : chosen) table.push_back(waiting_[m]->entry);
  ApplyLoopbackRule(table);
  const std::string text = FormatWorldTable(table);
  const Deadline d = Deadline::After(kPerConnection);
  for (size_t r = 0; r < chosen.size(); ++r) {
    Waiting& w = *waiting_[chosen[r]];
    (void)WriteFrame(w.fd.get(), FrameType::kTable,
                     "epoch=" + std::to_string(epoch_) + " rank=" + std::to_string(r) +
                         " size=" + std::to_string(chosen.size()) +
                         " version=" + std::to_string(version_) + "\n" + text,
                     d, "elastic worker " + chosen[r]);
  }
  for (auto& [name, w] : waiting_) {
    if (std::find(chosen.begin(), chosen.end(), name) == chosen.end() && live_.count(name) != 0) {
      (void)WriteFrame(w->fd.get(), FrameType::kRefusal,
                       "elastic: epoch " + std::to_string(epoch_) + " is full (" +
                           std::to_string(options_.max_workers) +
                           " workers, the maximum): worker " + name + " waits for a later one",
                       d, "elastic worker " + name);
    }
  }
  waiting_.clear();
  first_registered_.reset();
}

StatusOr<ElasticAssignment> JoinElasticEpoch(const ElasticJoinOptions& o) {
  if (!ValidWorkerId(o.worker)) {
    return InvalidArgument("elastic: worker id \"" + o.worker +
                           "\" must be one word of printable characters without '='");
  }
  const Deadline deadline = Deadline::After(o.timeout);
  const std::string server = "the elastic rendezvous server at " + o.server.ToString();
  const std::string me = "worker " + o.worker;
  const std::string registration = "worker=" + o.worker + " epoch=" + std::to_string(o.last_epoch) +
                                   "\n" + FormatRankLine(0, o.self);
  std::string last_error = "no attempt finished";
  auto backoff = std::chrono::milliseconds(50);
  while (!deadline.Expired()) {
    auto conn = ConnectTcpAny(o.server, deadline);
    if (!conn.ok()) {
      last_error = conn.status().message();
      break;
    }
    Fd fd = std::move(conn).value();
    Status s = DialHandshake(fd.get(), o.job_key, -1, 0, kRendezvousStream, 0, 0,
                             deadline.Sooner(kPerConnection), server);
    if (s.code() == StatusCode::kPermissionDenied) return s.WithContext(me);
    if (s.ok()) s = WriteFrame(fd.get(), FrameType::kRegistration, registration, deadline, server);
    if (s.ok()) {
      FrameType type{};
      auto text = ReadFrame(fd.get(), "TE", kMaxAnswer, deadline, server, &type);
      if (text.ok() && type == FrameType::kRefusal) {
        return FailedPrecondition(me + ": " + *text);
      }
      if (text.ok()) return ParseElasticAssignment(*text, me, server);
      s = text.status();
    }
    last_error = s.message();
    std::this_thread::sleep_for(
        std::min(backoff, std::chrono::milliseconds(deadline.RemainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return DeadlineExceeded(me + ": no epoch from " + server + " within " + Seconds(o.timeout) +
                          ": " + last_error);
}

StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            uint64_t since, Deadline deadline) {
  const std::string who = "the elastic rendezvous server at " + server.ToString();
  KV_ASSIGN_OR_RETURN(Fd fd, ConnectTcpAny(server, deadline));
  KV_RETURN_IF_ERROR(
      DialHandshake(fd.get(), job_key, -1, 0, kRendezvousStream, 0, 0, deadline, who));
  KV_RETURN_IF_ERROR(
      WriteFrame(fd.get(), FrameType::kQuery, "since=" + std::to_string(since), deadline, who));
  KV_ASSIGN_OR_RETURN(std::string text, ReadFrame(fd.get(), "V", kMaxAnswer, deadline, who));
  return ParseMembershipVersion(text, who);
}

}  // namespace korovod
