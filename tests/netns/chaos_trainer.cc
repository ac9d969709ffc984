// korovod-chaos-trainer: the trainer of the data-plane chaos tests (tests/netns/chaos_*.sh).
// Connects to the sidecar at $KOROVOD_SOCKET and runs a loop of float32 sum allreduces through
// it, checking every result exactly, so a fault injected mid-loop shows what a training loop
// sees. Every line it prints starts with an RFC 3339 UTC time with milliseconds (the sidecars'
// log format), so the harness can measure from the fault to the error:
//
//   2026-11-30T10:00:00.123Z trainer rank 0/3 step 4 ok (4194304 bytes, 0.021 s)
//   2026-11-30T10:00:05.456Z trainer rank 0/3 step 5 failed: DEADLINE_EXCEEDED: ...
//   2026-11-30T10:00:09.000Z trainer rank 0/3 done: 40 steps ok
//
//   korovod-chaos-trainer [--steps N] [--mib M] [--grow-mib G] [--wait-seconds W]
//                         [--pause-ms P] [--allocation-timeout-seconds A]
//
// Step k (from 0) allreduces M + k*G MiB (G: tensors that grow, so the arena's heap must grow).
// --wait-seconds bounds each op's wait in this trainer (the client's own deadline; the sidecar's
// op timeout should end a failed op long before it). --pause-ms sleeps between steps.
// --allocation-timeout-seconds bounds the wait for arena heap space (Client::
// set_allocation_timeout; default the client's 5 minutes).
// Exit status: 0 every step ok, 1 a wrong result, 2 cannot connect, 3 an op failed.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/client/client.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;

std::string Now() {
  const auto t = std::chrono::system_clock::now();
  const time_t secs = std::chrono::system_clock::to_time_t(t);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  tm utc{};
  gmtime_r(&secs, &utc);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms));
  return buf;
}

struct Flags {
  int steps = 20;
  double mib = 1;
  double grow_mib = 0;
  int wait_seconds = 120;
  int pause_ms = 0;
  int allocation_timeout_seconds = 0;  // 0: the client's default
};

bool ParseFlags(int argc, char** argv, Flags& f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "--steps") {
      f.steps = std::atoi(v);
    } else if (a == "--mib") {
      f.mib = std::atof(v);
    } else if (a == "--grow-mib") {
      f.grow_mib = std::atof(v);
    } else if (a == "--wait-seconds") {
      f.wait_seconds = std::atoi(v);
    } else if (a == "--pause-ms") {
      f.pause_ms = std::atoi(v);
    } else if (a == "--allocation-timeout-seconds") {
      f.allocation_timeout_seconds = std::atoi(v);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && f.steps > 0 && f.mib > 0 && f.grow_mib >= 0 && f.wait_seconds > 0;
}

int Run(const Flags& f) {
  const char* socket = std::getenv("KOROVOD_SOCKET");
  if (socket == nullptr) {
    std::printf("%s korovod-chaos-trainer: KOROVOD_SOCKET is not set\n", Now().c_str());
    return 2;
  }
  auto client = Client::Connect(socket, 30s);
  if (!client.ok()) {
    std::printf("%s trainer: cannot connect to %s: %s\n", Now().c_str(), socket,
                client.status().ToString().c_str());
    return 2;
  }
  if (f.allocation_timeout_seconds > 0) {
    (*client)->set_allocation_timeout(std::chrono::seconds(f.allocation_timeout_seconds));
  }
  const int rank = (*client)->rank(), n = (*client)->size();
  const float want = n * (n + 1) / 2.0f;
  std::vector<float> in, out;
  for (int step = 0; step < f.steps; ++step) {
    const double mib = f.mib + step * f.grow_mib;
    const int64_t count = static_cast<int64_t>(mib * (1 << 20) / sizeof(float));
    in.assign(static_cast<size_t>(count), static_cast<float>(rank + 1));
    out.assign(static_cast<size_t>(count), 0.0f);
    const auto start = std::chrono::steady_clock::now();
    // One name for every step, as a training loop's gradient would have.
    auto h = (*client)->Allreduce(in.data(), out.data(), DataType::kFloat32, {count},
                                  {.name = "chaos_allreduce"});
    Status s = h.ok() ? h->Wait(Deadline::After(std::chrono::seconds(f.wait_seconds))) : h.status();
    if (!s.ok()) {
      std::printf("%s trainer rank %d/%d step %d failed: %s\n", Now().c_str(), rank, n, step,
                  s.ToString().c_str());
      std::fflush(stdout);
      // The client's destructor waits for ops in flight; an op that timed out in this trainer
      // may still be with the sidecar, so leave without it (what a crashing trainer does).
      std::_Exit(3);
    }
    for (int64_t i = 0; i < count; ++i) {
      if (out[static_cast<size_t>(i)] != want) {
        std::printf("%s trainer rank %d/%d step %d: element %lld is %g, expected %g\n",
                    Now().c_str(), rank, n, step, static_cast<long long>(i),
                    out[static_cast<size_t>(i)], want);
        std::fflush(stdout);
        std::_Exit(1);
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s trainer rank %d/%d step %d ok (%lld bytes, %.3f s)\n", Now().c_str(), rank, n,
                step, static_cast<long long>(count * 4), secs);
    std::fflush(stdout);
    if (f.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.pause_ms));
  }
  std::printf("%s trainer rank %d/%d done: %d steps ok\n", Now().c_str(), rank, n, f.steps);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main(int argc, char** argv) {
  korovod::sidecar::Flags f;
  if (!korovod::sidecar::ParseFlags(argc, argv, f)) {
    std::fprintf(stderr,
                 "usage: korovod-chaos-trainer [--steps N] [--mib M] [--grow-mib G] "
                 "[--wait-seconds W] [--pause-ms P] [--allocation-timeout-seconds A]\n");
    return 2;
  }
  return korovod::sidecar::Run(f);
}
