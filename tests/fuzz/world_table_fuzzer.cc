// The world table as the rendezvous coordinator (or the elastic server) sends it, and a rank's
// registration line as the coordinator reads it. An accepted table formats and reads back to
// the same entries; the loopback and interface rules never leave an index out of range.
#include <string>
#include <string_view>

#include "runtime/world/world_table.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

namespace {

bool Same(const RankEntry& a, const RankEntry& b) {
  if (a.host_name != b.host_name || a.node != b.node || a.port != b.port ||
      a.addresses.size() != b.addresses.size()) {
    return false;
  }
  for (size_t i = 0; i < a.addresses.size(); ++i) {
    if (a.addresses[i].host != b.addresses[i].host || a.addresses[i].iface != b.addresses[i].iface)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int expected = data[0] % 5;  // 0: any size
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 0x80) != 0) {
    auto line = ParseRankLine(text, "registration: ");
    if (line.ok()) FUZZ_CHECK(line->first >= 0 && !line->second.addresses.empty());
    return 0;
  }
  auto table = ParseWorldTable(text, "fuzz table", expected);
  if (!table.ok()) return 0;
  FUZZ_CHECK(!table->empty());
  FUZZ_CHECK(expected == 0 || static_cast<int>(table->size()) == expected);
  auto again = ParseWorldTable(FormatWorldTable(*table), "formatted", expected);
  FUZZ_CHECK(again.ok() && again->size() == table->size());
  for (size_t r = 0; r < table->size(); ++r) FUZZ_CHECK(Same((*table)[r], (*again)[r]));
  std::vector<RankEntry> ranks = *table;
  ApplyLoopbackRule(ranks);
  (void)FirstChoicePeers(ranks);
  (void)DescribeRank(ranks, static_cast<int>(ranks.size()));
  (void)RestrictToInterface(ranks, "eth0", "fuzz table");
  return 0;
}
