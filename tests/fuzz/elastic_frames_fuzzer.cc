// The elastic membership frames' texts: a worker's registration and a version query (read by the
// server), the server's table and version answers (read by the workers). Accepted values stay in
// the ranges the rest of the code assumes (32-bit epochs, a world size that fits an int).
#include <string>
#include <string_view>

#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/world_table.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0: {
      auto reg = ParseElasticRegistration(text);
      if (reg.ok()) {
        FUZZ_CHECK(!reg->worker.empty() && reg->last_epoch <= UINT32_MAX);
        FUZZ_CHECK(!reg->entry.addresses.empty() && reg->entry.port > 0);
        // The server sends the entry on in the table: it must read back the same.
        auto back = ParseRankLine(FormatRankLine(0, reg->entry), "again: ");
        FUZZ_CHECK(back.ok());
      }
      break;
    }
    case 1: {
      // "since seen wait fence": any text reads as numbers (0 where absent or not a number).
      const ParsedMembershipQuery q = ParseMembershipQueryFields(text);
      FUZZ_CHECK(q.since == ParseMembershipQuery(text));
      break;
    }
    case 2: {
      auto a = ParseElasticAssignment(text, "worker fuzz", "the server");
      if (a.ok()) {
        FUZZ_CHECK(a->rank >= 0 && a->rank < a->size);
        FUZZ_CHECK(static_cast<int>(a->table.size()) == a->size);
      }
      break;
    }
    default: {
      auto v = ParseMembershipVersion(text, "the server");
      if (v.ok()) FUZZ_CHECK(v->update >= 0 && v->update <= (kHostsRemoved | kHostsAdded));
      break;
    }
  }
  return 0;
}
