// The memory channel's messages: what the encoder writes decodes to the same exports, and every
// rule the sidecar relies on is checked on bytes it did not write.
#include "sidecar/arena/memory_fd_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>

namespace korovod::sidecar {
namespace {

MemoryFdMessage TwoExports() {
  MemoryFdMessage m;
  m.token[0] = std::byte{7};
  m.exports.push_back(MemoryExport{11, {2 << 20}});
  m.exports.push_back(MemoryExport{12, {20 << 20, 20 << 20, 4 << 20}});
  return m;
}

MemoryFdPiece PieceAt(const std::vector<std::byte>& b, size_t i) {
  MemoryFdPiece p;
  std::memcpy(&p, b.data() + sizeof(MemoryFdHeader) + i * sizeof p, sizeof p);
  return p;
}

void SetPiece(std::vector<std::byte>& b, size_t i, const MemoryFdPiece& p) {
  std::memcpy(b.data() + sizeof(MemoryFdHeader) + i * sizeof p, &p, sizeof p);
}

TEST(MemoryFdMessage, RoundTripsExportsAndTheirPiecesInOrder) {
  auto bytes = EncodeMemoryFdMessage(TwoExports());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(bytes->size(), sizeof(MemoryFdHeader) + 4 * sizeof(MemoryFdPiece));
  auto m = DecodeMemoryFdMessage(*bytes, 4);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->token, TwoExports().token);
  ASSERT_EQ(m->exports.size(), 2u);
  EXPECT_EQ(m->exports[1].export_id, 12u);
  EXPECT_EQ(m->exports[1].piece_bytes, (std::vector<uint64_t>{20 << 20, 20 << 20, 4 << 20}));
}

TEST(MemoryFdMessage, RefusesWhatBreaksARuleNamingIt) {
  const std::vector<std::byte> good = *EncodeMemoryFdMessage(TwoExports());
  struct Case {
    const char* what;
    std::function<void(std::vector<std::byte>&, size_t&)> mutate;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"short", [](auto& b, size_t&) { b.resize(10); }, "shorter than its header"},
      {"magic", [](auto& b, size_t&) { b[0] = std::byte{0}; }, "bad magic"},
      {"version", [](auto& b, size_t&) { b[4] = std::byte{9}; }, "version 9"},
      {"fewer fds", [](auto&, size_t& fds) { fds = 3; }, "4 pieces but 3 file descriptors"},
      {"no fds", [](auto&, size_t& fds) { fds = 0; }, "4 pieces but 0 file descriptors"},
      {"extra bytes", [](auto& b, size_t&) { b.push_back(std::byte{0}); }, "bytes for 4 pieces"},
      {"id 0",
       [](auto& b, size_t&) {
         auto p = PieceAt(b, 0);
         p.export_id = 0;
         SetPiece(b, 0, p);
       },
       "export id 0"},
      {"0 bytes",
       [](auto& b, size_t&) {
         auto p = PieceAt(b, 2);
         p.bytes = 0;
         SetPiece(b, 2, p);
       },
       "piece 2: 0 bytes"},
      {"out of order",
       [](auto& b, size_t&) {
         auto p1 = PieceAt(b, 1), p2 = PieceAt(b, 2);
         SetPiece(b, 1, p2);
         SetPiece(b, 2, p1);
       },
       "not consecutive from index 0"},
      {"short export",
       [](auto& b, size_t&) {
         auto p = PieceAt(b, 3);
         p.export_id = 13;
         p.index = 0;
         p.pieces = 1;
         SetPiece(b, 3, p);
       },
       "ends before its last piece"},
      {"duplicate id",
       [](auto& b, size_t&) {
         auto p = PieceAt(b, 1);
         p.export_id = 11;
         SetPiece(b, 1, p);
       },
       "export id 11 twice"},
  };
  for (const Case& c : cases) {
    std::vector<std::byte> b = good;
    size_t fds = 4;
    c.mutate(b, fds);
    auto m = DecodeMemoryFdMessage(b, fds);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_NE(m.status().message().find(c.error), std::string::npos)
        << c.what << ": " << m.status().ToString();
  }
}

TEST(MemoryFdMessage, TheEncoderRefusesMoreDescriptorsThanOneMessageCarries) {
  MemoryFdMessage m;
  m.exports.push_back(MemoryExport{1, std::vector<uint64_t>(kMaxMemoryFdsPerMessage + 1, 4096)});
  EXPECT_FALSE(EncodeMemoryFdMessage(m).ok());
  EXPECT_FALSE(EncodeMemoryFdMessage(MemoryFdMessage{}).ok());
}

TEST(MemoryFdMessage, RepliesCarryTheStatus) {
  const MemoryFdReply ok = EncodeMemoryFdReply(OkStatus());
  const MemoryFdReply bad = EncodeMemoryFdReply(PermissionDenied("wrong token"));
  auto span = [](const MemoryFdReply& r) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(&r), sizeof r);
  };
  EXPECT_TRUE(DecodeMemoryFdReply(span(ok)).ok());
  const Status s = DecodeMemoryFdReply(span(bad));
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "wrong token");
  EXPECT_FALSE(DecodeMemoryFdReply(span(ok).first(10)).ok());
}

}  // namespace
}  // namespace korovod::sidecar
