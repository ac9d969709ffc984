#include "runtime/world/world_table.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace korovod {
namespace {

constexpr size_t kMaxLineTokens = 256;
// A formatted line is rank, host, port, node and the addresses: an entry that parsed must format
// to a line that parses (a registration without node= gains one in the table).
constexpr size_t kMaxAddresses = kMaxLineTokens - 4;

bool ParseNumber(std::string_view text, long long lo, long long hi, long long* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && p == end && *out >= lo && *out <= hi;
}

// A token's value may not be empty nor contain '/' where a single name is expected.
bool IsName(std::string_view v) { return !v.empty() && v.find('/') == std::string_view::npos; }

}  // namespace

namespace {

// Parses one line; rank -1 for a line with no fields.
StatusOr<std::pair<int, RankEntry>> ParseLine(std::string line, const std::string& where) {
  if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
  std::istringstream tokens(line);
  std::string token;
  long long rank = -1, port = -1;
  RankEntry e;
  size_t count = 0;
  while (tokens >> token) {
    if (++count > kMaxLineTokens) return InvalidArgument(where + "too many fields");
    const size_t eq = token.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument(where + "\"" + token + "\" is not key=value");
    }
    const std::string key = token.substr(0, eq);
    const std::string value = token.substr(eq + 1);
    if (key == "rank") {
      if (rank >= 0) return InvalidArgument(where + "rank given twice");
      if (!ParseNumber(value, 0, 1 << 20, &rank)) {
        return InvalidArgument(where + "rank=" + value + " is not a rank number");
      }
    } else if (key == "port") {
      if (port >= 0) return InvalidArgument(where + "port given twice");
      if (!ParseNumber(value, 1, 65535, &port)) {
        return InvalidArgument(where + "port=" + value + " is not a port in [1, 65535]");
      }
    } else if (key == "host") {
      if (!e.host_name.empty()) return InvalidArgument(where + "host given twice");
      if (!IsName(value)) return InvalidArgument(where + "host=" + value + " is not a name");
      e.host_name = value;
    } else if (key == "node") {
      if (!e.node.empty()) return InvalidArgument(where + "node given twice");
      if (value.empty()) return InvalidArgument(where + "node is empty");
      e.node = value;
    } else if (key == "addr") {
      const size_t slash = value.find('/');
      CandidateAddress a;
      if (slash == std::string::npos) {
        a.host = value;
      } else {
        a.iface = value.substr(0, slash);
        a.host = value.substr(slash + 1);
      }
      if (!IsName(a.host) || (slash != std::string::npos && !IsName(a.iface))) {
        return InvalidArgument(where + "addr=" + value + " is not ADDRESS or INTERFACE/ADDRESS");
      }
      if (e.addresses.size() == kMaxAddresses) {
        return InvalidArgument(where + "more than " + std::to_string(kMaxAddresses) + " addr=");
      }
      e.addresses.push_back(std::move(a));
    } else {
      return InvalidArgument(where + "unknown key \"" + key +
                             "\" (expected rank, host, port, addr, node)");
    }
  }
  if (count == 0) return std::pair<int, RankEntry>(-1, RankEntry{});
  if (rank < 0) return InvalidArgument(where + "no rank=");
  if (e.host_name.empty()) return InvalidArgument(where + "no host=");
  if (port < 0) return InvalidArgument(where + "no port=");
  if (e.addresses.empty()) return InvalidArgument(where + "no addr=");
  if (e.node.empty()) e.node = e.host_name;
  e.port = static_cast<uint16_t>(port);
  return std::pair<int, RankEntry>(static_cast<int>(rank), std::move(e));
}

}  // namespace

StatusOr<std::pair<int, RankEntry>> ParseRankLine(std::string_view line, const std::string& where) {
  if (line.find('\n') != std::string_view::npos) return InvalidArgument(where + "several lines");
  auto parsed = ParseLine(std::string(line), where);
  if (parsed.ok() && parsed->first < 0) return InvalidArgument(where + "empty line");
  return parsed;
}

std::string FormatRankLine(int rank, const RankEntry& e) {
  std::string out =
      "rank=" + std::to_string(rank) + " host=" + e.host_name + " port=" + std::to_string(e.port);
  for (const CandidateAddress& a : e.addresses) {
    out += " addr=" + (a.iface.empty() ? a.host : a.iface + "/" + a.host);
  }
  return out + " node=" + e.node;
}

StatusOr<std::vector<RankEntry>> ParseWorldTable(std::string_view text, const std::string& source,
                                                 int expected_size) {
  // By rank, with the line that gave it. A map, not a vector sized by the largest rank seen: the
  // table may come from another process, and one line "rank=1048575" must not cost a million
  // entries.
  std::map<int, std::pair<int, RankEntry>> lines;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = source + " line " + std::to_string(line_no) + ": ";
    KV_ASSIGN_OR_RETURN(auto parsed, ParseLine(line, where));
    const int rank = parsed.first;
    if (rank < 0) continue;
    if (expected_size > 0 && rank >= expected_size) {
      return InvalidArgument(where + "rank=" + std::to_string(rank) +
                             " is outside the world of size " + std::to_string(expected_size));
    }
    const auto [it, inserted] =
        lines.emplace(rank, std::make_pair(line_no, std::move(parsed.second)));
    if (!inserted) {
      return InvalidArgument(where + "rank " + std::to_string(rank) + " is already on line " +
                             std::to_string(it->second.first));
    }
  }
  if (lines.empty()) return InvalidArgument(source + " lists no ranks");
  const int top = lines.rbegin()->first;
  int expect = 0;
  for (const auto& [rank, entry] : lines) {
    if (rank != expect) break;
    ++expect;
  }
  if (expect <= top) {
    return InvalidArgument(source + " has no line for rank " + std::to_string(expect) +
                           " (ranks 0.." + std::to_string(top) + " must each have one)");
  }
  if (expected_size > 0 && static_cast<int>(lines.size()) != expected_size) {
    return InvalidArgument(source + " lists " + std::to_string(lines.size()) +
                           " ranks but the world size is " + std::to_string(expected_size));
  }
  std::vector<RankEntry> by_rank;
  by_rank.reserve(lines.size());
  for (auto& [rank, entry] : lines) by_rank.push_back(std::move(entry.second));
  return by_rank;
}

StatusOr<std::vector<RankEntry>> ReadWorldFile(const std::string& path, int expected_size) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("world file " + path + " cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseWorldTable(ss.str(), "world file " + path, expected_size);
}

std::string FormatWorldTable(const std::vector<RankEntry>& ranks) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r)
    out += FormatRankLine(static_cast<int>(r), ranks[r]) + "\n";
  return out;
}

bool IsLoopbackAddress(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

void ApplyLoopbackRule(std::vector<RankEntry>& ranks) {
  const bool one_node = AllOnOneNode(ranks);
  for (RankEntry& e : ranks) {
    auto is_lo = [](const CandidateAddress& a) { return IsLoopbackAddress(a.host); };
    if (one_node) {
      std::stable_partition(e.addresses.begin(), e.addresses.end(), is_lo);
    } else if (!std::all_of(e.addresses.begin(), e.addresses.end(), is_lo)) {
      std::erase_if(e.addresses, is_lo);
    }
  }
}

Status RestrictToInterface(std::vector<RankEntry>& ranks, const std::string& iface,
                           const std::string& source) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::vector<CandidateAddress>& addrs = ranks[r].addresses;
    std::string listed;
    for (const CandidateAddress& a : addrs) {
      listed += (listed.empty() ? "" : ", ") + (a.iface.empty() ? "(unnamed) " + a.host : a.iface);
    }
    std::erase_if(addrs, [&](const CandidateAddress& a) { return a.iface != iface; });
    if (addrs.empty()) {
      return InvalidArgument("KOROVOD_IFACE=" + iface + ": " + DescribeRank(ranks, r) +
                             " has no address on " + iface + " in " + source +
                             " (it lists: " + listed + ")");
    }
  }
  return OkStatus();
}

bool AllOnOneNode(const std::vector<RankEntry>& ranks) {
  for (const RankEntry& e : ranks) {
    if (e.node != ranks.front().node) return false;
  }
  return true;
}

std::vector<PeerAddress> FirstChoicePeers(const std::vector<RankEntry>& ranks) {
  std::vector<PeerAddress> peers;
  for (const RankEntry& e : ranks) {
    peers.push_back({e.addresses.empty() ? "" : e.addresses.front().host, e.port});
  }
  return peers;
}

std::string DescribeRank(const std::vector<RankEntry>& ranks, int rank) {
  std::string s = "rank " + std::to_string(rank);
  if (rank >= 0 && rank < static_cast<int>(ranks.size()))
    s += " (host " + ranks[rank].host_name + ")";
  return s;
}

}  // namespace korovod
