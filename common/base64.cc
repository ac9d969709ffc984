#include "common/base64.h"

#include <array>
#include <cstdint>

namespace korovod {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Each byte's 6-bit value, or -1 for bytes outside the alphabet.
constexpr std::array<int8_t, 256> DecodeTable() {
  std::array<int8_t, 256> t{};
  for (int8_t& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kDecode = DecodeTable();

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

}  // namespace

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(in[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(in[i + 1])} << 8) |
                       uint32_t{static_cast<uint8_t>(in[i + 2])};
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(in[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<uint8_t>(in[i + 1])} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  std::string in;
  in.reserve(text.size());
  for (char c : text) {
    if (!IsSpace(c)) in.push_back(c);
  }
  if (in.size() % 4 != 0) {
    return InvalidArgument("not valid base64: " + std::to_string(in.size()) +
                           " characters, not a multiple of 4");
  }
  size_t pad = 0;
  if (!in.empty() && in.back() == '=') ++pad;
  if (pad == 1 && in[in.size() - 2] == '=') ++pad;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = in[i + k];
      int8_t d = kDecode[static_cast<unsigned char>(c)];
      if (c == '=' && last && k >= 4 - pad) d = 0;
      if (d < 0) {
        return InvalidArgument("not valid base64: '" + std::string(1, c) + "' at offset " +
                               std::to_string(i + k));
      }
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (!last || pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (!last || pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

}  // namespace korovod
