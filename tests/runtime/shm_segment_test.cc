// The shm transport's segments carry WorldOptions::shm_prefix, so a launcher that unlinks its
// job's prefix finds them even when a rank is killed before it unlinked its own. A segment's name
// is in /dev/shm only while the transport starts (each rank unlinks its own once every peer has
// mapped it), but the mappings keep it: the test reads them from /proc/self/maps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/collectives/collectives.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

// The shared-memory objects this process maps ("/name", without " (deleted)").
std::set<std::string> MappedShmNames() {
  std::set<std::string> names;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find("/dev/shm/");
    if (at == std::string::npos) continue;
    std::string name = line.substr(at + 8);
    name = name.substr(0, name.find(' '));
    names.insert(name);
  }
  return names;
}

TEST(ShmSegments, NamesStartWithTheWorldsShmPrefixAndAreGoneOnceConnected) {
  const std::string prefix = "/kvshmtest-" + std::to_string(::getpid()) + "-";
  WorldSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kShm;
  spec.customize = [&](WorldOptions& o) { o.shm_prefix = prefix; };
  const ThreadWorld world = RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    float v[2] = {1.0f, 2.0f};
    AllreduceOptions ar;
    ar.input = ar.output = v;
    ar.count = 2;
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), ar));
    ctx.Check(v[0] == 3.0f && v[1] == 6.0f, "allreduce over the prefixed segments");
    KV_RETURN_IF_ERROR(Barrier(ctx.comm()));  // every rank has mapped every segment
    if (ctx.rank() == 0) {
      int ours = 0;
      for (const std::string& name : MappedShmNames()) {
        if (name.rfind(prefix, 0) == 0) ++ours;
        ctx.Check(name.rfind("/korovod-" + std::to_string(::getpid()) + "-r", 0) != 0,
                  name + " is named without the prefix");
      }
      ctx.Check(ours == 3,
                "want one segment per rank named " + prefix + "..., got " + std::to_string(ours));
    }
    return Barrier(ctx.comm());
  });
  ExpectAllRanksOk(world);
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    EXPECT_NE(e.path().filename().string().rfind(prefix.substr(1), 0), 0u)
        << e.path() << " left behind";
  }
}

TEST(ShmSegments, ABadPrefixIsRefusedNamingIt) {
  WorldSpec spec;
  spec.size = 2;
  spec.transport = TransportKind::kShm;
  spec.customize = [](WorldOptions& o) { o.shm_prefix = "/job/with-slash-"; };
  const ThreadWorld world =
      RunThreadRanks(spec, [](RankContext&) -> Status { return Internal("created"); });
  for (const RankReport& r : world.reports) {
    EXPECT_FALSE(r.created) << "rank " << r.rank;
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.ToString();
    EXPECT_NE(r.status.message().find("shm_prefix \"/job/with-slash-\""), std::string::npos)
        << r.status.ToString();
  }
}

}  // namespace
}  // namespace korovod::testing
