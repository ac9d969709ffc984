// The engine's device path (OpRequest::device >= 0) end to end on machines without a GPU: engines
// on loopback whose DeviceBackend is HostDeviceApi + HostDeviceCollectives, the same interface the
// NCCL backend serves on a GPU host. Checks what a trainer sees: exact results of fused and lone
// device allreduces (sum, average, scaling, half precision), broadcasts, process sets, device and
// host tensors never fused together, and clear errors (no backend, unsupported op, a second device,
// ranks disagreeing on CPU/GPU) that leave the engine running.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "common/data_type.h"
#include "runtime/device/host_device_api.h"
#include "runtime/device/host_device_collectives.h"
#include "tests/runtime/core/engine_harness.h"

namespace korovod::testing {
namespace {

using namespace std::chrono_literals;

// One host "device" per rank (ranks are threads of this process and share the API object).
struct Devices {
  explicit Devices(int n) : api(n, "/kvdevtest-" + std::to_string(::getpid()) + "-") {}
  DeviceBackend Backend() { return {&api, HostDeviceCollectives::Factory(&api)}; }
  HostDeviceApi api;
};

EngineWorldSpec Spec(int size, Devices* devices) {
  EngineWorldSpec s;
  s.size = size;
  s.config.stall_check = 0ms;
  if (devices != nullptr) s.device = [devices](int) { return devices->Backend(); };
  return s;
}

// A device buffer of `n` floats (host memory standing in for a GPU's), freed with the test body.
class DeviceFloats {
 public:
  DeviceFloats(HostDeviceApi& api, int device, size_t n) : api_(api), device_(device), n_(n) {
    auto p = api.Malloc(device, n * sizeof(float));
    if (p.ok()) p_ = static_cast<float*>(*p);
  }
  ~DeviceFloats() {
    if (p_ != nullptr) api_.Free(device_, p_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  HostDeviceApi& api_;
  int device_;
  size_t n_;
  float* p_ = nullptr;
};

OpRequest DeviceAllreduce(const std::string& name, const DeviceFloats& in, const DeviceFloats& out,
                          int device, ReduceOp op = ReduceOp::kSum) {
  OpRequest r;
  r.type = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kFloat32;
  r.shape = {static_cast<int64_t>(in.size())};
  r.input = in.data();
  r.output = out.data();
  r.op = op;
  r.device = device;
  return r;
}

float Value(int rank, int k, size_t i) { return static_cast<float>((rank + 1) * (k + 1) + i % 5); }

TEST(EngineDevice, ABurstOfDeviceTensorsIsOneFusedCollectiveWithExactResults) {
  constexpr int kRanks = 3, kTensors = 24;
  Devices devices(kRanks);
  EngineWorldSpec spec = Spec(kRanks, &devices);
  auto reports = RunEngineRanks(spec, [&](EngineRank& c) -> Status {
    const int dev = c.rank();
    std::vector<std::unique_ptr<DeviceFloats>> in, out;
    std::vector<OpRequest> reqs;
    for (int k = 0; k < kTensors; ++k) {
      const size_t n = 1 + 37 * k;  // odd sizes: every tensor at its own aligned offset
      in.push_back(std::make_unique<DeviceFloats>(devices.api, dev, n));
      out.push_back(std::make_unique<DeviceFloats>(devices.api, dev, n));
      for (size_t i = 0; i < n; ++i) in.back()->data()[i] = Value(c.rank(), k, i);
      reqs.push_back(DeviceAllreduce("grad." + std::to_string(k), *in.back(), *out.back(), dev,
                                     k % 2 == 0 ? ReduceOp::kSum : ReduceOp::kAverage));
      if (k % 4 == 3) {  // Horovod's prescale/postscale on some of them (a group of their own)
        reqs.back().prescale = 0.5;
        reqs.back().postscale = 4.0;
      }
    }
    const EngineStats before = c.engine().stats();
    KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs)));
    for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    const uint64_t collectives = c.engine().stats().collectives - before.collectives;
    // Sum, average, and scaled average: three kinds that cannot share a buffer.
    c.Check(collectives == 3, "expected 3 fused collectives, got " + std::to_string(collectives));
    for (int k = 0; k < kTensors; ++k) {
      for (size_t i = 0; i < in[k]->size(); ++i) {
        float sum = 0;
        for (int r = 0; r < kRanks; ++r) sum += Value(r, k, i);
        float want = k % 2 == 0 ? sum : sum / kRanks;
        if (k % 4 == 3) want *= 2.0f;  // 0.5 before, 4 after
        if (out[k]->data()[i] != want) {
          c.Fail("grad." + std::to_string(k) + "[" + std::to_string(i) +
                 "] = " + std::to_string(out[k]->data()[i]) + ", want " + std::to_string(want));
          break;
        }
      }
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, ALoneTensorIsReducedInPlaceAndHalfPrecisionIsExact) {
  constexpr int kRanks = 2;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats buf(devices.api, c.rank(), 1000);
    for (size_t i = 0; i < 1000; ++i) buf.data()[i] = Value(c.rank(), 0, i);
    KV_RETURN_IF_ERROR(RunOp(c.engine(), DeviceAllreduce("inplace", buf, buf, c.rank())));
    c.Check(buf.data()[999] == Value(0, 0, 999) + Value(1, 0, 999), "in-place sum");
    // float16 in device memory: 500 halves in the same buffer.
    auto* halves = reinterpret_cast<uint16_t*>(buf.data());
    for (int i = 0; i < 500; ++i) halves[i] = FloatToHalf(static_cast<float>(c.rank() + 1));
    OpRequest r = DeviceAllreduce("half", buf, buf, c.rank());
    r.dtype = DataType::kFloat16;
    r.shape = {500};
    KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
    c.Check(HalfToFloat(halves[499]) == 3.0f, "half sum");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, BroadcastFromEveryRootAndOnAProcessSet) {
  constexpr int kRanks = 3;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats in(devices.api, c.rank(), 64), out(devices.api, c.rank(), 64);
    for (int root = 0; root < kRanks; ++root) {
      for (int i = 0; i < 64; ++i) in.data()[i] = static_cast<float>(c.rank() * 100 + i);
      OpRequest r = DeviceAllreduce("bcast." + std::to_string(root), in, out, c.rank());
      r.type = OpType::kBroadcast;
      r.root = root;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
      c.Check(out.data()[63] == static_cast<float>(root * 100 + 63),
              "broadcast from " + std::to_string(root));
    }
    // A set of ranks 0 and 2: its own device collectives beside the world's.
    KV_ASSIGN_OR_RETURN(int set, c.engine().AddProcessSet({0, 2}, Deadline::After(60s)));
    if (c.rank() != 1) {
      for (int i = 0; i < 64; ++i) in.data()[i] = static_cast<float>(c.rank() + 1);
      OpRequest r = DeviceAllreduce("set.sum", in, out, c.rank());
      r.process_set = set;
      KV_RETURN_IF_ERROR(RunOp(c.engine(), r));
      c.Check(out.data()[0] == 1.0f + 3.0f, "process set sum: " + std::to_string(out.data()[0]));
    }
    KV_RETURN_IF_ERROR(c.engine().RemoveProcessSet(set, Deadline::After(60s)).status());
    // The world's collectives still work after the set's are gone.
    for (int i = 0; i < 64; ++i) in.data()[i] = 1.0f;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), DeviceAllreduce("after.set", in, out, c.rank())));
    c.Check(out.data()[5] == 3.0f, "world sum after the set");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, AllgatherAlltoallAndReduceScatterIntoDeviceOutputs) {
  constexpr int kRanks = 3;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    const int r = c.rank();
    // Rank r contributes r + 1 rows of 4: 6 rows in all, into an output the allocator places.
    DeviceFloats in(devices.api, r, (r + 1) * 4), out(devices.api, r, 6 * 4);
    for (int i = 0; i < (r + 1) * 4; ++i) in.data()[i] = static_cast<float>(10 * r + i / 4);
    for (int step = 0; step < 2; ++step) {  // two allgathers in one cycle are not fused
      const uint64_t before = c.engine().stats().collectives;
      std::vector<OpHandle> hs;
      for (int k = 0; k < 2; ++k) {
        OpRequest g =
            DeviceAllreduce("gather." + std::to_string(step) + std::to_string(k), in, out, r);
        g.type = OpType::kAllgather;
        g.shape = {r + 1, 4};
        g.output = nullptr;
        g.allocate = [&out](const TensorShape& shape) -> StatusOr<void*> {
          if (NumElements(shape) != 24) return InvalidArgument("unexpected output shape");
          return static_cast<void*>(out.data());
        };
        KV_ASSIGN_OR_RETURN(OpHandle h, c.engine().Submit(g));
        hs.push_back(h);
      }
      for (auto& h : hs) {
        KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
        c.Check(h.result().shape == TensorShape({6, 4}), "gathered shape");
      }
      c.Check(c.engine().stats().collectives - before == 2, "one collective per device allgather");
      // Rows in rank order: rank 0's 1 row, rank 1's 2, rank 2's 3.
      const float want[6] = {0, 10, 11, 20, 21, 22};
      for (int row = 0; row < 6; ++row) {
        c.Check(out.data()[row * 4 + 3] == want[row], "gathered row " + std::to_string(row));
      }
    }
    // Alltoall: rank r sends j + 1 rows of 2 to rank j (values 100 r + j), so rank r receives
    // r + 1 rows from each of the 3 ranks.
    DeviceFloats a2a_in(devices.api, r, 6 * 2), a2a_out(devices.api, r, 9 * 2);
    {
      int at = 0;
      for (int j = 0; j < kRanks; ++j) {
        for (int k = 0; k < (j + 1) * 2; ++k) a2a_in.data()[at++] = static_cast<float>(100 * r + j);
      }
    }
    OpRequest a2a = DeviceAllreduce("exchange", a2a_in, a2a_out, r);
    a2a.type = OpType::kAlltoall;
    a2a.shape = {6, 2};
    a2a.splits = {1, 2, 3};
    a2a.output = nullptr;
    a2a.allocate = [&a2a_out](const TensorShape& shape) -> StatusOr<void*> {
      if (NumElements(shape) > 18) return InvalidArgument("too large");
      return static_cast<void*>(a2a_out.data());
    };
    OpResult a2a_result;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), a2a, &a2a_result));
    c.Check(a2a_result.shape == TensorShape({3 * (r + 1), 2}), "alltoall shape");
    c.Check(a2a_result.received_splits == std::vector<int64_t>(3, r + 1), "received splits");
    for (int j = 0; j < kRanks; ++j) {
      c.Check(a2a_out.data()[j * (r + 1) * 2] == static_cast<float>(100 * j + r),
              "alltoall block from rank " + std::to_string(j));
    }
    // Reducescatter of 7 rows of 2 over 3 ranks: blocks of 3, 2, 2 rows.
    DeviceFloats rs_in(devices.api, r, 14), rs_out(devices.api, r, 6);
    for (int i = 0; i < 14; ++i) rs_in.data()[i] = static_cast<float>(i + r);
    OpRequest rs = DeviceAllreduce("scatter", rs_in, rs_out, r);
    rs.type = OpType::kReduceScatter;
    rs.shape = {7, 2};
    KV_RETURN_IF_ERROR(RunOp(c.engine(), rs));
    const int first_row = r == 0 ? 0 : (r == 1 ? 3 : 5);
    const int rows = r == 0 ? 3 : 2;
    for (int i = 0; i < rows * 2; ++i) {
      const float want = 3.0f * static_cast<float>(first_row * 2 + i) + 3.0f;  // + (0+1+2)
      c.Check(rs_out.data()[i] == want, "reducescatter element " + std::to_string(i));
    }
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, HostAndDeviceTensorsOfOneGroupAreNeverFusedTogether) {
  constexpr int kRanks = 2;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats d0(devices.api, c.rank(), 100), d1(devices.api, c.rank(), 100);
    std::vector<float> h0(100, 2.0f), h1(100, 3.0f), ho0(100), ho1(100);
    for (int i = 0; i < 100; ++i) d0.data()[i] = d1.data()[i] = 5.0f;
    std::vector<OpRequest> reqs = {DeviceAllreduce("d0", d0, d0, c.rank()),
                                   DeviceAllreduce("d1", d1, d1, c.rank())};
    for (auto [name, in, out] : {std::tuple{"h0", &h0, &ho0}, std::tuple{"h1", &h1, &ho1}}) {
      OpRequest r;
      r.name = name;
      r.shape = {100};
      r.input = in->data();
      r.output = out->data();
      reqs.push_back(r);
    }
    const EngineStats before = c.engine().stats();
    KV_ASSIGN_OR_RETURN(auto handles, c.engine().SubmitGroup(std::move(reqs)));
    for (auto& h : handles) KV_RETURN_IF_ERROR(h.Wait(Deadline::After(60s)));
    const uint64_t collectives = c.engine().stats().collectives - before.collectives;
    c.Check(collectives == 2,
            "expected 2 collectives (device, host), got " + std::to_string(collectives));
    c.Check(d0.data()[99] == 10.0f && d1.data()[0] == 10.0f, "device sums");
    c.Check(ho0[0] == 4.0f && ho1[99] == 6.0f, "host sums");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, RanksDisagreeingOnCpuOrGpuFailEverywhereAndTheEngineGoesOn) {
  constexpr int kRanks = 3;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats d(devices.api, c.rank(), 10);
    std::vector<float> h(10, 1.0f), ho(10);
    OpRequest r = DeviceAllreduce("w", d, d, c.rank());
    if (c.rank() == 1) {  // rank 1 passes a CPU tensor under the same name
      r.device = -1;
      r.input = h.data();
      r.output = ho.data();
    }
    Status s = RunOp(c.engine(), r);
    c.Check(s.code() == StatusCode::kFailedPrecondition, "mismatch: " + s.ToString());
    c.Check(s.message().find("mismatched CPU/GPU device") != std::string::npos &&
                s.message().find("rank 1") != std::string::npos,
            "the error names the mismatch and the rank: " + s.ToString());
    for (int i = 0; i < 10; ++i) d.data()[i] = 1.0f;
    KV_RETURN_IF_ERROR(RunOp(c.engine(), DeviceAllreduce("w.again", d, d, c.rank())));
    c.Check(d.data()[9] == 3.0f, "the next device allreduce");
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, UnsupportedDeviceRequestsAreRefusedAtSubmit) {
  constexpr int kRanks = 2;
  Devices devices(kRanks + 1);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats a(devices.api, c.rank(), 8), other(devices.api, 2, 8);
    OpRequest barrier = DeviceAllreduce("g", a, a, c.rank());
    barrier.type = OpType::kBarrier;
    Status s = c.engine().Submit(barrier).status();
    c.Check(
        s.code() == StatusCode::kInvalidArgument &&
            s.message().find("BARRIER is not an operation on device tensors") != std::string::npos,
        "barrier: " + s.ToString());
    s = c.engine().Submit(DeviceAllreduce("far", a, a, 7)).status();
    c.Check(s.code() == StatusCode::kInvalidArgument &&
                s.message().find("3 devices visible") != std::string::npos,
            "device out of range: " + s.ToString());
    KV_RETURN_IF_ERROR(RunOp(c.engine(), DeviceAllreduce("first", a, a, c.rank())));
    s = c.engine().Submit(DeviceAllreduce("second.device", other, other, 2)).status();
    c.Check(
        s.code() == StatusCode::kInvalidArgument &&
            s.message().find("drives device " + std::to_string(c.rank())) != std::string::npos &&
            s.message().find("one device per rank") != std::string::npos,
        "second device: " + s.ToString());
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, WithoutABackendDeviceTensorsAreRefusedNamingWhy) {
  Devices devices(1);
  auto reports = RunEngineRanks(Spec(2, nullptr), [&](EngineRank& c) -> Status {
    DeviceFloats a(devices.api, 0, 8);
    Status s = c.engine().Submit(DeviceAllreduce("t", a, a, 0)).status();
    c.Check(s.code() == StatusCode::kFailedPrecondition &&
                s.message().find("tensor \"t\" on device 0: this engine has no device backend") !=
                    std::string::npos,
            s.ToString());
    return OkStatus();
  });
  ExpectEnginesOk(reports);
}

TEST(EngineDevice, AJoinedRankCannotStandInForADeviceTensor) {
  constexpr int kRanks = 2;
  Devices devices(kRanks);
  auto reports = RunEngineRanks(Spec(kRanks, &devices), [&](EngineRank& c) -> Status {
    DeviceFloats a(devices.api, c.rank(), 8);
    if (c.rank() == 1) {
      OpRequest join;
      join.type = OpType::kJoin;
      join.name = "join";
      OpHandle h;
      { KV_ASSIGN_OR_RETURN(h, c.engine().Submit(join)); }
      // Rank 0's device allreduce fails while rank 1 waits in join; then rank 0 joins too.
      return h.Wait(Deadline::After(60s));
    }
    Status s = RunOp(c.engine(), DeviceAllreduce("late", a, a, 0));
    c.Check(
        s.message().find("has joined; joined ranks cannot stand in for a device (GPU) tensor") !=
            std::string::npos,
        s.ToString());
    OpRequest join;
    join.type = OpType::kJoin;
    join.name = "join";
    return RunOp(c.engine(), join);
  });
  ExpectEnginesOk(reports);
}

}  // namespace
}  // namespace korovod::testing
