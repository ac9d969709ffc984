// korovod-sidecar-nccl, the sidecar with the NCCL backend: on a machine without a GPU it starts
// with KOROVOD_DEVICE_BACKEND=auto and says that GPU tensors have no backend here, and with
// `nccl` it refuses to start naming the cause; on a GPU host `auto` chooses NCCL and says its
// version and devices. Built only where CUDA and NCCL were found.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "runtime/device/cuda_device_api.h"
#include "sidecar/client/client.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar::daemon_test {
namespace {

using namespace std::chrono_literals;

bool HaveGpu() { return CudaDeviceApi().DeviceCount() > 0; }

TEST(SidecarNcclBackend, AutoChoosesNcclWhereAGpuIsVisibleAndNoneElsewhere) {
  Job job(2, {"KOROVOD_DEVICE_BACKEND=auto"}, 1, KOROVOD_SIDECAR_NCCL_BIN);
  ASSERT_TRUE(job.WaitReady());
  const std::string want = HaveGpu() ? "device tensors: nccl "
                                     : "device tensors: none (no CUDA "
                                       "device visible)";
  for (int r = 0; r < 2; ++r) EXPECT_NE(job.Log(r).find(want), std::string::npos) << job.Log(r);
  // CPU tensors run as with korovod-sidecar.
  EXPECT_TRUE(job.RunTrainers([&](int rank) {
    auto client = Must(Client::Connect(job.socket(rank), 10s));
    TCHECK(client->device_backend() == (HaveGpu() ? "nccl" : "none"));
    TCHECK((client->nccl_version() > 0) == HaveGpu());
    std::vector<float> in(8, 1.0f), out(8);
    TOK(Must(client->Allreduce(in.data(), out.data(), DataType::kFloat32, {8}, {.name = "cpu"}))
            .Wait(Deadline::After(30s)));
    TCHECK(out[7] == 2.0f);
  }));
}

TEST(SidecarNcclBackend, NcclWithoutAGpuRefusesToStartNamingWhy) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is visible: the backend starts";
  char dir_template[] = "/tmp/kvnccl-XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  std::vector<std::string> env = {"KOROVOD_SIZE=1",
                                  "KOROVOD_RANK=0",
                                  "KOROVOD_PEERS=127.0.0.1:1",
                                  "KOROVOD_SHM_PREFIX=/kvncclt-",
                                  "KOROVOD_SOCKET=" + dir + "/s.sock",
                                  "KOROVOD_DEVICE_BACKEND=nccl",
                                  "KOROVOD_JOB_KEY=0123456789abcdef0123456789abcdef0123456789abcdef",
                                  "PATH=/usr/bin:/bin"};
  const std::string log = dir + "/log";
  const int st = RunToExit(KOROVOD_SIDECAR_NCCL_BIN, env, log, 30s);
  ASSERT_NE(st, -1) << "the sidecar did not exit";
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st << "\n" << text.str();
  EXPECT_NE(text.str().find("KOROVOD_DEVICE_BACKEND=nccl: no CUDA device is visible to the "
                            "sidecar"),
            std::string::npos)
      << text.str();
}

}  // namespace
}  // namespace korovod::sidecar::daemon_test
