#include "operator/controller/elastic_members.h"

#include <charconv>
#include <map>
#include <optional>

#include "operator/controller/child_names.h"

namespace korovod::k8s_operator {
namespace {

std::optional<int64_t> IndexFromName(const HorovodJob& job, const std::string& pod) {
  std::string prefix = WorkerPodName(job, 0);
  prefix.pop_back();  // "<job>-worker-"
  if (pod.size() <= prefix.size() || pod.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  int64_t v = 0;
  const char* begin = pod.data() + prefix.size();
  const char* end = pod.data() + pod.size();
  const auto [stop, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || stop != end || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::string PodOfId(const std::string& id) { return id.substr(0, id.rfind('.')); }

std::vector<std::string> MemberIds(const HorovodJob& job, const ElasticStatus& es,
                                   const ObservedWorkers& pods) {
  // By index and digest: one lookup per member, so a 4096-member world costs no more than its
  // pods.
  std::map<std::pair<int64_t, std::string>, const WorkerPodState*> by_index;
  for (const auto& [s, pod] : pods) {
    if (s.index) by_index.emplace(std::make_pair(*s.index, UidDigest(s.uid)), &s);
  }
  std::vector<std::string> ids;
  ids.reserve(es.members.size());
  for (size_t rank = 0; rank < es.members.size(); ++rank) {
    const int64_t index = es.members[rank];
    const std::string digest = rank < es.member_uids.size() ? es.member_uids[rank] : "";
    const auto it = by_index.find({index, digest});
    ids.push_back(it != by_index.end() ? it->second->name + "." + it->second->uid
                                       : WorkerPodName(job, index) + "." + std::string(kGoneUid));
  }
  return ids;
}

void SetMembers(const HorovodJob& job, const std::vector<std::string>& ids,
                const ObservedWorkers& pods, ElasticStatus& es) {
  std::map<std::string, int64_t> index_of;
  for (const auto& [s, pod] : pods) {
    if (s.index) index_of[s.name] = *s.index;
  }
  es.members.clear();
  es.member_uids.clear();
  for (const std::string& id : ids) {
    const std::string name = PodOfId(id);
    const auto known = index_of.find(name);
    const std::optional<int64_t> index =
        known != index_of.end() ? std::optional<int64_t>(known->second) : IndexFromName(job, name);
    if (!index) continue;
    es.members.push_back(*index);
    es.member_uids.push_back(UidDigest(id.size() > name.size() ? id.substr(name.size() + 1) : ""));
  }
}

}  // namespace korovod::k8s_operator
