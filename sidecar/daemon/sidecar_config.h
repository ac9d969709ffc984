// SidecarConfig: the korovod-sidecar's settings, read from the environment korovodrun (or the
// operator) gives it (launcher/README.md). Every error names the variable.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod::sidecar {

struct SidecarConfig {
  // The ranks this sidecar serves: `ranks` consecutive ones from `rank` (KOROVOD_RANK,
  // KOROVOD_SIDECAR_RANKS), e.g. every rank of a pod; each gets its own engine, arena, socket and
  // data port, all in this process. ForRank(i) is the configuration of the i-th.
  int ranks = 1;
  int rank = 0;
  int size = 0;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  // Where the peers are: exactly one of KOROVOD_PEERS, KOROVOD_COORDINATOR, KOROVOD_WORLD_FILE,
  // KOROVOD_ELASTIC_RENDEZVOUS.
  std::vector<PeerAddress> peers;  // KOROVOD_PEERS, one per rank
  // KOROVOD_HOSTS: the host each rank counts as (korovodrun's -H virtual hosts), one per rank;
  // empty: from the addresses or the world table.
  std::vector<std::string> hosts;
  std::optional<PeerAddress> coordinator;  // KOROVOD_COORDINATOR: rendezvous host:port (rank 0)
  std::string world_file;                  // KOROVOD_WORLD_FILE
  // Elastic (KOROVOD_ELASTIC_RENDEZVOUS): each trainer session (hvd.init) runs in a new membership
  // epoch formed by that server, which assigns rank and size; KOROVOD_RANK and KOROVOD_SIZE are
  // then optional and only number the served ranks.
  std::optional<PeerAddress> elastic_server;
  std::string worker_id;  // KOROVOD_WORKER_ID; default: host name and rank
  std::string host_name;  // KOROVOD_HOST_NAME: the host registered; empty: this machine's
  std::chrono::seconds elastic_timeout{600};  // KOROVOD_ELASTIC_TIMEOUT_SECONDS
  // KOROVOD_EPOCH: a static world's generation (the operator's status.epoch), part of every peer
  // handshake. Elastic epochs come from the membership server instead.
  uint32_t epoch = 0;
  bool elastic() const { return elastic_server.has_value(); }
  std::string iface;            // KOROVOD_IFACE: the one interface to use, or empty
  int data_port = 0;            // KOROVOD_DATA_PORT (coordinator mode; 0: any)
  int listen_fd = -1;           // KOROVOD_LISTEN_FD, or -1
  std::vector<int> listen_fds;  // KOROVOD_LISTEN_FD with several ranks: one each
  std::string job_key_file;     // KOROVOD_JOB_KEY_FILE, or empty
  // KOROVOD_JOB_KEY: the key itself, for a pod whose key comes from a Secret through
  // secretKeyRef (a non-root sidecar cannot read a root-owned 0400 Secret file). At most one of
  // the two is set; neither = unauthenticated.
  std::string job_key;
  bool insecure_no_key = false;  // KOROVOD_INSECURE_NO_KEY=1: no key, no authentication
  std::string socket_path;                 // KOROVOD_SOCKET
  std::string shm_prefix;                  // KOROVOD_SHM_PREFIX, e.g. "/korovod-<job>-"
  int metrics_port = -1;                   // KOROVOD_METRICS_PORT; -1: no HTTP server, 0: ephemeral
  std::string device_backend = "auto";     // KOROVOD_DEVICE_BACKEND: auto, nccl, host, none
  std::chrono::seconds start_timeout{60};  // KOROVOD_START_TIMEOUT_SECONDS
  std::chrono::seconds op_timeout{60};     // KOROVOD_OP_TIMEOUT_SECONDS
  // Each of the arena's two heaps (client, result): reserved in /dev/shm at start, and the most
  // it may grow to as bursts need it.
  int arena_heap_mib = 64;         // KOROVOD_ARENA_HEAP_MIB
  int arena_heap_max_mib = 16384;  // KOROVOD_ARENA_HEAP_MAX_MIB (address space until used)

  // Elastic ranks change with the epoch; the arena outlives epochs, so it is named by the worker.
  std::string arena_name() const;

  // The i-th served rank's own configuration (0 <= i < ranks): rank + i, local rank + i, the
  // socket with "{local_rank}" replaced by its local rank, its listen fd, data and metrics ports
  // + i (0 stays "any free port").
  SidecarConfig ForRank(int i) const;

  static StatusOr<SidecarConfig> FromEnvironment(
      const std::function<std::optional<std::string>(const std::string&)>& getenv);
  static StatusOr<SidecarConfig> FromProcessEnvironment();
};

// Reads the job key file: refuses a file readable by group/others (0600 expected) and strips the
// trailing newline.
StatusOr<std::string> ReadJobKeyFile(const std::string& path);

}  // namespace korovod::sidecar
