// Bounded-time fuzz of a real sidecar's gRPC side (deterministic seed, a few seconds): garbage,
// truncated and bogus HTTP/2 bytes on its unix socket from many connections, then randomly mutated
// serialized requests to every RPC of korovod.sidecar.v1.Sidecar as raw byte buffers. Afterwards
// the sidecar must still answer Hello (and refuse another protocol version clearly) and complete
// an allreduce with its peer.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "korovod/sidecar/v1/sidecar.grpc.pb.h"
#include "sidecar/client/client.h"
#include "sidecar/control/protocol_version.h"
#include "tests/sidecar/daemon/sidecar_test_job.h"

namespace korovod::sidecar {
namespace {

using namespace std::chrono_literals;
using daemon_test::Job;
using daemon_test::Must;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 0x6b6f726f766f64;  // "korovod"
// Each phase stops early when its budget is spent (sanitizer builds are slower), so the test is
// bounded in time; in a Release build every phase runs all its rounds.
constexpr auto kPhaseBudget = 4s;

std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// ---- (a) raw bytes on the socket ----

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, const std::string& payload,
                  uint32_t claimed_length) {
  std::string f;
  f.push_back(static_cast<char>((claimed_length >> 16) & 0xff));
  f.push_back(static_cast<char>((claimed_length >> 8) & 0xff));
  f.push_back(static_cast<char>(claimed_length & 0xff));
  f.push_back(static_cast<char>(type));
  f.push_back(static_cast<char>(flags));
  for (int shift = 24; shift >= 0; shift -= 8) f.push_back(static_cast<char>(stream >> shift));
  return f + payload;
}

// What one connection writes: garbage, a truncated preface, bogus frames after a real preface,
// a HEADERS frame of random HPACK plus a gRPC-framed DATA frame of lies, or HTTP/1.
std::string RawConnectionBytes(std::mt19937_64& rng) {
  const std::string preface(kPreface, sizeof(kPreface) - 1);
  switch (rng() % 6) {
    case 0:
      return RandomBytes(rng, rng() % 4096);
    case 1:
      return preface.substr(0, rng() % preface.size());
    case 2: {
      std::string s = preface + Frame(4, 0, 0, "", 0);  // empty SETTINGS
      for (int i = 0, n = 1 + static_cast<int>(rng() % 6); i < n; ++i) {
        const std::string payload = RandomBytes(rng, rng() % 512);
        const uint32_t claimed =
            rng() % 2 ? static_cast<uint32_t>(payload.size()) : static_cast<uint32_t>(rng());
        s += Frame(static_cast<uint8_t>(rng() % 12), static_cast<uint8_t>(rng()),
                   static_cast<uint32_t>(rng()), payload, claimed & 0xffffff);
      }
      return s;
    }
    case 3: {
      const std::string hpack = RandomBytes(rng, 1 + rng() % 256);
      std::string grpc_message = RandomBytes(rng, rng() % 64);
      std::string prefix(5, '\0');
      prefix[0] = static_cast<char>(rng() % 3);  // compressed flag: 0, 1 (no codec), 2 (bogus)
      const uint32_t len =
          rng() % 2 ? static_cast<uint32_t>(grpc_message.size()) : static_cast<uint32_t>(rng());
      for (int i = 0; i < 4; ++i) prefix[1 + i] = static_cast<char>(len >> (24 - 8 * i));
      const std::string data = prefix + grpc_message;
      std::string s = preface + Frame(4, 0, 0, "", 0) +
                      Frame(1, 0x4, 1, hpack, static_cast<uint32_t>(hpack.size())) +
                      Frame(0, 0x1, 1, data, static_cast<uint32_t>(data.size()));
      return s.substr(0, rng() % 4 ? s.size() : rng() % s.size());  // sometimes cut short
    }
    case 4:
      return "GET /korovod.sidecar.v1.Sidecar/Hello HTTP/1.1\r\nHost: x\r\n\r\n";
    default:
      return "";  // connect and close
  }
}

void WriteRaw(const std::string& socket_path, const std::string& bytes) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TCHECK(fd >= 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket_path.c_str(), sizeof(a.sun_path) - 1);
  TCHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the sidecar may drop us mid-write: that is the point
    off += static_cast<size_t>(n);
  }
  // Let the server react (a GOAWAY, a close), then go.
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 5) > 0) {
    char buf[1024];
    (void)!::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  }
  ::close(fd);
}

void FuzzRawSocket(const std::string& socket_path) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 80;
  const auto end = Clock::now() + kPhaseBudget;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(kSeed + static_cast<uint64_t>(t));
      for (int i = 0; i < kPerThread && Clock::now() < end; ++i) {
        WriteRaw(socket_path, RawConnectionBytes(rng));
        done.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::fprintf(stderr, "fuzz: %d raw connections in %.1f s\n", done.load(),
               std::chrono::duration<double>(Clock::now() - (end - kPhaseBudget)).count());
  TCHECK(done.load() >= kThreads);
}

// ---- (b) mutated requests to every RPC ----

std::string Mutate(std::mt19937_64& rng, std::string s) {
  for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 7) {
      case 0:
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
        break;
      case 2:
        s.insert(at, RandomBytes(rng, 1 + rng() % 16));
        break;
      case 3:
        s.erase(at, rng() % 8);
        break;
      case 4:
        s.resize(at);  // truncated
        break;
      case 5:
        s.insert(at, s.substr(rng() % (s.size() + 1), rng() % 16));  // a slice again
        break;
      default:
        // A field header whose varint length claims far more than follows.
        s.insert(at, std::string("\x0a\xff\xff\xff\xff\x0f", 6));
        break;
    }
  }
  return s;
}

struct Rpc {
  std::string method;
  std::vector<std::string> seeds;  // serialized valid requests
  // Null for side-effect-free RPCs. Otherwise a request that parses is not sent (it would really
  // shut the sidecar down, write a timeline file somewhere or start a collective no peer joins):
  // only bytes that fail to decode go to these, which is the decoding under test.
  std::function<bool(const std::string&)> parses;
};

template <typename Request>
bool Parses(const std::string& bytes) {
  Request r;
  return r.ParseFromString(bytes);
}

std::vector<Rpc> Rpcs() {
  v1::HelloRequest hello;
  hello.set_protocol_version(kSidecarProtocolVersion);
  hello.set_client_pid(1);
  hello.set_client_name("fuzz");
  v1::HelloRequest newer = hello;
  newer.set_protocol_version(kSidecarProtocolVersion + 1);
  v1::AddProcessSetRequest add;
  add.add_ranks(0);
  add.add_ranks(1);
  v1::RemoveProcessSetRequest remove;
  remove.set_id(7);  // no such set: answered at once (removed = false), nothing collective
  v1::StartTimelineRequest start;
  start.set_path("/nonexistent-korovod-fuzz/timeline-{rank}.json");
  start.set_mark_cycles(true);
  v1::ShutdownRequest shutdown;
  shutdown.set_reason("fuzz");
  const std::string prefix = "/korovod.sidecar.v1.Sidecar/";
  return {
      {prefix + "Hello", {hello.SerializeAsString(), newer.SerializeAsString()}, nullptr},
      {prefix + "AddProcessSet", {add.SerializeAsString()}, Parses<v1::AddProcessSetRequest>},
      {prefix + "RemoveProcessSet", {remove.SerializeAsString()}, nullptr},
      {prefix + "StartTimeline", {start.SerializeAsString()}, Parses<v1::StartTimelineRequest>},
      {prefix + "StopTimeline", {""}, nullptr},
      {prefix + "GetStats", {""}, nullptr},
      {prefix + "Shutdown", {shutdown.SerializeAsString()}, Parses<v1::ShutdownRequest>},
  };
}

grpc::Status CallRaw(grpc::GenericStub& stub, const std::string& method, const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

void FuzzRequests(const std::string& socket_path) {
  // Parsing mutations here (the side-effect filter) would log every bad UTF-8 string.
  google::protobuf::SetLogHandler(nullptr);
  auto channel = grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  std::mt19937_64 rng(kSeed);
  const auto end = Clock::now() + kPhaseBudget;
  std::map<int, int> codes;  // grpc status code -> calls
  int sent = 0;
  for (const Rpc& rpc : Rpcs()) {
    int sent_here = 0;
    for (int attempt = 0; attempt < 4000 && sent_here < 300 && Clock::now() < end; ++attempt) {
      const std::string& seed = rpc.seeds[rng() % rpc.seeds.size()];
      const std::string bytes = rng() % 16 == 0 ? RandomBytes(rng, rng() % 256) : Mutate(rng, seed);
      if (rpc.parses && rpc.parses(bytes)) continue;
      const grpc::Status s = CallRaw(stub, rpc.method, bytes);
      ++codes[s.error_code()];
      ++sent_here;
    }
    TCHECK(sent_here > 0);
    sent += sent_here;
  }
  // (A message over gRPC's 4 MiB receive limit is left to the raw phase's DATA frames that claim
  // any length: sent through a channel, the refused bytes keep the channel's destruction waiting
  // ~10 s on flow control.)
  // A method that does not exist.
  ++codes[CallRaw(stub, "/korovod.sidecar.v1.Sidecar/NoSuchRpc", "").error_code()];
  std::string summary;
  for (auto [code, n] : codes) summary += " code" + std::to_string(code) + "=" + std::to_string(n);
  std::fprintf(stderr, "fuzz: %d mutated requests in %.1f s:%s\n", sent,
               std::chrono::duration<double>(Clock::now() - (end - kPhaseBudget)).count(),
               summary.c_str());
  // Most mutations do not decode: the sidecar answered them with an error, not a crash.
  TCHECK(codes[grpc::StatusCode::INTERNAL] + codes[grpc::StatusCode::INVALID_ARGUMENT] > 0);
}

// Hello with another protocol version: FAILED_PRECONDITION naming both versions.
void HelloWithOtherVersionIsRefused(const std::string& socket_path) {
  for (uint32_t version : {kSidecarProtocolVersion + 1, kSidecarProtocolVersion - 1}) {
    v1::HelloReply reply;
    const grpc::Status s = daemon_test::CallHello(socket_path, version, &reply);
    TCHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    TCONTAINS(s.error_message(), "version " + std::to_string(version));
    TCONTAINS(s.error_message(), "version " + std::to_string(kSidecarProtocolVersion));
  }
}

TEST(SidecarFuzzTest, GarbageAndMutatedRequestsLeaveTheSidecarServing) {
  Job job(2);
  ASSERT_TRUE(job.WaitReady());
  const auto start = Clock::now();
  // gRPC in forked processes only: the test process never initialises it before a fork.
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    if (r != 0) return;
    HelloWithOtherVersionIsRefused(job.socket(0));
    FuzzRawSocket(job.socket(0));
    FuzzRequests(job.socket(0));
    HelloWithOtherVersionIsRefused(job.socket(0));
  }));
  std::fprintf(stderr, "fuzz: %.1f s\n",
               std::chrono::duration<double>(Clock::now() - start).count());
  ASSERT_TRUE(job.Running(0)) << job.Log(0);
  // Still serving: Hello (the client's Connect), an allreduce with the peer, stats.
  EXPECT_TRUE(job.RunTrainers([&](int r) {
    auto client = Must(Client::Connect(job.socket(r), 10s));
    std::vector<float> in(256, static_cast<float>(r + 1)), out(256);
    auto h = Must(client->Allreduce(in.data(), out.data(), DataType::kFloat32, {256},
                                    {.name = "after.fuzz"}));
    TOK(h.Wait(Deadline::After(10s)));
    for (float v : out) TCHECK(v == 3.0f);
    TCHECK(Must(client->GetStats()).tensors >= 1);
  }));
  EXPECT_TRUE(job.Running(0)) << job.Log(0);
}

}  // namespace
}  // namespace korovod::sidecar
