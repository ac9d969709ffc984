// JobReconciler, elastic jobs (spec.elastic): the world follows the live pods, nothing restarts.
// The operator's membership server (manager/elastic_servers.h) forms each epoch from the pods
// this reconcile calls live (ReconcileResult::elastic); the sidecars of the survivors and
// newcomers join it when their trainers reset. Here: keep spec.replicas pods (replacements take
// fresh indices, so they never wait for a lost pod's name), delete pods on unready nodes and pods
// the server gave up on, count failed pods against backoffLimit (disruptions, deletions and lost
// nodes are not failures), report the membership. The job succeeds once a worker succeeded and
// none runs any more.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "common/rfc3339.h"
#include "operator/api/conditions.h"
#include "operator/controller/child_names.h"
#include "operator/controller/job_key_secret.h"
#include "operator/controller/job_reconciler.h"
#include "operator/controller/json_access.h"
#include "operator/controller/reasons.h"
#include "operator/controller/worker_pod_builder.h"

namespace korovod::k8s_operator::internal {

std::string JobReconciler::WorkerId(const WorkerPodState& s) { return s.name + "." + s.uid; }

// Why a member left the world, from its pod.
std::string JobReconciler::LeaveCause(const std::string& id,
                                      const std::map<std::string, std::string>& why) {
  auto it = why.find(id);
  return it != why.end() ? it->second : "worker pod " + PodOfId(id) + " is gone";
}

std::optional<std::string> JobReconciler::ElasticJobKey() const {
  const json* secret = FindByName(observed_.secrets, JobKeySecretName(job_));
  if (secret == nullptr) return std::nullopt;
  auto key = Base64Decode(StringAt(*secret, {"data", std::string(kJobKeySecretKey)}));
  if (!key.ok() || key->empty()) return std::nullopt;
  return std::move(key).value();
}

void JobReconciler::ReconcileElastic() {
  const ElasticSpec& spec = *job_.spec.elastic;
  const auto& server = observed_.elastic_server;
  if (settings_.elastic_rendezvous_host.empty()) {
    Finish(JobPhase::kFailed, kReasonElasticFailed,
           "spec.elastic needs the operator's membership server, and this operator runs "
           "without --elastic-rendezvous-host (the address its workers dial; the Helm chart "
           "sets it to the operator pod's IP)");
    return;
  }
  ElasticStatus& es = status_.elastic ? *status_.elastic : status_.elastic.emplace();
  ElasticPods e;
  CollectElasticPods(e);
  member_ids_ = MemberIds(job_, es, e.pods);
  ClassifyElasticPods(e);
  CountRecordedEnds(e);
  status_.restart_count = std::max(status_.restart_count, e.failures);

  if (server && !server->failure.empty()) {
    for (const json* pod : e.present) DeletePod(*pod, "the elastic job failed");
    Finish(JobPhase::kFailed, kReasonElasticFailed, server->failure);
    return;
  }
  const int64_t limit = job_.spec.run_policy.backoff_limit;
  if (e.failures > limit) {
    for (const json* pod : e.present) DeletePod(*pod, "backoffLimit exceeded");
    Finish(JobPhase::kFailed, kReasonBackoffLimitExceeded,
           e.first_failure + "; " + std::to_string(e.failures) +
               " worker pods failed, more than backoffLimit " + std::to_string(limit) +
               " (disrupted, deleted and lost workers are not counted)");
    return;
  }
  if (server) {
    es.rendezvous_port = server->port;
    if (server->epoch != es.epoch && server->epoch > 0) RecordMembership(e, es);
  }
  status_.world_size = static_cast<int64_t>(member_ids_.size());
  ReportElasticWorkers(e.pods);

  if (!e.first_success.empty()) {
    // Horovod's rule: once a worker finished, nobody new starts; done when none runs.
    if (e.present.empty()) {
      Finish(JobPhase::kSucceeded, kReasonAllWorkersSucceeded,
             "worker pod " + e.first_success + " succeeded and no worker runs any more (" +
                 std::to_string(status_.succeeded_workers) + " succeeded)");
      return;
    }
  } else if (server && key_ready_) {
    ScaleElastic(e.present, e.names);
  }
  DirectElasticServer(e, es);
  if (es.epoch > 0 && e.running >= spec.min_replicas) {
    status_.phase = JobPhase::kRunning;
    Mark(kConditionRunning, true, kReasonAllWorkersRunning,
         "membership epoch " + std::to_string(es.epoch) + " trains on " +
             std::to_string(member_ids_.size()) + " workers");
  }
  // WorkersNotStarting over the pods that count toward spec.replicas (a replacement's index
  // may lie above it).
  current_.clear();
  const std::set<const json*> counted(e.present.begin(), e.present.end());
  for (const auto& [s, pod] : e.pods) {
    if (counted.count(pod) != 0) current_.emplace(*s.index, std::make_pair(s, pod));
  }
  ReportNotStarting();
  RequeueForDeadline();
}

// This generation's pods by index; pods of another (before a suspend) are deleted.
void JobReconciler::CollectElasticPods(ElasticPods& e) {
  for (const json& pod : pods_) {
    WorkerPodState s = ObserveWorkerPod(pod, trainer_container_);
    e.names.insert(s.name);
    if (status_.epoch > 0 && s.epoch == status_.epoch && s.index) {
      e.pods.emplace_back(std::move(s), &pod);
    } else {
      DeletePod(pod, "not a worker of generation " + std::to_string(status_.epoch));
    }
  }
  std::sort(e.pods.begin(), e.pods.end(),
            [](const auto& a, const auto& b) { return *a.first.index < *b.first.index; });
}

// Counts the pods, records the ended ones (finishedRanks), deletes those that left the world
// (on an unready node, given up on by the server) and says why each left; the rest are present
// (they count toward spec.replicas), and live when running.
void JobReconciler::ClassifyElasticPods(ElasticPods& e) {
  const auto& server = observed_.elastic_server;
  const std::set<std::string> given_up =
      server ? std::set<std::string>(server->lost.begin(), server->lost.end())
             : std::set<std::string>();
  status_.ready_workers = status_.active_workers = 0;
  status_.succeeded_workers = status_.failed_workers = 0;
  for (const auto& [s, pod] : e.pods) {
    const std::string id = WorkerId(s);
    const std::string node = StringAt(*pod, {"spec", "nodeName"});
    std::string& why = e.gone_why[id];
    if (s.ready) ++status_.ready_workers;
    finished_.Observe(*s.index, s);
    if (s.outcome == WorkerOutcome::kSucceeded) {
      ++status_.succeeded_workers;
      if (e.first_success.empty()) e.first_success = s.name;
      why = "worker pod " + s.name + " finished";
    } else if (s.outcome == WorkerOutcome::kFailed) {
      ++status_.failed_workers;
      if (s.disrupted) {
        why = "worker pod " + s.name + " was disrupted (" + s.disruption + ")";
      } else if (s.terminating) {
        why = "worker pod " + s.name + " was deleted";
      } else {
        // Kept (for its logs and this count): a failure of the job's own, against backoffLimit.
        ++e.failures;
        why = "worker pod " + s.name + " failed: " + s.cause;
        if (e.first_failure.empty()) e.first_failure = why;
      }
    } else if (s.terminating) {
      ++status_.active_workers;
      why = "worker pod " + s.name +
            (s.disrupted ? " was disrupted (" + s.disruption + ")"
                         : std::string(" is being deleted"));
      DeletePod(*pod, "leaving the elastic world");  // forces it when stuck
    } else if (!node.empty() && observed_.unready_nodes.count(node) != 0) {
      ++status_.active_workers;
      why = "worker pod " + s.name + " is on node " + node + ", which is not Ready";
      if (deleted_.count("Pod/" + s.name) == 0) {
        Event(kEventWarning, kReasonWorkerLost,
              why + ": the world goes on without it and a replacement is created");
      }
      DeletePod(*pod, "its node " + node + " is not Ready");
    } else if (given_up.count(id) != 0) {
      ++status_.active_workers;
      why = "worker pod " + s.name + " did not join an epoch within " +
            "spec.elastic.timeoutSeconds (" + std::to_string(job_.spec.elastic->timeout_seconds) +
            "s)";
      Event(kEventWarning, kReasonWorkerLost, why + ": deleted, a replacement follows");
      DeletePod(*pod, "it did not join an epoch in time");
    } else {
      ++status_.active_workers;
      e.gone_why.erase(id);
      e.present.push_back(pod);
      if (s.running) {
        e.live.push_back(id);
        ++e.running;
      }
    }
  }
}

// Ended workers whose pods are gone since (PodGC, a removed node) keep counting: a success
// still means training is over, a failure still counts against backoffLimit.
void JobReconciler::CountRecordedEnds(ElasticPods& e) {
  std::set<int64_t> observed_indices;
  for (const auto& [s, pod] : e.pods) observed_indices.insert(*s.index);
  int64_t recorded_failures = 0;
  for (const auto& [index, o] : finished_.ranks()) {
    if (o.state == WorkerState::kFailed && o.reason == kFinishedError) ++recorded_failures;
    if (observed_indices.count(index) != 0) continue;
    if (o.state == WorkerState::kSucceeded) {
      ++status_.succeeded_workers;
      if (e.first_success.empty()) e.first_success = WorkerPodName(job_, index);
    } else {
      ++status_.failed_workers;
      if (e.first_failure.empty() && o.reason == kFinishedError) e.first_failure = o.message;
    }
  }
  e.failures = std::max(e.failures, recorded_failures);
}

// The first 16 of `names` joined by `sep`, then how many more: the event of a 4096-worker epoch
// (or of 1000 workers leaving at once) stays readable and far under an Event's size limit.
namespace {

std::string NameTheFirst(const std::vector<std::string>& names, const std::string& sep) {
  constexpr size_t kNamed = 16;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kNamed; ++i) out += (i == 0 ? "" : sep) + names[i];
  if (names.size() > kNamed) out += " and " + std::to_string(names.size() - kNamed) + " more";
  return out;
}

}  // namespace

// The server formed a new epoch: status.elastic follows, and an event says who left (and why)
// and who joined.
void JobReconciler::RecordMembership(const ElasticPods& e, ElasticStatus& es) {
  const auto& server = *observed_.elastic_server;
  std::vector<std::string> left, joined;
  const std::set<std::string> before(member_ids_.begin(), member_ids_.end());
  const std::set<std::string> after(server.members.begin(), server.members.end());
  for (const std::string& id : member_ids_) {
    if (after.count(id) == 0) left.push_back(LeaveCause(id, e.gone_why));
  }
  for (const std::string& id : server.members) {
    if (before.count(id) == 0) joined.push_back(PodOfId(id));
  }
  es.epoch = server.epoch;
  es.resets = server.resets;
  es.version = static_cast<int64_t>(server.formed_version);
  SetMembers(job_, server.members, e.pods, es);
  member_ids_ = server.members;
  std::vector<std::string> ranks;
  for (const std::string& id : member_ids_) ranks.push_back(PodOfId(id));
  std::string message = "membership epoch " + std::to_string(es.epoch) + ": " +
                        std::to_string(member_ids_.size()) + " workers (" +
                        NameTheFirst(ranks, ", ") + ")";
  if (!left.empty()) message += "; left: " + NameTheFirst(left, "; ");
  if (!joined.empty() && es.resets > 0) {  // not the first epoch
    message += "; joined: " + NameTheFirst(joined, ", ");
  }
  Event(kEventNormal, kReasonMembershipChanged, message);
}

// What the job needs of its membership server (ReconcileResult::elastic), once its key exists.
void JobReconciler::DirectElasticServer(const ElasticPods& e, const ElasticStatus& es) {
  const ElasticSpec& spec = *job_.spec.elastic;
  std::optional<std::string> key = ElasticJobKey();
  if (!key) {
    Requeue(out_, 1);  // the key Secret is on its way
    return;
  }
  ElasticDirective d;
  d.job_key = *key;
  d.min_workers = spec.min_replicas;
  d.max_workers = MaxReplicas(spec, job_.spec.replicas);
  d.timeout_seconds = spec.timeout_seconds;
  d.reset_limit = spec.reset_limit.value_or(-1);
  d.live = e.live;
  std::sort(d.live.begin(), d.live.end());
  d.port = static_cast<int>(es.rendezvous_port);
  d.resume_epoch = es.epoch;
  d.resume_members = member_ids_;
  d.resume_resets = es.resets;
  d.resume_version = static_cast<uint64_t>(es.version);
  out_.elastic = std::move(d);
  if (!observed_.elastic_server) Requeue(out_, 1);  // its server starts after this reconcile
}

// Creates pods up to spec.replicas (at the lowest indices no pod object holds) or deletes the
// highest-indexed ones down to it.
void JobReconciler::ScaleElastic(const std::vector<const json*>& present,
                                 const std::set<std::string>& names) {
  const int64_t want = job_.spec.replicas;
  const int64_t have = static_cast<int64_t>(present.size());
  if (have > want) {
    for (int64_t i = have - 1; i >= want; --i) {
      DeletePod(*present[static_cast<size_t>(i)],
                "spec.replicas is " + std::to_string(want) + ": the world shrinks");
    }
    return;
  }
  if (have == want || !pod_group_ready_) return;
  const std::string endpoint =
      settings_.elastic_rendezvous_host + ":" + std::to_string(observed_.elastic_server->port);
  int64_t created = 0;
  for (int64_t index = 0; have + created < want; ++index) {
    if (names.count(WorkerPodName(job_, index)) != 0) continue;
    Create(BuildWorkerPod(job_, index, status_.epoch, settings_, endpoint),
           "elastic worker " + std::to_string(index));
    ++created;
  }
  if (status_.start_time.empty()) status_.start_time = FormatRfc3339(now_);
  if (status_.epoch_start_time.empty()) status_.epoch_start_time = FormatRfc3339(now_);
  const std::string message = "created " + std::to_string(created) +
                              " elastic worker pods (spec.replicas " + std::to_string(want) + ", " +
                              std::to_string(have) + " present)";
  Mark(kConditionCreated, true, kReasonWorkersCreated, message);
  Event(kEventNormal, kReasonWorkersCreated, message);
}

// The members of the last membership epoch, by rank.
void JobReconciler::ReportElasticWorkers(const ObservedWorkers& pods) {
  std::map<std::string, ObservedWorkers::const_iterator> by_id;
  for (auto it = pods.begin(); it != pods.end(); ++it) by_id.emplace(WorkerId(it->first), it);
  ranks_.clear();
  for (size_t rank = 0; rank < member_ids_.size(); ++rank) {
    const std::string& id = member_ids_[rank];
    const auto found = by_id.find(id);
    const auto it = found == by_id.end() ? pods.end() : found->second;
    ranks_.push_back(it == pods.end()
                         ? WorkerStatus{static_cast<int64_t>(rank), PodOfId(id), "",
                                        WorkerState::kMissing, "", ""}
                         : WorkerStatusOf(static_cast<int64_t>(rank), it->first, *it->second));
  }
  PublishRanks();
}

}  // namespace korovod::k8s_operator::internal
