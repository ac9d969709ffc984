#include "tests/runtime/core/engine_harness.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

namespace korovod::testing {

std::vector<EngineRankReport> RunEngineRanks(const EngineWorldSpec& spec,
                                             const std::function<Status(EngineRank&)>& body) {
  std::vector<int> fds(spec.size);
  std::vector<PeerAddress> peers(spec.size);
  for (int r = 0; r < spec.size; ++r) {
    uint16_t port = 0;
    fds[r] = ListenLoopback(&port);
    peers[r] = {"127.0.0.1", port};
  }
  std::vector<EngineRankReport> reports(spec.size);
  std::vector<std::thread> threads;
  for (int r = 0; r < spec.size; ++r) {
    threads.emplace_back([&, r] {
      EngineRankReport& rep = reports[r];
      WorldOptions w;
      w.rank = r;
      w.peers = peers;
      w.listen_fd = fds[r];
      w.job_key = "engine-test-key";
      w.transport = spec.transport;
      w.connect_timeout = std::chrono::milliseconds(20000);
      w.op_timeout = std::chrono::milliseconds(60000);
      EngineConfig cfg = spec.config;
      if (spec.customize) spec.customize(r, cfg);
      w.collective_lanes = cfg.collective_lanes;  // as the sidecar does
      auto comm = Communicator::Create(w);
      if (!comm.ok()) {
        rep.start = comm.status();
        return;
      }
      auto engine =
          Engine::Start(std::move(*comm), cfg, spec.device ? spec.device(r) : DeviceBackend{});
      if (!engine.ok()) {
        rep.start = engine.status();
        return;
      }
      EngineRank ctx(r, engine->get());
      rep.body = body(ctx);
      if (spec.closing_barrier && rep.body.ok()) {
        Status b = EngineBarrier(**engine, "harness.closing");
        if (!b.ok()) ctx.Fail("closing barrier: " + b.ToString());
      }
      rep.failures = ctx.failures();
      rep.stats = (*engine)->stats();
      rep.health = (*engine)->health();
      engine->reset();
    });
  }
  for (auto& t : threads) t.join();
  return reports;
}

void ExpectEnginesOk(const std::vector<EngineRankReport>& reports) {
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_TRUE(reports[r].start.ok()) << "rank " << r << " start: " << reports[r].start.ToString();
    EXPECT_TRUE(reports[r].body.ok()) << "rank " << r << " body: " << reports[r].body.ToString();
    for (const auto& f : reports[r].failures) ADD_FAILURE() << f;
  }
}

Status RunOp(Engine& e, OpRequest r, OpResult* result) {
  KV_ASSIGN_OR_RETURN(OpHandle h, e.Submit(std::move(r)));
  Status s = h.Wait(Deadline::After(std::chrono::seconds(60)));
  if (result != nullptr && h.Poll()) *result = h.result();
  return s;
}

Status EngineBarrier(Engine& e, const std::string& name) {
  OpRequest r;
  r.type = OpType::kBarrier;
  r.name = name;
  return RunOp(e, std::move(r));
}

}  // namespace korovod::testing
