// Writes the seed corpus (tests/fuzz/corpus/<target>/): a few small valid inputs per target, made
// with the project's own encoders so that they follow the formats as they change. Run from the
// fuzz build: build-fuzz/bin/make_fuzz_corpus tests/fuzz/corpus
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/negotiation_messages.h"
#include "runtime/transport/handshake.h"
#include "sidecar/arena/arena_layout.h"
#include "sidecar/arena/memory_fd_message.h"

using namespace korovod;
using namespace korovod::sidecar;

namespace {

std::string g_root;

void Put(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

template <typename T>
std::string Bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof v);
}

std::string Frame(char type, const std::string& text) {
  std::string out(1, type);
  const uint32_t n = htobe32(static_cast<uint32_t>(text.size()));
  out += Bytes(n) + text;
  return out;
}

void ArenaRecords() {
  const std::string sizes("\x0f\x00\x0f\x00", 4);  // 16-page heaps
  SubmissionRecord r;
  std::memset(&r, 0, sizeof r);
  r.op_id = 7;
  r.kind = RecordKind::kOp;
  r.op_type = RecordOpType::kAllreduce;
  r.dtype = DataType::kFloat32;
  r.ndims = 2;
  r.dims[0] = 3;
  r.dims[1] = 4;
  r.prescale = r.postscale = 1.0;
  r.input_offset = 0;
  r.input_bytes = 48;
  r.output_offset = 64;
  r.output_bytes = 48;
  (void)SetName(r, "grad.layer1");
  Put("arena_record", "allreduce", std::string(1, '\0') + sizes + Bytes(r));
  r.op_type = RecordOpType::kAlltoall;
  r.num_splits = 2;
  r.splits[0] = 1;
  r.splits[1] = 2;
  r.output_bytes = 0;
  r.output_offset = 0;
  r.flags = kSubmitOutputInResultHeap;
  Put("arena_record", "alltoall", std::string(1, '\0') + sizes + Bytes(r));
  SubmissionRecord rel;
  std::memset(&rel, 0, sizeof rel);
  rel.kind = RecordKind::kReleaseResult;
  rel.output_offset = 128;
  Put("arena_record", "release", std::string(1, '\0') + sizes + Bytes(rel));
  CompletionRecord c;
  std::memset(&c, 0, sizeof c);
  c.op_id = 7;
  c.ndims = 1;
  c.dims[0] = 12;
  c.output_offset = 64;
  c.output_bytes = 48;
  SetStatus(c, InvalidArgument("a reason"));
  Put("arena_record", "completion", std::string(1, '\2') + sizes + Bytes(c));
}

void OpQueue() {
  // capacity 4, head 0, tail 0; push, push, pop, the peer rewrites head, pop, close.
  Put("op_queue", "steps",
      std::string("\x02\0\0\0\0\0\0\0\0\x03\x03\x05\x00\x05\0\0\0\x05\x02\x01\0\0\0", 24));
}

void Negotiation() {
  Request a;
  a.name = "grad.w";
  a.shape = {3, 4};
  Request b;
  b.type = OpType::kAllgather;
  b.name = "gather.x";
  b.dtype = DataType::kInt64;
  b.shape = {2, 5};
  Request c;
  c.type = OpType::kBroadcast;
  c.name = "bcast.y";
  c.root = 1;
  c.shape = {7};
  Request g1 = a, g2 = a;
  g1.name = "g.0";
  g2.name = "g.1";
  g1.group = g2.group = "g.0+2";
  g1.group_size = g2.group_size = 2;
  Request j;
  j.type = OpType::kJoin;
  j.name = "join";
  Put("negotiation", "requests", std::string(1, '\x05') + EncodeRequests({a, b, c}));
  Put("negotiation", "group", std::string(1, '\x01') + EncodeRequests({g1, g2, j}));
  ResponseList list;
  Response r;
  r.type = OpType::kAllgather;
  r.name = "gather.x";
  r.dtype = DataType::kInt64;
  r.shape = {5};
  r.first_dims = {2, 3};
  list.responses.push_back(r);
  Response e;
  e.name = "bad";
  e.error = "tensor \"bad\": mismatched shape";
  list.responses.push_back(e);
  list.tuning = TunableParams{};
  Put("negotiation", "responses", std::string(1, '\x81') + EncodeResponses(list));
}

void Handshake() {
  Hello h{};
  std::memcpy(h.magic, "KVRD", 4);
  h.version = kHandshakeProtocolVersion;
  h.from = 1;
  h.to = 0;
  h.stream = 0;
  h.world = 2;
  h.epoch = 0;
  Put("handshake", "hello", std::string(1, '\0') + Bytes(h) + std::string(32, '\0'));
  // The dialer's side: a challenge (epoch, nonce, proof) and a verdict.
  Put("handshake", "challenge", std::string(1, '\1') + std::string(4 + 32 + 32, '\0') + "\1");
}

void Frames() {
  Put("rendezvous_frame", "registration",
      std::string(1, '\x10') + Frame('R', "rank=1 host=h1 port=29500 addr=eth0/10.0.0.2"));
  Put("rendezvous_frame", "table_query",
      std::string(1, '\x10') + Frame('T', "rank=0 host=h0 port=1 addr=127.0.0.1\n") +
          Frame('Q', "since=3"));
}

void Elastic() {
  Put("elastic_frames", "registration",
      std::string(1, '\0') +
          "worker=h0/0 epoch=1\nrank=0 host=h0 port=29500 addr=eth0/10.0.0.1 node=h0");
  Put("elastic_frames", "query", std::string("\x01since=2", 8));
  Put("elastic_frames", "assignment",
      "\x02"
      "epoch=2 rank=1 size=2 version=5\n"
      "rank=0 host=h0 port=29500 addr=eth0/10.0.0.1 node=h0\n"
      "rank=1 host=h1 port=29500 addr=10.0.0.2 node=h1\n");
  Put("elastic_frames", "version", "\x03version=5 epoch=2 update=1\nh1/0\n");
}

void WorldTable() {
  Put("world_table", "two_ranks",
      "\x02# a world file\n"
      "rank=0 host=h0 port=29500 addr=eth0/10.0.0.1 addr=lo/127.0.0.1\n"
      "rank=1 host=h1 port=29501 addr=eth0/10.0.0.2 node=h0\n");
  Put("world_table", "rank_line", "\x80rank=3 host=h3 port=1 addr=h3.example node=n");
}

void PeerMeshControl() {
  struct Header {
    uint32_t magic, type, len;
  };
  const std::string reason = "rank 1 (10.0.0.2:5000) gave up: out of memory";
  Put("peer_mesh_control", "abort",
      Bytes(Header{0x5443564b, 2, static_cast<uint32_t>(reason.size())}) + reason);
  Put("peer_mesh_control", "goodbye", Bytes(Header{0x5443564b, 1, 0}));
  Put("peer_mesh_control", "partial", Bytes(Header{0x5443564b, 2, 100}).substr(0, 7));
}

void GrpcControl() {
  // Protobuf wire format by hand: field 1 varint, repeated packed int32, string.
  Put("grpc_control", "hello", std::string("\x00\x08\x01\x10\x7b", 5));
  Put("grpc_control", "add_set", std::string("\x0b\x0a\x03\x00\x01\x02", 6));
  Put("grpc_control", "timeline", std::string("\x13\x0a\x13/tmp/tl.{rank}.json\x10\x01", 24));
  Put("grpc_control", "shutdown",
      std::string("\x20\x0a\x04"
                  "done",
                  7));
}

void Timeline() {
  const std::string rank0 =
      "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"rank 0\"}},\n"
      "{\"name\":\"korovod_clock\",\"ph\":\"M\",\"pid\":0,\"args\":{\"rank\":0,"
      "\"clock_offset_us\":0.000}},\n"
      "{\"ph\":\"M\",\"pid\":0,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"g\"}},\n"
      "{\"ph\":\"B\",\"pid\":0,\"tid\":1,\"ts\":10.5,\"name\":\"NEGOTIATE_ALLREDUCE\"},\n"
      "{\"ph\":\"E\",\"pid\":0,\"tid\":1,\"ts\":12.0}\n]\n";
  const std::string rank1_killed =
      "[\n{\"name\":\"korovod_clock\",\"ph\":\"M\",\"pid\":1,\"args\":{\"rank\":1,"
      "\"clock_offset_us\":-3.250}},\n"
      "{\"ph\":\"i\",\"pid\":1,\"tid\":2,\"ts\":11,\"s\":\"t\",\"name\":\"READY rank 1\"},";
  Put("timeline_merge", "one_rank", rank0);
  Put("timeline_merge", "two_ranks", rank0 + "\xff" + rank1_killed);
}

}  // namespace

// Memory channel messages: the first byte is the number of descriptors attached.
void MemoryFdMessages() {
  MemoryFdMessage m;
  m.exports.push_back(MemoryExport{1, {2 << 20}});
  m.exports.push_back(MemoryExport{2, {20 << 20, 20 << 20, 20 << 20}});
  auto bytes = EncodeMemoryFdMessage(m);
  Put("memory_fd_message", "two_exports",
      std::string(1, '\4') +
          std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
  const MemoryFdReply reply = EncodeMemoryFdReply(InvalidArgument("bad magic"));
  Put("memory_fd_message", "reply", std::string(1, '\0') + Bytes(reply));
}

int main(int argc, char** argv) {
  g_root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  ::mkdir(g_root.c_str(), 0755);
  ArenaRecords();
  OpQueue();
  Negotiation();
  Handshake();
  Frames();
  Elastic();
  WorldTable();
  PeerMeshControl();
  GrpcControl();
  Timeline();
  MemoryFdMessages();
  return 0;
}
