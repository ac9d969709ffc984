// The elastic membership frames' texts, parsed apart from the sockets (elastic_rendezvous.h), and
// the job id a connection names its job by.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <sstream>

#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/elastic_wire.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace elastic_wire {

std::map<std::string, std::string> Fields(std::string_view line) {
  std::map<std::string, std::string> out;
  std::istringstream in{std::string(line)};
  std::string word;
  while (in >> word) {
    const size_t eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::stoull(s);
  return true;
}

bool ValidWorkerId(const std::string& id) {
  return !id.empty() && id.size() <= 253 &&
         std::all_of(id.begin(), id.end(), [](char c) { return c > ' ' && c < 127 && c != '='; });
}

std::string Seconds(std::chrono::milliseconds d) {
  std::ostringstream out;
  out << d.count() / 1000.0 << " s";
  return out.str();
}

}  // namespace elastic_wire

using elastic_wire::Fields;
using elastic_wire::ParseU64;
using elastic_wire::ValidWorkerId;

std::string ElasticJobId(const std::string& job_key) {
  static constexpr char kLabel[] = "korovod elastic job id v1";
  unsigned char mac[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), job_key.data(), static_cast<int>(job_key.size()),
       reinterpret_cast<const unsigned char*>(kLabel), sizeof kLabel - 1, mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

StatusOr<ElasticRegistration> ParseElasticRegistration(std::string_view text) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  const auto worker_it = fields.find("worker");
  const auto epoch_it = fields.find("epoch");
  const auto fence_it = fields.find("fence");
  ElasticRegistration reg;
  if (worker_it == fields.end() || !ValidWorkerId(worker_it->second) || epoch_it == fields.end() ||
      !ParseU64(epoch_it->second, &reg.last_epoch) || reg.last_epoch > UINT32_MAX ||
      (fence_it != fields.end() && !ParseU64(fence_it->second, &reg.fence)) ||
      eol == std::string_view::npos) {
    return InvalidArgument(
        "malformed elastic registration (want \"worker=ID epoch=N\" and a rank line)");
  }
  reg.worker = worker_it->second;
  auto entry = ParseRankLine(text.substr(eol + 1), "worker " + reg.worker + "'s registration: ");
  if (!entry.ok()) return entry.status();
  reg.entry = std::move(entry->second);
  return reg;
}

ParsedMembershipQuery ParseMembershipQueryFields(std::string_view text) {
  ParsedMembershipQuery q;
  const auto fields = Fields(text.substr(0, text.find('\n')));
  auto get = [&](const char* k, uint64_t* v) {
    if (auto it = fields.find(k); it != fields.end() && !ParseU64(it->second, v)) *v = 0;
  };
  get("since", &q.since);
  get("seen", &q.seen);
  get("wait", &q.wait_ms);
  get("fence", &q.fence);
  return q;
}

uint64_t ParseMembershipQuery(std::string_view text) {
  return ParseMembershipQueryFields(text).since;
}

StatusOr<ElasticAssignment> ParseElasticAssignment(std::string_view text, const std::string& me,
                                                   const std::string& server) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  uint64_t epoch = 0, rank = 0, size = 0, version = 0, token = 0;
  auto get = [&](const char* k, uint64_t* v) {
    auto it = fields.find(k);
    return it != fields.end() && ParseU64(it->second, v);
  };
  const bool token_ok = fields.count("token") == 0 || get("token", &token);
  // The epoch travels as 32 bits and the size as an int everywhere after this: a larger value
  // would wrap (a negative world size), so it is refused here.
  if (eol == std::string_view::npos || !get("epoch", &epoch) || !get("rank", &rank) ||
      !get("size", &size) || !get("version", &version) || !token_ok || rank >= size ||
      size > kMaxElasticWorldSize || epoch > UINT32_MAX) {
    return InvalidArgument(me + ": " + server + " sent a malformed epoch");
  }
  ElasticAssignment a;
  a.epoch = static_cast<uint32_t>(epoch);
  a.rank = static_cast<int>(rank);
  a.size = static_cast<int>(size);
  a.version = version;
  a.token = token;
  auto table = ParseWorldTable(text.substr(eol + 1),
                               "the world table of epoch " + std::to_string(epoch), a.size);
  if (!table.ok()) return table.status().WithContext(me);
  a.table = std::move(table).value();
  return a;
}

StatusOr<MembershipVersion> ParseMembershipVersion(std::string_view text, const std::string& who) {
  const size_t eol = text.find('\n');
  const auto fields = Fields(text.substr(0, eol));
  MembershipVersion v;
  uint64_t epoch = 0, update = 0;
  auto version = fields.find("version");
  auto e = fields.find("epoch");
  auto u = fields.find("update");
  auto t = fields.find("token");
  if (version == fields.end() || e == fields.end() || u == fields.end() ||
      !ParseU64(version->second, &v.version) || !ParseU64(e->second, &epoch) ||
      !ParseU64(u->second, &update) || epoch > UINT32_MAX ||
      update > (kHostsRemoved | kHostsAdded) ||
      (t != fields.end() && !ParseU64(t->second, &v.token))) {
    return InvalidArgument(who + " sent a malformed membership version");
  }
  v.epoch = static_cast<uint32_t>(epoch);
  v.update = static_cast<int>(update);
  if (eol != std::string_view::npos) {
    std::istringstream gone{std::string(text.substr(eol + 1))};
    for (std::string id; std::getline(gone, id);) {
      if (!id.empty()) v.gone.push_back(id);
    }
  }
  return v;
}

}  // namespace korovod
