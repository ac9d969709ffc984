// What the elastic membership server (elastic_rendezvous.cc), its client (elastic_client.cc) and
// the frame parsers (elastic_frames.cc) share: the word and number rules of the frames' first
// lines, and the bounds on what one side accepts from the other.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace korovod::elastic_wire {

inline constexpr uint32_t kMaxRegistration = 64 << 10;
inline constexpr uint32_t kMaxAnswer = 64 << 20;
// A write to, or a read from, one connection (a handshake, a request, an answer).
inline constexpr auto kPerConnection = std::chrono::milliseconds(5000);
// The longest a query may be held (a long poll); a longer wait asked for is cut to this.
inline constexpr auto kMaxQueryWait = std::chrono::milliseconds(30000);

// "key=value key=value" (the first line of a frame) into a map; words without '=' are ignored.
std::map<std::string, std::string> Fields(std::string_view line);
// A decimal of at most 19 digits.
bool ParseU64(const std::string& s, uint64_t* out);
// A worker id is one word of printable ASCII (it travels inside "key=value" lines).
bool ValidWorkerId(const std::string& id);
std::string Seconds(std::chrono::milliseconds d);

}  // namespace korovod::elastic_wire
