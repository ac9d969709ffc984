// korovodrun: the local launcher. See README.md.
#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "launcher/fd_writer.h"
#include "launcher/job.h"
#include "launcher/local_host.h"
#include "launcher/options.h"
#include "launcher/rank_layout.h"

namespace korovod::launcher {
namespace {

constexpr int kUsageExit = 2;

int UsageError(const std::string& message) {
  KV_LOG(kError, kLauncher, "%s", message.c_str());
  std::fputs(UsageText(), stderr);
  return kUsageExit;
}

// The sidecar binary: --sidecar, else the one in korovodrun's own directory:
// korovod-sidecar-nccl where the build has the NCCL backend (GPU tensors run on NCCL wherever a GPU
// is visible, and it behaves as korovod-sidecar elsewhere), korovod-sidecar otherwise.
std::string DefaultSidecarPath() {
  char self[PATH_MAX + 1] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, PATH_MAX);
  if (n <= 0) return "korovod-sidecar";
  std::string path(self, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  if (::access((dir + "/korovod-sidecar-nccl").c_str(), X_OK) == 0) {
    return dir + "/korovod-sidecar-nccl";
  }
  return dir + "/korovod-sidecar";
}

int Main(int argc, char** argv) {
  // Children get their stdio from fds 0-2 of korovodrun's pipes; make sure no pipe or socket of
  // ours lands on 0-2 when korovodrun was started with them closed.
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
  }

  logging::SetRole("korovodrun");
  logging::ConfigureFromEnvironment(logging::Subsystem::kLauncher);

  std::vector<std::string> args(argv + 1, argv + argc);
  auto parsed = ParseOptions(args);
  if (!parsed.ok()) return UsageError(parsed.status().message());
  LauncherOptions opts = std::move(parsed).value();
  if (opts.help) {
    std::fputs(UsageText(), stdout);
    return 0;
  }

  // Elastic jobs without -H: one local host with a slot per worker they may have.
  std::vector<HostSlots> hosts = {
      {"localhost",
       opts.elastic() ? std::max(opts.num_proc, opts.max_np.value_or(0)) : opts.num_proc}};
  if (opts.hosts) {
    auto h = ParseHostList(*opts.hosts);
    if (!h.ok()) return UsageError(h.status().message());
    hosts = std::move(h).value();
  }
  for (const HostSlots& h : hosts) {
    if (!IsLocalHost(h.host)) {
      KV_LOG(kError, kLauncher,
             "korovodrun starts ranks on this machine only; %s is not local (use the operator "
             "for multi-host jobs)",
             h.host.c_str());
      return kUsageExit;
    }
  }
  // Elastic: every slot of -H (the fixed host list when no discovery script is given).
  int slots = 0;
  for (const HostSlots& h : hosts) slots += h.slots;
  auto layout = ComputeRankLayout(hosts, opts.elastic() ? slots : opts.num_proc);
  if (!layout.ok()) return UsageError(layout.status().message());

  JobConfig config;
  config.sidecar_path = opts.sidecar_path ? *opts.sidecar_path : DefaultSidecarPath();
  if (::access(config.sidecar_path.c_str(), X_OK) != 0) {
    KV_LOG(kError, kLauncher,
           "no executable sidecar at %s (build the korovod-sidecar target, or pass --sidecar "
           "PATH)",
           config.sidecar_path.c_str());
    return kUsageExit;
  }
  config.layout = std::move(layout).value();
  config.options = std::move(opts);

  FdWriter out(STDOUT_FILENO);
  FdWriter err(STDERR_FILENO);
  // From here korovodrun's own lines go through the writer of the ranks' forwarded lines, so
  // they appear in the order things happened (a failure line after the output that led to it).
  logging::SetSink([&err](std::string_view line) { err.Line({}, line); });
  Job job(std::move(config), &out, &err);
  const int code = job.Run();
  logging::SetSink(nullptr);
  return code;
}

}  // namespace
}  // namespace korovod::launcher

int main(int argc, char** argv) { return korovod::launcher::Main(argc, argv); }
