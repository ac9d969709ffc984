// The client's C function table (sidecar/client/c_api.h), as the TensorFlow op library uses it,
// through real sidecars: submissions, completion callbacks (once, on completion; at once when
// already complete; with the error when the client closes with the op in flight), outputs of a
// size known at completion, grouped allreduce, and errors as status codes with messages.
#include "sidecar/client/c_api.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sidecar/client/client.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;
using daemon_test::Job;
using daemon_test::Must;

// A completion flag the callback sets, counting its calls and the thread it ran on.
struct Done {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  std::thread::id thread;

  static void Fn(void* arg) {
    auto* d = static_cast<Done*>(arg);
    std::lock_guard<std::mutex> lock(d->mu);
    ++d->calls;
    d->thread = std::this_thread::get_id();
    d->cv.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 20s, [&] { return calls > 0; });
  }
};

KorovodOpSpec Spec(int kind, const char* name, int dtype, const std::vector<int64_t>& dims) {
  KorovodOpSpec s{};
  s.kind = kind;
  s.name = name;
  s.dtype = dtype;
  s.ndims = static_cast<int>(dims.size());
  s.dims = dims.data();
  s.prescale = 1.0;
  s.postscale = 1.0;
  return s;
}

constexpr int kFloat32 = static_cast<int>(DataType::kFloat32);

TEST(ClientCApi, OpsCompleteThroughCallbacksWithTheirOutputs) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    const KorovodClientApi* api = korovod_client_api();
    TCHECK(api->version == KOROVOD_C_API_VERSION);
    TCHECK(api->rank(client.get()) == r && api->size(client.get()) == 2);
    int code = -1;
    char err[512];

    // Allreduce into the caller's output; the callback runs once, off this thread.
    std::vector<int64_t> dims{6};
    std::vector<float> in(6, static_cast<float>(r + 1)), out(6, 0.0f);
    KorovodOpSpec s = Spec(KOROVOD_ALLREDUCE, "c.sum", kFloat32, dims);
    s.input = in.data();
    s.output = out.data();
    KorovodOp* op = api->submit(client.get(), &s, &code, err, sizeof(err));
    TCHECK(op != nullptr && code == 0);
    Done done;
    api->on_done(op, &Done::Fn, &done);
    TCHECK(done.Wait());
    TCHECK(api->status(op, err, sizeof(err)) == 0);
    for (float v : out) TCHECK(v == 3.0f);
    // Registered after completion: runs at once, on the caller's thread.
    Done late;
    api->on_done(op, &Done::Fn, &late);
    TCHECK(late.calls == 1 && late.thread == std::this_thread::get_id());
    TCHECK(done.calls == 1);
    api->release(op);

    // Allgather of uneven rows: the output's shape and bytes come with the completion.
    std::vector<int64_t> gdims{r + 1, 2};
    std::vector<float> rows(2 * (r + 1), static_cast<float>(r));
    KorovodOpSpec g = Spec(KOROVOD_ALLGATHER, "c.gather", kFloat32, gdims);
    g.input = rows.data();
    op = api->submit(client.get(), &g, &code, err, sizeof(err));
    TCHECK(op != nullptr);
    Done gd;
    api->on_done(op, &Done::Fn, &gd);
    TCHECK(gd.Wait() && api->status(op, err, sizeof(err)) == 0);
    TCHECK(api->ndims(op) == 2 && api->dims(op)[0] == 3 && api->dims(op)[1] == 2);
    uint64_t bytes = 0;
    const auto* gathered = static_cast<const float*>(api->output(op, &bytes));
    TCHECK(bytes == 6 * sizeof(float));
    const float want[] = {0, 0, 1, 1, 1, 1};
    TCHECK(std::memcmp(gathered, want, sizeof(want)) == 0);
    api->release(op);

    // Grouped allreduce: one op per tensor, each completing.
    std::vector<int64_t> d1{3}, d2{5};
    std::vector<float> a(3, 1.0f), b(5, 2.0f), oa(3), ob(5);
    KorovodOpSpec group[2] = {Spec(KOROVOD_ALLREDUCE, "c.group", kFloat32, d1),
                              Spec(KOROVOD_ALLREDUCE, nullptr, kFloat32, d2)};
    group[0].input = a.data();
    group[0].output = oa.data();
    group[1].input = b.data();
    group[1].output = ob.data();
    KorovodOp* ops[2] = {nullptr, nullptr};
    TCHECK(api->submit_grouped_allreduce(client.get(), group, 2, ops, err, sizeof(err)) == 0);
    Done g0, g1;
    api->on_done(ops[0], &Done::Fn, &g0);
    api->on_done(ops[1], &Done::Fn, &g1);
    TCHECK(g0.Wait() && g1.Wait());
    for (float v : oa) TCHECK(v == 2.0f);
    for (float v : ob) TCHECK(v == 4.0f);
    api->release(ops[0]);
    api->release(ops[1]);

    // A refused submission: a status code and a message, nothing to release.
    KorovodOpSpec bad = Spec(KOROVOD_ALLREDUCE, "c.bad", 99, dims);
    bad.input = in.data();
    bad.output = out.data();
    TCHECK(api->submit(client.get(), &bad, &code, err, sizeof(err)) == nullptr);
    TCHECK(code == KOROVOD_INVALID_ARGUMENT && std::strstr(err, "dtype") != nullptr);

    // The ranks disagree on the shape: the op completes with the error, naming the tensor.
    std::vector<int64_t> mdims{r + 2};
    std::vector<float> m(r + 2, 1.0f), mo(r + 2);
    KorovodOpSpec mm = Spec(KOROVOD_ALLREDUCE, "c.mismatch", kFloat32, mdims);
    mm.input = m.data();
    mm.output = mo.data();
    op = api->submit(client.get(), &mm, &code, err, sizeof(err));
    TCHECK(op != nullptr);
    Done md;
    api->on_done(op, &Done::Fn, &md);
    TCHECK(md.Wait());
    TCHECK(api->status(op, err, sizeof(err)) != 0 && std::strstr(err, "c.mismatch") != nullptr);
    api->release(op);

    // Closing the client with an op in flight (only rank 0 submits it): its callback runs,
    // with an error, and the op stays valid until released.
    std::vector<float> lone(4, 1.0f), lone_out(4);
    KorovodOp* pending = nullptr;
    Done pd;
    if (r == 0) {
      std::vector<int64_t> ldims{4};
      KorovodOpSpec l = Spec(KOROVOD_ALLREDUCE, "c.lone", kFloat32, ldims);
      l.input = lone.data();
      l.output = lone_out.data();
      pending = api->submit(client.get(), &l, &code, err, sizeof(err));
      TCHECK(pending != nullptr);
      api->on_done(pending, &Done::Fn, &pd);
      std::this_thread::sleep_for(200ms);
      TCHECK(pd.calls == 0);
    }
    client.reset();
    if (r == 0) {
      TCHECK(pd.calls == 1);
      TCHECK(api->status(pending, err, sizeof(err)) != 0);
      api->release(pending);
    }
  }));
}

}  // namespace
}  // namespace korovod::sidecar
