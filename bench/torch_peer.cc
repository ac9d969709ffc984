#include "bench/torch_peer.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace korovod::bench {
namespace {

// A fresh private directory for the shapes file and torch's rendezvous file, removed on exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/korovod-gradbench-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

LaunchOutcome RunTorchPeer(const TorchPeerRun& run, double timeout_s, const ResultFile& results) {
  TempDir dir;
  if (dir.path().empty()) {
    return {kExitRankFailed, std::string("mkdtemp for the torch peer: ") + std::strerror(errno)};
  }
  const std::string shapes = dir.path() + "/shapes.json";
  {
    std::ofstream f(shapes);
    f << ResNetShapesJson(run.model) << "\n";
    if (!f) return {kExitRankFailed, "cannot write " + shapes};
  }
  const std::string init_file = dir.path() + "/torch-init";
  const std::vector<std::string> args = {run.python,          run.script,
                                         "--shapes",          shapes,
                                         "--warmup",          std::to_string(run.warmup),
                                         "--steps",           std::to_string(run.steps),
                                         "--compute-gap-us",  Num(run.gap_us),
                                         "--bucket-mb",       Num(run.bucket_mib),
                                         "--first-bucket-mb", Num(run.first_bucket_mib)};
  return LaunchRanks(run.ranks, timeout_s,
                     [&](int rank, int listen_fd, const std::vector<PeerAddress>&) -> int {
                       ::close(listen_fd);  // torch rendezvouses through INIT_FILE
                       ::setenv("RANK", std::to_string(rank).c_str(), 1);
                       ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
                       ::setenv("WORLD_SIZE", std::to_string(run.ranks).c_str(), 1);
                       ::setenv("INIT_FILE", init_file.c_str(), 1);
                       ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
                       if (::dup2(rank == 0 ? results.fd() : STDERR_FILENO, STDOUT_FILENO) < 0) {
                         std::perror("korovod-gradbench: dup2 for the torch peer");
                         return kExitRankFailed;
                       }
                       std::vector<char*> argv;
                       for (const std::string& a : args)
                         argv.push_back(const_cast<char*>(a.c_str()));
                       argv.push_back(nullptr);
                       ::execv(run.python.c_str(), argv.data());
                       std::fprintf(stderr, "korovod-gradbench: exec %s: %s\n", run.python.c_str(),
                                    std::strerror(errno));
                       return kExitRankFailed;
                     });
}

}  // namespace korovod::bench
