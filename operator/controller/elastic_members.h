// status.elastic's members in their compact form (worker indices by rank plus a digest of each
// pod's uid, types.h) and the worker ids ("<pod>.<uid>") the membership server speaks, which a
// new leader's server resumes from (ElasticDirective::resume_members).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "operator/api/types.h"
#include "operator/controller/worker_pod_state.h"

namespace korovod::k8s_operator {

// An elastic job's pods of the current generation, as observed, by index.
using ObservedWorkers = std::vector<std::pair<WorkerPodState, const nlohmann::json*>>;

// The id of a member whose pod is gone, or was replaced by another pod of the same index: no
// live worker has it, so the server takes the member as gone, as it was.
inline constexpr std::string_view kGoneUid = "gone";

// The members' worker ids by rank, rebuilt from the observed pods: "<pod>.<uid>" when a pod of
// the member's index is observed and its uid's digest is the member's, else "<pod>.gone".
std::vector<std::string> MemberIds(const HorovodJob& job, const ElasticStatus& es,
                                   const ObservedWorkers& pods);

// Records the server's members (worker ids by rank) in es.members and es.member_uids. The index
// comes from the observed pod of that name, else from the name ("<job>-worker-<index>"); an id
// that gives neither is not one of this job's workers and is left out.
void SetMembers(const HorovodJob& job, const std::vector<std::string>& ids,
                const ObservedWorkers& pods, ElasticStatus& es);

// The pod name in a worker id ("<pod>.<uid>"; a uid has no '.', a job name may).
std::string PodOfId(const std::string& id);

}  // namespace korovod::k8s_operator
