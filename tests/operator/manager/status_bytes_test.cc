// What the status writes cost at scale: a 4096-rank job starting, its ranks becoming Ready 256 per
// reconcile, sends each change to /status as the merge patch WriteJobStatus would (MergePatch of
// the status read and the new one). With every rank listed and the status PUT whole, that start
// wrote about 5 MB (20 MB at 64 per reconcile); it must stay far below.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "operator/manager/status_writer.h"
#include "tests/operator/controller/fake_cluster.h"

namespace korovod::k8s_operator {
namespace {

using nlohmann::json;

TEST(StatusBytes, A4096RankStartPatchesLittle) {
  constexpr int kRanks = 4096, kBatch = 256;
  testing::FakeCluster c(testing::MinimalJob(kRanks));
  json stored = json::object();
  size_t patched = 0, whole = 0, largest = 0, writes = 0;
  const auto write = [&] {
    const json now = c.status();
    if (now == stored) return;
    const json body = {{"metadata", {{"resourceVersion", "123456"}}},
                       {"status", MergePatch(stored, now)}};
    const size_t bytes = body.dump().size();
    patched += bytes;
    largest = std::max(largest, bytes);
    whole += now.dump().size();
    ++writes;
    stored = now;
  };
  int64_t now = 1'800'000'000;
  c.Step(now++);
  write();
  for (int ready = 0; ready < kRanks; ready += kBatch) {
    for (json& pod : c.pods()) {
      const json& index = pod["metadata"]["labels"]["korovod.dev/replica-index"];
      const int i = std::stoi(index.get<std::string>());
      if (i < ready || i >= ready + kBatch) continue;
      pod["spec"]["nodeName"] = "ip-10-0-" + std::to_string(i / 8) + ".eu-west-1.compute.internal";
      pod["status"]["phase"] = "Running";
      pod["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
    }
    c.Step(now++);
    write();
  }
  EXPECT_EQ(c.status()["rankSummary"], "Ready:0-4095");
  EXPECT_LT(patched, 1u << 20);
  EXPECT_LT(largest, 64u << 10);
  std::printf(
      "4096-rank start: %zu status writes, %zu bytes as merge patches (largest %zu), %zu "
      "as whole statuses\n",
      writes, patched, largest, whole);
}

}  // namespace
}  // namespace korovod::k8s_operator
