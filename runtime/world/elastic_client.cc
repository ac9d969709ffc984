// The workers' side of the elastic membership protocol (elastic_rendezvous.h): registering for
// the next epoch and asking about the membership version, with fencing (a server whose token is
// below the highest this worker met is skipped for the others its name resolves to).
#include <poll.h>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "runtime/transport/handshake.h"
#include "runtime/transport/socket.h"
#include "runtime/world/elastic_rendezvous.h"
#include "runtime/world/elastic_wire.h"
#include "runtime/world/rendezvous_frame.h"
#include "runtime/world/world_table.h"

namespace korovod {
namespace {

using elastic_wire::kMaxAnswer;
using elastic_wire::kPerConnection;
constexpr auto kConnectBound = std::chrono::milliseconds(2000);

struct Answer {
  FrameType type{};
  std::string text;
  std::string address;  // "ip:port" that answered
  std::string who;      // the server, named with that address
};

// Waits until `fd` is readable, the deadline passes or `stop` is requested (every 100 ms).
Status AwaitAnswer(int fd, Deadline deadline, const std::stop_token& stop, const std::string& who) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, std::min(100, std::max(0, deadline.RemainingMs()))) > 0) return OkStatus();
    if (stop.stop_requested()) return Aborted("the query to " + who + " was stopped");
    if (deadline.Expired()) return DeadlineExceeded(who + " did not answer before the deadline");
  }
}

// One exchange with the server `server` names: connect by `connect_by` (addresses in `avoid`
// last), name the job, prove the key, send the request, read the answer (one of `accepted` frame
// types) by `deadline`.
StatusOr<Answer> Exchange(const PeerAddress& server, const std::string& key, FrameType type,
                          const std::string& request, const std::string& accepted,
                          Deadline connect_by, Deadline deadline,
                          const std::set<std::string>& avoid, const std::stop_token& stop) {
  KV_ASSIGN_OR_RETURN(Fd fd, ConnectTcpAny(server, connect_by, avoid));
  Answer a;
  a.address = SocketIp(fd.get(), /*local=*/false) + ":" + std::to_string(server.port);
  a.who = "the elastic rendezvous server at " + server.ToString() +
          (a.address.rfind(server.host + ":", 0) == 0 ? "" : " (" + a.address + ")");
  const Deadline step = deadline.Sooner(kPerConnection);
  KV_RETURN_IF_ERROR(DialJobPreamble(fd.get(), ElasticJobId(key), step, a.who));
  KV_RETURN_IF_ERROR(DialHandshake(fd.get(), key, -1, 0, kRendezvousStream, 0, 0, step, a.who));
  KV_RETURN_IF_ERROR(WriteFrame(fd.get(), type, request, step, a.who));
  if (stop.stop_possible()) KV_RETURN_IF_ERROR(AwaitAnswer(fd.get(), deadline, stop, a.who));
  KV_ASSIGN_OR_RETURN(a.text, ReadFrame(fd.get(), accepted, kMaxAnswer, deadline, a.who, &a.type));
  return a;
}

// Somewhere in [d/2, d]: clients that were refused together do not come back together.
std::chrono::milliseconds Jitter(std::chrono::milliseconds d) {
  thread_local std::minstd_rand random(std::random_device{}());
  const auto half = std::max<int64_t>(1, d.count() / 2);
  return std::chrono::milliseconds(half + static_cast<int64_t>(random() % half));
}

// Why a server with a lower fencing token is skipped.
std::string Fenced(const std::string& who, uint64_t token, uint64_t min_token) {
  return who + " answers with fencing token " + std::to_string(token) + ", below the token " +
         std::to_string(min_token) +
         " this worker met: it is a deposed operator leader's; trying the other addresses";
}

uint64_t FencedToken(const std::string& text) {
  uint64_t token = 0;
  const auto fields = elastic_wire::Fields(text);
  if (auto it = fields.find("token"); it != fields.end()) {
    (void)elastic_wire::ParseU64(it->second, &token);
  }
  return token;
}

}  // namespace

StatusOr<ElasticAssignment> JoinElasticEpoch(const ElasticJoinOptions& o) {
  if (!elastic_wire::ValidWorkerId(o.worker)) {
    return InvalidArgument("elastic: worker id \"" + o.worker +
                           "\" must be one word of printable characters without '='");
  }
  const Deadline deadline = Deadline::After(o.timeout);
  const std::string server = "the elastic rendezvous server at " + o.server.ToString();
  const std::string me = "worker " + o.worker;
  const std::string registration = "worker=" + o.worker + " epoch=" + std::to_string(o.last_epoch) +
                                   " fence=" + std::to_string(o.min_token) + "\n" +
                                   FormatRankLine(0, o.self);
  static constexpr char kNoAttempt[] = "no attempt finished";
  std::string last_error = kNoAttempt;
  std::set<std::string> avoid;  // deposed leaders' servers
  auto backoff = std::chrono::milliseconds(50);
  // Whole milliseconds left: an attempt with less could only time out (and would spin).
  while (deadline.RemainingMs() > 0) {
    auto a = Exchange(o.server, o.job_key, FrameType::kRegistration, registration, "TEF", deadline,
                      deadline, avoid, std::stop_token());
    if (!a.ok() && a.status().code() == StatusCode::kPermissionDenied) {
      return a.status().WithContext(me);
    }
    if (a.ok() && a->type == FrameType::kRefusal) return FailedPrecondition(me + ": " + a->text);
    if (a.ok() && a->type == FrameType::kFenced) {
      avoid.insert(a->address);
      last_error = Fenced(a->who, FencedToken(a->text), o.min_token);
    } else if (a.ok()) {
      auto assignment = ParseElasticAssignment(a->text, me, a->who);
      if (!assignment.ok() || assignment->token >= o.min_token) return assignment;
      avoid.insert(a->address);
      last_error = Fenced(a->who, assignment->token, o.min_token);
    } else if (a.status().code() != StatusCode::kDeadlineExceeded || last_error == kNoAttempt) {
      // An attempt cut short by the deadline says less than the answer before it.
      last_error = a.status().message();
    }
    std::this_thread::sleep_for(
        std::min(backoff, std::chrono::milliseconds(deadline.RemainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return DeadlineExceeded(me + ": no epoch from " + server + " within " +
                          elastic_wire::Seconds(o.timeout) + ": " + last_error);
}

StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            uint64_t since, Deadline deadline) {
  MembershipQuery q;
  q.since = since;
  return QueryMembership(server, job_key, q, deadline);
}

StatusOr<MembershipVersion> QueryMembership(const PeerAddress& server, const std::string& job_key,
                                            const MembershipQuery& q, Deadline deadline) {
  const std::string request =
      "since=" + std::to_string(q.since) + " seen=" + std::to_string(q.seen) +
      " wait=" + std::to_string(q.wait.count()) + " fence=" + std::to_string(q.min_token);
  std::set<std::string> avoid;
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    // A long poll waits for its answer, not for a server to come up: a stop request is looked at
    // only once the request is out.
    const Deadline connect_by = q.wait.count() > 0 ? deadline.Sooner(kConnectBound) : deadline;
    auto exchanged = Exchange(server, job_key, FrameType::kQuery, request, "VF", connect_by,
                              deadline, avoid, q.stop);
    if (!exchanged.ok()) {
      // Closed or reset before an answer (a listener over its handshakes in flight, as when a
      // whole job asks at once, closes the rest unread): asked again while time is left.
      if (exchanged.status().code() != StatusCode::kUnavailable ||
          deadline.RemainingMs() <= backoff.count() || q.stop.stop_requested()) {
        return exchanged.status();
      }
      std::this_thread::sleep_for(Jitter(backoff));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
      continue;
    }
    Answer a = std::move(exchanged).value();
    uint64_t token = 0;
    if (a.type == FrameType::kVersion) {
      KV_ASSIGN_OR_RETURN(MembershipVersion v, ParseMembershipVersion(a.text, a.who));
      if (v.token >= q.min_token) return v;
      token = v.token;
    } else {
      token = FencedToken(a.text);
    }
    avoid.insert(a.address);
    const std::string why = Fenced(a.who, token, q.min_token);
    if (deadline.RemainingMs() <= backoff.count()) return Unavailable(why);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace korovod
