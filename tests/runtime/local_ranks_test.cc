// Which ranks share this machine's cores: the wait policy spins only while they fit on the cores.
// Ranks on different loopback addresses (127.0.0.1, .2, .3: korovod-bench's TCP sidecars) are
// one machine, not three hosts.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/collectives/collectives.h"
#include "tests/runtime/rank_harness.h"

namespace korovod::testing {
namespace {

void ExpectLocalRanks(bool distinct_hosts) {
  WorldSpec spec;
  spec.size = 3;
  spec.transport = TransportKind::kTcp;
  spec.distinct_loopback_hosts = distinct_hosts;
  ExpectAllRanksOk(RunThreadRanks(spec, [&](RankContext& ctx) -> Status {
    ctx.Check(ctx.comm().local_ranks() == 3, "local_ranks " +
                                                 std::to_string(ctx.comm().local_ranks()) + " on " +
                                                 ctx.comm().peer(ctx.rank()).host);
    std::vector<float> v(1000, 1.0f);
    AllreduceOptions o;
    o.input = o.output = v.data();
    o.count = v.size();
    KV_RETURN_IF_ERROR(Allreduce(ctx.comm(), o));
    ctx.Check(v[999] == 3.0f, "wrong sum");
    return OkStatus();
  }));
}

TEST(LocalRanks, OneLoopbackAddressIsOneMachine) { ExpectLocalRanks(false); }

TEST(LocalRanks, SeveralLoopbackAddressesAreStillOneMachine) { ExpectLocalRanks(true); }

}  // namespace
}  // namespace korovod::testing
