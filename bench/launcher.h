// Starts one world of N ranks on this host as forked child processes and supervises them.
//
// The parent binds one listening socket per rank on 127.0.0.1 port 0 before forking, so every
// child knows every peer's port without a rendezvous service and no port can be stolen between
// "pick a free port" and "bind" (the race launch.py-style launchers have). The parent is
// single-threaded when it forks, so the children inherit no lock held by a thread that no longer
// exists.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/world/world.h"

namespace korovod::bench {

// Exit codes shared by the children and korovod-bench itself.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRankFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitVerifyFailed = 3;

struct LaunchOutcome {
  // kExitOk: every rank exited 0; kExitVerifyFailed: ranks reported a verification failure
  // (and nothing worse); kExitRankFailed: a rank crashed, failed or hung, see message.
  int exit_code = kExitOk;
  std::string message;  // names the rank(s), e.g. "rank 2 exited with status 1"
  // SIGINT, SIGTERM or SIGHUP that interrupted the launch (ranks killed), else 0: the caller
  // cleans up and then dies by it.
  int signal = 0;
};

// Runs body(rank, listen_fd, peers) in N children; the child's exit status is body's return
// value. listen_fd is the child's own pre-bound socket (the others' are closed in the child).
// If a child exits with another status than 0 or 3, or the ranks are not all done within
// timeout_s, every remaining child is killed (SIGKILL: a hung rank ignores politer signals while
// blocked in a collective) and reaped before this returns.
// `watch`, when given, is asked whenever the parent wakes (a child ended, or once a second): a
// non-empty answer names something else the ranks depend on that has failed (a rank's sidecar),
// and ends the launch like a failed rank.
using RankBody = std::function<int(int rank, int listen_fd, const std::vector<PeerAddress>& peers)>;
using LaunchWatch = std::function<std::string()>;
LaunchOutcome LaunchRanks(int n, double timeout_s, const RankBody& body,
                          const LaunchWatch& watch = {});

}  // namespace korovod::bench
