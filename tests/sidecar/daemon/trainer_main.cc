// korovod-test-trainer: a minimal trainer for tests that start real sidecars outside GoogleTest
// (tests/netns/sidecar_preflight.sh). Connects to the sidecar at $KOROVOD_SOCKET, runs a float32
// allreduce of 1000003 elements and an uneven int32 allgather, checks both results exactly, and
// prints one line:
//   trainer rank R/N ok
// Exit status: 0 ok, 1 a wrong result, 2 an error (printed).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "sidecar/client/client.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;

int Run() {
  const char* socket = std::getenv("KOROVOD_SOCKET");
  if (socket == nullptr) {
    std::fprintf(stderr, "korovod-test-trainer: KOROVOD_SOCKET is not set\n");
    return 2;
  }
  auto client = Client::Connect(socket, 30s);
  if (!client.ok()) {
    std::fprintf(stderr, "korovod-test-trainer: %s\n", client.status().ToString().c_str());
    return 2;
  }
  const int rank = (*client)->rank(), n = (*client)->size();
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "trainer rank %d: %s\n", rank, s.ToString().c_str());
    return 2;
  };
  // Allreduce: every element sums to 1 + 2 + ... + n.
  constexpr int64_t kCount = 1000003;
  std::vector<float> in(kCount, static_cast<float>(rank + 1)), out(kCount, 0);
  auto h = (*client)->Allreduce(in.data(), out.data(), DataType::kFloat32, {kCount},
                                {.name = "trainer_allreduce"});
  if (!h.ok()) return fail(h.status());
  if (Status s = h->Wait(Deadline::After(60s)); !s.ok()) return fail(s);
  const float want = n * (n + 1) / 2.0f;
  for (float v : out) {
    if (v != want) {
      std::printf("trainer rank %d/%d: allreduce gave %g, expected %g\n", rank, n, v, want);
      return 1;
    }
  }
  // Allgather: rank r contributes r + 1 rows of value r.
  std::vector<int32_t> rows(rank + 1, rank);
  auto g = (*client)->Allgather(rows.data(), DataType::kInt32, {rank + 1},
                                {.name = "trainer_allgather"});
  if (!g.ok()) return fail(g.status());
  if (Status s = g->Wait(Deadline::After(60s)); !s.ok()) return fail(s);
  const auto* p = reinterpret_cast<const int32_t*>(g->output().data());
  size_t i = 0;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k <= r; ++k, ++i) {
      if (i * 4 >= g->output().size() || p[i] != r) {
        std::printf("trainer rank %d/%d: allgather row %zu is wrong\n", rank, n, i);
        return 1;
      }
    }
  }
  std::printf("trainer rank %d/%d ok\n", rank, n);
  return 0;
}

}  // namespace
}  // namespace korovod::sidecar

int main() { return korovod::sidecar::Run(); }
