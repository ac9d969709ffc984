// Grouped allreduce through real sidecars: a group arrives at the engine as one group (one fused
// collective, grouping agreed across ranks), and malformed groups written straight into the arena
// get clear errors on every member while the sidecar stays up.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sidecar/arena/arena.h"
#include "sidecar/arena/op_queue.h"
#include "sidecar/client/client.h"
#include "sidecar/control/protocol_version.h"
#include "tests/sidecar/arena/protocol_test_util.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;
using daemon_test::Job;
using daemon_test::Must;

// `count` float32 tensors of rank+1+i, one group named `name`.{i}; checks the sums.
void GroupOfFloats(Client& client, const std::string& name, int count) {
  const int rank = client.rank();
  const int n = client.size();
  std::vector<std::vector<float>> in(count), out(count);
  std::vector<GroupTensor> tensors(count);
  for (int i = 0; i < count; ++i) {
    in[i].assign(10 * (i + 1), static_cast<float>(rank + 1 + i));
    out[i].assign(in[i].size(), -1.0f);
    tensors[i] = {in[i].data(), out[i].data(), {static_cast<int64_t>(in[i].size())}, ""};
  }
  auto handles = Must(client.GroupedAllreduce(tensors, DataType::kFloat32, {.name = name}));
  TCHECK(handles.size() == static_cast<size_t>(count));
  for (auto& h : handles) TOK(h.Wait(Deadline::After(10s)));
  for (int i = 0; i < count; ++i) {
    const float want = n * (n + 1) / 2.0f + static_cast<float>(n * i);
    for (float v : out[i]) TCHECK(v == want);
  }
}

class SidecarGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(SidecarGroupTest, GroupedAllreduceIsOneFusedCollectiveWithTheRightValues) {
  Job job(GetParam());
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    const EngineStats before = Must(client->GetStats());
    GroupOfFloats(*client, "fused", 8);
    const EngineStats after = Must(client->GetStats());
    // Eight small float32 tensors released together: one fusion buffer, one collective.
    if (after.collectives - before.collectives != 1 || after.tensors - before.tensors != 8) {
      std::fprintf(stderr, "rank %d: %llu collectives for %llu tensors (want 1 for 8)\n", r,
                   static_cast<unsigned long long>(after.collectives - before.collectives),
                   static_cast<unsigned long long>(after.tensors - before.tensors));
      std::_Exit(1);
    }
    // Reduce op and scaling reach every member.
    std::vector<int32_t> a(5, r), b(3, 10 * r), oa(5), ob(3);
    auto hs = Must(client->GroupedAllreduce(
        {{a.data(), oa.data(), {5}, "max.a"}, {b.data(), ob.data(), {3}, "max.b"}},
        DataType::kInt32, {.name = "max", .reduce_op = ReduceOp::kMax}));
    for (auto& h : hs) TOK(h.Wait(Deadline::After(10s)));
    const int n = client->size();
    for (int32_t v : oa) TCHECK(v == n - 1);
    for (int32_t v : ob) TCHECK(v == 10 * (n - 1));
    std::vector<double> x(4, 2.0), ox(4);
    auto hx =
        Must(client->GroupedAllreduce({{x.data(), ox.data(), {4}, "scaled"}}, DataType::kFloat64,
                                      {.name = "scaled", .postscale = 0.25}));
    TOK(hx[0].Wait(Deadline::After(10s)));
    for (double v : ox) TCHECK(v == 0.5 * n);
  }));
}

INSTANTIATE_TEST_SUITE_P(Ranks, SidecarGroupTest, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

TEST(SidecarGroupAgreement, AGroupOnOneRankAndLoneTensorsOnAnotherFailNamingTheGrouping) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    std::vector<float> a(6, 1.0f), b(6, 2.0f), oa(6), ob(6);
    std::vector<ClientHandle> hs;
    if (r == 0) {
      hs = Must(client->GroupedAllreduce(
          {{a.data(), oa.data(), {6}, "mixed.0"}, {b.data(), ob.data(), {6}, "mixed.1"}},
          DataType::kFloat32));
    } else {
      hs.push_back(Must(
          client->Allreduce(a.data(), oa.data(), DataType::kFloat32, {6}, {.name = "mixed.0"})));
      hs.push_back(Must(
          client->Allreduce(b.data(), ob.data(), DataType::kFloat32, {6}, {.name = "mixed.1"})));
    }
    // The engine saw the group as a group: the coordinator refuses the disagreement.
    for (auto& h : hs) {
      Status s = h.Wait(Deadline::After(10s));
      TCHECK(!s.ok());
      TCONTAINS(s.message(), "group");
    }
    // A mismatch inside a group names the tensor; the sidecars keep serving.
    std::vector<float> c(r + 3, 1.0f), oc(r + 3);
    auto bad = Must(client->GroupedAllreduce(
        {{a.data(), oa.data(), {6}, "m.ok"}, {c.data(), oc.data(), {r + 3}, "m.shape"}},
        DataType::kFloat32));
    Status s = bad[1].Wait(Deadline::After(10s));
    TCHECK(!s.ok());
    TCONTAINS(s.message(), "m.shape");
    (void)bad[0].Wait(Deadline::After(10s));
    GroupOfFloats(*client, "after", 3);
  }));
}

// A client that writes records straight into the arena (what a buggy or hostile trainer can do).
class RawClient {
 public:
  explicit RawClient(const std::string& socket) {
    v1::HelloReply reply;
    TCHECK(daemon_test::CallHello(socket, kSidecarProtocolVersion, &reply).ok());
    arena_ = Must(Arena::Open(reply.arena_name()));
    submissions_ = std::make_unique<SubmissionQueue>(*arena_);
    completions_ = std::make_unique<CompletionQueue>(*arena_);
  }

  void Push(const SubmissionRecord& r) { TOK(submissions_->Push(r, Deadline::After(10s))); }

  // The next `n` completions, by op id (an op id may complete more than once).
  std::multimap<uint64_t, Status> Collect(size_t n) {
    std::multimap<uint64_t, Status> out;
    while (out.size() < n) {
      CompletionRecord c;
      Status s = completions_->Pop(&c, Deadline::After(10s));
      if (!s.ok()) {
        std::fprintf(stderr, "%zu of %zu completions came (%s):\n", out.size(), n,
                     s.ToString().c_str());
        for (const auto& [id, st] : out) {
          std::fprintf(stderr, "  op %llu: %s\n", static_cast<unsigned long long>(id),
                       st.ToString().c_str());
        }
        std::_Exit(1);
      }
      out.emplace(c.op_id, StatusOf(c));
    }
    return out;
  }
  // No completion arrives within `wait`.
  bool Quiet(std::chrono::milliseconds wait) {
    CompletionRecord c;
    return completions_->Pop(&c, Deadline::After(wait)).code() == StatusCode::kDeadlineExceeded;
  }

 private:
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<SubmissionQueue> submissions_;
  std::unique_ptr<CompletionQueue> completions_;
};

// A valid 4-float allreduce record (in place at the client heap's start) of a group.
SubmissionRecord Member(uint64_t op_id, const std::string& name, uint64_t group_id,
                        uint32_t group_size) {
  SubmissionRecord r = testing::FloatSumAllreduce(op_id, {4}, 0, 0);
  r.group_id = group_id;
  r.group_size = group_size;
  TOK(SetName(r, name));
  return r;
}

// Every completion of op `id` failed and says `part`.
void ExpectFailed(const std::multimap<uint64_t, Status>& got, uint64_t id, const std::string& part,
                  size_t times = 1) {
  TCHECK(got.count(id) == times);
  auto [lo, hi] = got.equal_range(id);
  for (auto it = lo; it != hi; ++it) {
    TCHECK(!it->second.ok());
    TCONTAINS(it->second.message(), part);
  }
}

TEST(SidecarMalformedGroups, EveryMemberGetsAClearErrorAndTheSidecarStaysUp) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    if (r != 0) return;
    RawClient raw(job.socket(0));
    // Sizes disagree: both members fail, and so does the member the larger size still expected.
    raw.Push(Member(1, "a1", 1, 2));
    raw.Push(Member(2, "a2", 1, 3));
    raw.Push(Member(3, "a3", 1, 3));
    // A broadcast in a group is refused; the allreduce member fails with it.
    raw.Push(Member(4, "b1", 2, 2));
    SubmissionRecord bcast = Member(5, "b2", 2, 2);
    bcast.op_type = RecordOpType::kBroadcast;
    raw.Push(bcast);
    // The same op id twice; the same name twice (and the member after them).
    raw.Push(Member(6, "c1", 3, 2));
    raw.Push(Member(6, "c2", 3, 2));
    raw.Push(Member(7, "d", 4, 3));
    raw.Push(Member(8, "d", 4, 3));
    raw.Push(Member(9, "d9", 4, 3));
    // Members on different process sets.
    raw.Push(Member(10, "e1", 5, 2));
    SubmissionRecord other_set = Member(11, "e2", 5, 2);
    other_set.process_set = 1;
    raw.Push(other_set);
    // A group larger than the protocol allows.
    raw.Push(Member(12, "f", 6, kMaxGroupSize + 1));
    auto got = raw.Collect(13);
    const std::vector<std::pair<std::vector<uint64_t>, std::string>> want = {
        {{1, 2, 3}, "op 2 says group_size 3 where an earlier member said 2"},
        {{4}, "op 5 was refused"},
        {{4, 5}, "groups are allreduce only"},
        {{6}, "op id 6 appears twice"},
        {{7, 8, 9}, "tensor name \"d\" appears twice"},
        {{10, 11}, "op 11 is on process set 1 where an earlier member is on 0"},
        {{12}, "exceeds 65536"},
    };
    for (const auto& [ops, says] : want) {
      for (uint64_t id : ops) ExpectFailed(got, id, says, id == 6 ? 2 : 1);
    }
    TCHECK(got.begin()->second.message().find("grouped allreduce (group id 1, 2 members)") !=
           std::string::npos);
    // Incomplete groups are held up to a bound; the next one is refused at once.
    for (uint64_t g = 0; g < 1024; ++g) raw.Push(Member(1000 + g, "open", 100 + g, 2));
    raw.Push(Member(5000, "one-too-many", 99999, 2));
    ExpectFailed(raw.Collect(1), 5000, "starts a group while 1024 groups are incomplete");
    TCHECK(raw.Quiet(300ms));
    // Detaching with 1024 incomplete groups: the sidecar drops them (see its log below).
  }));
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    GroupOfFloats(*client, "after.raw", 4);
  }));
  EXPECT_NE(job.Log(0).find("incomplete grouped allreduces dropped: 1024"), std::string::npos)
      << job.Log(0);
}

}  // namespace
}  // namespace korovod::sidecar
