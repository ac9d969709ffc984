#include "sidecar/daemon/sidecar_config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace korovod::sidecar {
namespace {

using GetEnv = std::function<std::optional<std::string>(const std::string&)>;

StatusOr<long long> ParseInt(const std::string& var, const std::string& text, long long lo,
                             long long hi) {
  long long v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end) {
    return InvalidArgument(var + "=\"" + text + "\" is not an integer");
  }
  if (v < lo || v > hi) {
    return InvalidArgument(var + "=" + text + " is out of range [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  }
  return v;
}

StatusOr<int> Required(const GetEnv& getenv, const std::string& var, long long lo, long long hi) {
  auto v = getenv(var);
  if (!v) return InvalidArgument(var + " is not set");
  KV_ASSIGN_OR_RETURN(long long n, ParseInt(var, *v, lo, hi));
  return static_cast<int>(n);
}

StatusOr<int> Optional(const GetEnv& getenv, const std::string& var, long long lo, long long hi,
                       int fallback) {
  auto v = getenv(var);
  if (!v || v->empty()) return fallback;
  KV_ASSIGN_OR_RETURN(long long n, ParseInt(var, *v, lo, hi));
  return static_cast<int>(n);
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
    auto port = ParseInt(var + " port of \"" + item + "\"", item.substr(colon + 1), 1, 65535);
    if (!port.ok()) return port.status();
    peers.push_back(PeerAddress{host, static_cast<uint16_t>(*port)});
  }
  return peers;
}

}  // namespace

StatusOr<SidecarConfig> SidecarConfig::FromEnvironment(const GetEnv& getenv) {
  SidecarConfig c;
  KV_ASSIGN_OR_RETURN(c.size, Required(getenv, "KOROVOD_SIZE", 1, 1 << 20));
  KV_ASSIGN_OR_RETURN(c.rank, Required(getenv, "KOROVOD_RANK", 0, c.size - 1));
  KV_ASSIGN_OR_RETURN(c.local_size, Optional(getenv, "KOROVOD_LOCAL_SIZE", 1, c.size, 1));
  KV_ASSIGN_OR_RETURN(c.local_rank, Optional(getenv, "KOROVOD_LOCAL_RANK", 0, c.local_size - 1, 0));
  KV_ASSIGN_OR_RETURN(c.cross_size, Optional(getenv, "KOROVOD_CROSS_SIZE", 1, c.size, 1));
  KV_ASSIGN_OR_RETURN(c.cross_rank, Optional(getenv, "KOROVOD_CROSS_RANK", 0, c.cross_size - 1, 0));
  const std::string peers = getenv("KOROVOD_PEERS").value_or("");
  const std::string coordinator = getenv("KOROVOD_COORDINATOR").value_or("");
  c.world_file = getenv("KOROVOD_WORLD_FILE").value_or("");
  const int sources = !peers.empty() + !coordinator.empty() + !c.world_file.empty();
  if (sources != 1) {
    return InvalidArgument(
        std::string(sources == 0 ? "none" : "more than one") +
        " of KOROVOD_PEERS, KOROVOD_COORDINATOR and KOROVOD_WORLD_FILE is set; exactly one says "
        "where the peers are");
  }
  if (!peers.empty()) {
    KV_ASSIGN_OR_RETURN(c.peers, ParsePeers(peers, "KOROVOD_PEERS"));
    if (static_cast<int>(c.peers.size()) != c.size) {
      return InvalidArgument("KOROVOD_PEERS has " + std::to_string(c.peers.size()) +
                             " entries but KOROVOD_SIZE is " + std::to_string(c.size));
    }
  }
  if (!coordinator.empty()) {
    KV_ASSIGN_OR_RETURN(auto parsed, ParsePeers(coordinator, "KOROVOD_COORDINATOR"));
    if (parsed.size() != 1) {
      return InvalidArgument("KOROVOD_COORDINATOR=" + coordinator + " is not one host:port");
    }
    c.coordinator = parsed.front();
  }
  c.iface = getenv("KOROVOD_IFACE").value_or("");
  KV_ASSIGN_OR_RETURN(c.data_port, Optional(getenv, "KOROVOD_DATA_PORT", 0, 65535, 0));
  KV_ASSIGN_OR_RETURN(c.listen_fd, Optional(getenv, "KOROVOD_LISTEN_FD", 0, 1 << 20, -1));
  if (c.listen_fd >= 0 && ::fcntl(c.listen_fd, F_GETFD) < 0) {
    return InvalidArgument("KOROVOD_LISTEN_FD=" + std::to_string(c.listen_fd) +
                           " is not an open file descriptor");
  }
  c.job_key_file = getenv("KOROVOD_JOB_KEY_FILE").value_or("");
  c.job_key = getenv("KOROVOD_JOB_KEY").value_or("");
  if (!c.job_key.empty() && !c.job_key_file.empty()) {
    return InvalidArgument("both KOROVOD_JOB_KEY and KOROVOD_JOB_KEY_FILE are set; set one");
  }
  // Same bar as korovodrun's and the operator's keys (32 random bytes as 64 hex digits): a short
  // key would make the ring's HMAC guessable.
  if (!c.job_key.empty() && c.job_key.size() < 32) {
    return InvalidArgument("KOROVOD_JOB_KEY has " + std::to_string(c.job_key.size()) +
                           " characters; at least 32 are required");
  }
  auto socket = getenv("KOROVOD_SOCKET");
  if (!socket || socket->empty()) return InvalidArgument("KOROVOD_SOCKET is not set");
  if (socket->size() >= 100) {
    return InvalidArgument("KOROVOD_SOCKET=" + *socket +
                           " is too long for a unix socket path (max 99 bytes)");
  }
  c.socket_path = *socket;
  auto prefix = getenv("KOROVOD_SHM_PREFIX");
  if (!prefix || prefix->empty()) return InvalidArgument("KOROVOD_SHM_PREFIX is not set");
  if (prefix->front() != '/' || prefix->find('/', 1) != std::string::npos || prefix->size() > 200) {
    return InvalidArgument("KOROVOD_SHM_PREFIX=" + *prefix +
                           " must start with \"/\" and contain no other \"/\"");
  }
  c.shm_prefix = *prefix;
  KV_ASSIGN_OR_RETURN(c.metrics_port, Optional(getenv, "KOROVOD_METRICS_PORT", 0, 65535, -1));
  KV_ASSIGN_OR_RETURN(int timeout, Optional(getenv, "KOROVOD_START_TIMEOUT_SECONDS", 1, 86400, 60));
  c.start_timeout = std::chrono::seconds(timeout);
  KV_ASSIGN_OR_RETURN(c.arena_heap_mib, Optional(getenv, "KOROVOD_ARENA_HEAP_MIB", 1, 1 << 20, 64));
  KV_ASSIGN_OR_RETURN(c.arena_heap_max_mib,
                      Optional(getenv, "KOROVOD_ARENA_HEAP_MAX_MIB", 1, 1 << 20, 16384));
  if (c.arena_heap_mib > c.arena_heap_max_mib) {
    return InvalidArgument(
        "KOROVOD_ARENA_HEAP_MIB=" + std::to_string(c.arena_heap_mib) +
        " is more than KOROVOD_ARENA_HEAP_MAX_MIB=" + std::to_string(c.arena_heap_max_mib) +
        ": a heap cannot start larger than it may grow");
  }
  return c;
}

StatusOr<SidecarConfig> SidecarConfig::FromProcessEnvironment() {
  return FromEnvironment([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  });
}

StatusOr<std::string> ReadJobKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return ErrnoStatus(StatusCode::kInvalidArgument, "KOROVOD_JOB_KEY_FILE " + path, errno);
  }
  if ((st.st_mode & 077) != 0) {
    return PermissionDenied("KOROVOD_JOB_KEY_FILE " + path +
                            " is readable by group or others; expected mode 0600");
  }
  std::ifstream in(path);
  std::string key;
  if (!in || !std::getline(in, key) || key.empty()) {
    return InvalidArgument("KOROVOD_JOB_KEY_FILE " + path + " is empty or unreadable");
  }
  return key;
}

}  // namespace korovod::sidecar
