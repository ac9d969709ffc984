#include "sidecar/daemon/sidecar_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/env_names.h"
#include "common/env_settings.h"
#include "runtime/world/host_identity.h"

namespace korovod::sidecar {
namespace {

std::string Name(const char* variable) { return variable; }

// The port of a host:port entry; `what` names the variable and the entry in the error.
StatusOr<int> ParsePort(const std::string& what, const std::string& text) {
  int v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < 1 || v > 65535) {
    return InvalidArgument(what + "=" + text + ": expected a port in [1, 65535]");
  }
  return v;
}

StatusOr<std::vector<PeerAddress>> ParsePeers(const std::string& text, const std::string& var) {
  std::vector<PeerAddress> peers;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgument(var + " entry \"" + item + "\" is not host:port");
    }
    std::string host = item.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    auto port = ParsePort(var + " port of \"" + item + "\"", item.substr(colon + 1));
    if (!port.ok()) return port.status();
    peers.push_back(PeerAddress{host, static_cast<uint16_t>(*port)});
  }
  return peers;
}

}  // namespace

StatusOr<SidecarConfig> SidecarConfig::FromEnvironment(const Getenv& getenv) {
  EnvSettings settings(getenv, logging::Subsystem::kSidecar);
  SidecarConfig c;
  const std::string elastic =
      settings.Find(env::kElasticRendezvous).value_or(EnvSettings::Found{}).value;
  KV_ASSIGN_OR_RETURN(c.ranks, settings.Int(env::kSidecarRanks, 1, 1, 1024));
  if (elastic.empty()) {
    KV_ASSIGN_OR_RETURN(c.size, settings.RequiredInt(env::kSize, 1, 1 << 20));
    KV_ASSIGN_OR_RETURN(c.rank, settings.RequiredInt(env::kRank, 0, c.size - 1));
  } else {
    KV_ASSIGN_OR_RETURN(const int64_t size, settings.Int(env::kSize, c.ranks, 1, 1 << 20));
    c.size = static_cast<int>(size);
    KV_ASSIGN_OR_RETURN(const int64_t rank, settings.Int(env::kRank, 0, 0, c.size - 1));
    c.rank = static_cast<int>(rank);
  }
  if (c.rank + c.ranks > c.size) {
    return InvalidArgument(Name(env::kSidecarRanks) + "=" + std::to_string(c.ranks) + " from " +
                           env::kRank + "=" + std::to_string(c.rank) + " goes past " + env::kSize +
                           "=" + std::to_string(c.size));
  }
  // Wiring, not tuning: korovodrun or the operator sets these on every rank, so they are not
  // logged as overrides of a default (Find and the Required getters log nothing).
  auto wiring = [&settings](const char* name, int64_t fallback, int64_t lo,
                            int64_t hi) -> StatusOr<int64_t> {
    if (!settings.Find(name)) return fallback;
    return settings.RequiredInt(name, lo, hi);
  };
  KV_ASSIGN_OR_RETURN(c.local_size, wiring(env::kLocalSize, c.ranks, 1, c.size));
  KV_ASSIGN_OR_RETURN(c.local_rank, wiring(env::kLocalRank, 0, 0, c.local_size - 1));
  if (c.local_rank + c.ranks > c.local_size) {
    return InvalidArgument(Name(env::kSidecarRanks) + "=" + std::to_string(c.ranks) + " from " +
                           env::kLocalRank + "=" + std::to_string(c.local_rank) + " goes past " +
                           env::kLocalSize + "=" + std::to_string(c.local_size));
  }
  KV_ASSIGN_OR_RETURN(c.cross_size, wiring(env::kCrossSize, 1, 1, c.size));
  KV_ASSIGN_OR_RETURN(c.cross_rank, wiring(env::kCrossRank, 0, 0, c.cross_size - 1));
  const std::string peers = settings.Find(env::kPeers).value_or(EnvSettings::Found{}).value;
  const std::string coordinator =
      settings.Find(env::kCoordinator).value_or(EnvSettings::Found{}).value;
  c.world_file = settings.Find(env::kWorldFile).value_or(EnvSettings::Found{}).value;
  const int sources =
      !peers.empty() + !coordinator.empty() + !c.world_file.empty() + !elastic.empty();
  if (sources != 1) {
    return InvalidArgument(std::string(sources == 0 ? "none" : "more than one") + " of " +
                           env::kPeers + ", " + env::kCoordinator + ", " + env::kWorldFile +
                           " and " + env::kElasticRendezvous +
                           " is set; exactly one says where the peers are");
  }
  if (!elastic.empty()) {
    KV_ASSIGN_OR_RETURN(auto parsed, ParsePeers(elastic, env::kElasticRendezvous));
    if (parsed.size() != 1) {
      return InvalidArgument(Name(env::kElasticRendezvous) + "=" + elastic +
                             " is not one host:port");
    }
    c.elastic_server = parsed.front();
    KV_ASSIGN_OR_RETURN(c.worker_id, settings.String(env::kWorkerId));
    if (c.worker_id.empty()) c.worker_id = LocalHostName() + "-" + std::to_string(c.rank);
    if (c.worker_id.size() > 200 ||
        !std::all_of(c.worker_id.begin(), c.worker_id.end(),
                     [](char ch) { return ch > ' ' && ch < 127 && ch != '=' && ch != '/'; })) {
      return InvalidArgument(Name(env::kWorkerId) + "=" + c.worker_id +
                             " must be one word of at most 200 printable characters without "
                             "'=' or '/'");
    }
    KV_ASSIGN_OR_RETURN(c.host_name, settings.String(env::kHostName));
    KV_ASSIGN_OR_RETURN(const int64_t t, settings.Int(env::kElasticTimeoutSeconds, 600, 1, 86400));
    c.elastic_timeout = std::chrono::seconds(t);
  }
  if (!peers.empty()) {
    KV_ASSIGN_OR_RETURN(c.peers, ParsePeers(peers, env::kPeers));
    if (static_cast<int>(c.peers.size()) != c.size) {
      return InvalidArgument(Name(env::kPeers) + " has " + std::to_string(c.peers.size()) +
                             " entries but " + env::kSize + " is " + std::to_string(c.size));
    }
  }
  if (!coordinator.empty()) {
    KV_ASSIGN_OR_RETURN(auto parsed, ParsePeers(coordinator, env::kCoordinator));
    if (parsed.size() != 1) {
      return InvalidArgument(Name(env::kCoordinator) + "=" + coordinator + " is not one host:port");
    }
    c.coordinator = parsed.front();
  }
  KV_ASSIGN_OR_RETURN(c.hosts, settings.List(env::kHosts, {}));
  if (!c.hosts.empty() && static_cast<int>(c.hosts.size()) != c.size) {
    return InvalidArgument(Name(env::kHosts) + " names " + std::to_string(c.hosts.size()) +
                           " hosts but " + env::kSize + " is " + std::to_string(c.size) +
                           " (one per rank)");
  }
  if (settings.Find(env::kEpoch)) {  // wiring: set on every rank of a HorovodJob, not logged
    KV_ASSIGN_OR_RETURN(const int64_t epoch, settings.RequiredInt(env::kEpoch, 0, 0xffffffffLL));
    c.epoch = static_cast<uint32_t>(epoch);
  }
  KV_ASSIGN_OR_RETURN(c.iface, settings.String(env::kIface));
  KV_ASSIGN_OR_RETURN(c.data_port, settings.Int(env::kDataPort, 0, 0, 65535));
  // Inherited from korovodrun, one per served rank. -1: none.
  if (auto fds = settings.Find(env::kListenFd)) {
    std::stringstream list(fds->value);
    std::string item;
    while (std::getline(list, item, ',')) {
      int fd = -1;
      auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), fd);
      if (item.empty() || ec != std::errc() || p != item.data() + item.size() || fd < 0 ||
          ::fcntl(fd, F_GETFD) < 0) {
        return InvalidArgument(Name(env::kListenFd) + "=" + fds->value + ": \"" + item +
                               "\" is not an open file descriptor");
      }
      c.listen_fds.push_back(fd);
    }
    if (static_cast<int>(c.listen_fds.size()) != c.ranks) {
      return InvalidArgument(Name(env::kListenFd) + "=" + fds->value + " names " +
                             std::to_string(c.listen_fds.size()) + " descriptors for " +
                             std::to_string(c.ranks) + " ranks (" + env::kSidecarRanks + ")");
    }
    c.listen_fd = c.listen_fds.front();
  }
  c.job_key_file = settings.Find(env::kJobKeyFile).value_or(EnvSettings::Found{}).value;
  // Never through a logging getter: the key must not reach a log line.
  c.job_key = settings.Find(env::kJobKey).value_or(EnvSettings::Found{}).value;
  if (!c.job_key.empty() && !c.job_key_file.empty()) {
    return InvalidArgument("both " + Name(env::kJobKey) + " and " + env::kJobKeyFile +
                           " are set; set one");
  }
  // Same bar as korovodrun's and the operator's keys (32 random bytes as 64 hex digits): a short
  // key would make the ring's HMAC guessable.
  if (!c.job_key.empty() && c.job_key.size() < 32) {
    return InvalidArgument(Name(env::kJobKey) + " has " + std::to_string(c.job_key.size()) +
                           " characters; at least 32 are required");
  }
  KV_ASSIGN_OR_RETURN(const std::string socket_path, settings.RequiredString(env::kSocket));
  const std::string* socket = &socket_path;
  if (socket->size() >= 100) {
    return InvalidArgument(Name(env::kSocket) + "=" + *socket +
                           " is too long for a unix socket path (max 99 bytes)");
  }
  c.socket_path = *socket;
  if (c.ranks > 1 && c.socket_path.find("{local_rank}") == std::string::npos) {
    return InvalidArgument(Name(env::kSocket) + "=" + c.socket_path + " must contain " +
                           "\"{local_rank}\" when the sidecar serves " + std::to_string(c.ranks) +
                           " ranks (" + env::kSidecarRanks + "): one socket each");
  }
  KV_ASSIGN_OR_RETURN(const std::string shm_prefix, settings.RequiredString(env::kShmPrefix));
  const std::string* prefix = &shm_prefix;
  if (prefix->front() != '/' || prefix->find('/', 1) != std::string::npos || prefix->size() > 200) {
    return InvalidArgument(Name(env::kShmPrefix) + "=" + *prefix +
                           " must start with \"/\" and contain no other \"/\"");
  }
  c.shm_prefix = *prefix;
  // -1: no HTTP server (the default); 0: any free port.
  KV_ASSIGN_OR_RETURN(c.metrics_port, settings.Int(env::kMetricsPort, -1, -1, 65535));
  KV_ASSIGN_OR_RETURN(c.device_backend, settings.Choice(env::kDeviceBackend, "auto",
                                                        {"auto", "nccl", "host", "none"}));
  KV_ASSIGN_OR_RETURN(int64_t timeout, settings.Int(env::kStartTimeoutSeconds, 60, 1, 86400));
  c.start_timeout = std::chrono::seconds(timeout);
  KV_ASSIGN_OR_RETURN(int64_t op_timeout, settings.Int(env::kOpTimeoutSeconds, 60, 1, 86400));
  c.op_timeout = std::chrono::seconds(op_timeout);
  KV_ASSIGN_OR_RETURN(c.arena_heap_mib, settings.Int(env::kArenaHeapMib, 64, 1, 1 << 20));
  KV_ASSIGN_OR_RETURN(c.arena_heap_max_mib, settings.Int(env::kArenaHeapMaxMib, 16384, 1, 1 << 20));
  if (c.arena_heap_mib > c.arena_heap_max_mib) {
    return InvalidArgument(Name(env::kArenaHeapMib) + "=" + std::to_string(c.arena_heap_mib) +
                           " is more than " + env::kArenaHeapMaxMib + "=" +
                           std::to_string(c.arena_heap_max_mib) +
                           ": a heap cannot start larger than it may grow");
  }
  // Last, so that every other setting's mistake is named first.
  KV_ASSIGN_OR_RETURN(c.insecure_no_key, settings.Bool(env::kInsecureNoKey, false));
  if (c.job_key.empty() && c.job_key_file.empty() && !c.insecure_no_key) {
    // Without a key any process that reaches this sidecar's ports could join or stop the job.
    return InvalidArgument(
        "no job key: set " + std::string(env::kJobKeyFile) +
        " (a file holding at least 32 random characters; korovodrun and the operator make one) "
        "or " + env::kJobKey + "; " + env::kInsecureNoKey +
        "=1 runs without any authentication, for debugging only");
  }
  if (c.insecure_no_key && !(c.job_key.empty() && c.job_key_file.empty())) {
    return InvalidArgument(std::string(env::kInsecureNoKey) + "=1 and a job key are both set; " +
                           "set one");
  }
  return c;
}

SidecarConfig SidecarConfig::ForRank(int i) const {
  SidecarConfig c = *this;
  c.ranks = 1;
  c.rank = rank + i;
  c.local_rank = local_rank + i;
  for (size_t at; (at = c.socket_path.find("{local_rank}")) != std::string::npos;) {
    c.socket_path.replace(at, 12, std::to_string(c.local_rank));
  }
  c.listen_fd = i < static_cast<int>(listen_fds.size()) ? listen_fds[i] : -1;
  c.listen_fds.clear();
  if (data_port > 0) c.data_port = data_port + i;
  if (ranks > 1 && elastic()) c.worker_id = worker_id + "." + std::to_string(i);
  if (metrics_port > 0) c.metrics_port = metrics_port + i;
  return c;
}

std::string SidecarConfig::arena_name() const {
  return elastic() ? shm_prefix + "worker-" + worker_id
                   : shm_prefix + "rank" + std::to_string(rank);
}

StatusOr<SidecarConfig> SidecarConfig::FromProcessEnvironment() {
  return FromEnvironment(ProcessGetenv());
}

StatusOr<std::string> ReadJobKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return ErrnoStatus(StatusCode::kInvalidArgument, Name(env::kJobKeyFile) + " " + path, errno);
  }
  if ((st.st_mode & 077) != 0) {
    return PermissionDenied(Name(env::kJobKeyFile) + " " + path +
                            " is readable by group or others; expected mode 0600");
  }
  std::ifstream in(path);
  std::string key;
  if (!in || !std::getline(in, key) || key.empty()) {
    return InvalidArgument(Name(env::kJobKeyFile) + " " + path + " is empty or unreadable");
  }
  return key;
}

}  // namespace korovod::sidecar
