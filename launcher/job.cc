#include "launcher/job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "common/deadline.h"
#include "common/env_names.h"
#include "common/log.h"
#include "launcher/child_process.h"
#include "launcher/elastic_hosts.h"
#include "launcher/environment.h"
#include "launcher/job_key.h"
#include "launcher/listeners.h"
#include "launcher/local_host.h"
#include "launcher/output_pump.h"
#include "launcher/run_dir.h"
#include "launcher/shm_cleanup.h"
#include "launcher/sidecar_log.h"
#include "launcher/signal_pipe.h"
#include "runtime/transport/socket.h"
#include "runtime/world/elastic_rendezvous.h"

namespace korovod::launcher {
namespace {

using std::chrono::milliseconds;

// How often a pending sidecar socket is looked for.
constexpr int kSocketCheckMs = 20;
// Elastic jobs: how often the discovery script runs and the workers are checked, and how long one
// run of the script may take.
constexpr milliseconds kDiscoveryInterval{1000};
constexpr milliseconds kDiscoveryTimeout{10000};
constexpr int kElasticTickMs = 100;
// korovodrun's own below --min-np deadline runs this much past the membership server's.
constexpr milliseconds kServerFirst{2000};

milliseconds SecondsToMs(double s) {
  return milliseconds(static_cast<long>(std::llround(s * 1000)));
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// korovodrun starts workers on this machine only: a discovered host must be one of its names.
StatusOr<std::vector<HostSlots>> LocalHostsOnly(StatusOr<std::vector<HostSlots>> hosts) {
  if (!hosts.ok()) return hosts;
  for (const HostSlots& h : *hosts) {
    if (!IsLocalHost(h.host)) {
      return InvalidArgument("discovered host " + h.host +
                             " is not this machine (korovodrun starts workers on this machine "
                             "only; use the operator for multi-host jobs)");
    }
  }
  return hosts;
}

struct Pipe {
  Fd read;
  Fd write;
};

StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(StatusCode::kInternal, "pipe2", errno);
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

enum class Role { kSidecar, kTrainer };
const char* RoleName(Role r) { return r == Role::kSidecar ? "sidecar" : "trainer"; }

// One rank (elastic: one worker, whose rank changes with the epoch): its sidecar, its trainer, and
// what korovodrun knows about them.
struct Rank {
  RankPlacement place;
  std::string who;        // "rank 3", or "worker 127.0.0.2:0.5" (host:slot.number)
  std::string prefix;     // the trainer's output prefix: "[3] " / "[127.0.0.2:0.5] "
  std::string worker_id;  // elastic
  Slot slot;              // elastic: the host slot it occupies
  bool live = true;       // elastic: a member the membership server waits for
  bool finished = false;  // elastic: its trainer exited 0 (it stays listed: no one resets for it)
  std::string socket_path;
  int node = 0;  // the index of its (virtual) host in order of first appearance: GROUP_RANK
  std::optional<ChildProcess> sidecar;
  std::optional<ChildProcess> trainer;
  std::vector<OutputPump::StreamId> sidecar_streams;
  std::vector<OutputPump::StreamId> trainer_streams;
  std::unique_ptr<SidecarLog> log;
  Clock::time_point sidecar_started;
  bool socket_ready = false;
  bool sidecar_exit_handled = false;
  bool trainer_exit_handled = false;
};

// The state of one run of the job; Job::Run owns it for the run's duration. Members are
// destroyed in reverse order: children (killed and reaped if still there) before the run
// directory, and that before the shared-memory sweep.
class JobRun {
 public:
  JobRun(const JobConfig& config, FdWriter* out, FdWriter* err)
      : config_(config), opts_(config.options), out_(out), err_(err) {}

  int Run();

 private:
  StatusOr<std::string> SetupRun(const std::string& longest_socket);
  Status Setup();
  Status SetupElastic();
  // Elastic: rediscover hosts, drop workers whose slot went away or that the membership server
  // gave up on, start workers in free slots, tell the server who is alive, fail the job when it
  // cannot go on.
  void ElasticTick();
  Status StartWorker(const Slot& slot);
  void DropWorker(Rank& r, const std::string& why, bool failed);
  void PublishLiveWorkers();
  int LiveWorkers() const;
  std::set<Slot> OccupiedSlots() const;            // the slots of live workers
  int FreeSlotCount(Clock::time_point now) const;  // offered slots no live worker holds
  Status StartSidecar(Rank& r);
  Status StartTrainer(Rank& r);
  Status StartChild(Rank& r, Role role, ChildSpec spec);
  void Supervise();
  void ReapAndCheck();
  void OnExit(Rank& r, Role role, const ExitStatus& st);
  void CheckSockets();
  void Fail(int exit_code, const std::string& message);
  void BeginStop(int sig);
  void SignalAll(int sig);
  bool AnyChildRunning() const;
  int PollTimeoutMs() const;
  void Note(const std::string& message);  // verbose progress
  // korovodrun's own lines: through the logger, whose sink (main.cc) is err_, so they keep their
  // place among the ranks' forwarded lines.
  void Say(logging::Level level, const std::string& message) {
    logging::Log(level, logging::Subsystem::kLauncher, message);
  }

  const JobConfig& config_;
  const LauncherOptions& opts_;
  FdWriter* out_;
  FdWriter* err_;

  std::string job_id_;
  std::optional<ShmPrefixCleanup> shm_;
  std::optional<RunDir> run_dir_;
  std::string key_file_;
  std::unique_ptr<SignalPipe> signals_;
  Fd dev_null_;
  std::vector<Listener> listeners_;
  std::string peers_;
  std::string hosts_;         // each rank's (virtual) host, in rank order: KOROVOD_HOSTS
  uint16_t master_port_ = 0;  // MASTER_PORT: where rank 0's trainer may run torch's TCPStore
  OutputPump pump_;
  std::deque<Rank> ranks_;  // a deque: elastic jobs add workers while references are held

  // Elastic jobs.
  std::unique_ptr<ElasticRendezvousServer> membership_;
  std::optional<ElasticHosts> hosts_state_;
  Clock::time_point next_discovery_{};
  std::string last_discovery_error_;
  int workers_started_ = 0;
  bool trainer_succeeded_ = false;
  std::optional<Clock::time_point> short_since_;  // fewer than --min-np live workers since
  std::set<std::string> published_;               // the live set the server last heard

  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_;
  int exit_code_ = 0;
  std::optional<std::string> summary_;  // the failure line, printed last
};

void JobRun::Note(const std::string& message) {
  if (opts_.verbose) Say(logging::Level::kInfo, message);
}

// What every run has: signals, the job id, the shared-memory prefix, the run directory (checked
// to leave room for `longest_socket`, a socket file name in it), the job key file and /dev/null.
// Returns the job key.
StatusOr<std::string> JobRun::SetupRun(const std::string& longest_socket) {
  KV_ASSIGN_OR_RETURN(signals_, SignalPipe::Install());
  KV_ASSIGN_OR_RETURN(job_id_, RandomHex(6));
  shm_.emplace("/korovod-" + job_id_ + "-");
  KV_ASSIGN_OR_RETURN(RunDir dir, RunDir::Create("korovodrun-" + job_id_ + "-"));
  run_dir_.emplace(std::move(dir));
  // sockaddr_un holds 108 bytes with the terminating NUL.
  const std::string longest = run_dir_->path() + "/" + longest_socket;
  if (longest.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument("unix socket path " + longest + " is longer than " +
                           std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                           " bytes; set TMPDIR to a shorter directory");
  }
  key_file_ = run_dir_->path() + "/job.key";
  KV_ASSIGN_OR_RETURN(std::string key, RandomHex(32));
  KV_RETURN_IF_ERROR(WriteJobKeyFile(key_file_, key));
  dev_null_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null_.valid()) return ErrnoStatus(StatusCode::kInternal, "open /dev/null", errno);
  return key;
}

Status JobRun::Setup() {
  KV_RETURN_IF_ERROR(
      SetupRun("rank" + std::to_string(config_.layout.size() - 1) + ".sock").status());

  // Every listener is bound before any child exists.
  const int n = static_cast<int>(config_.layout.size());
  KV_ASSIGN_OR_RETURN(listeners_, BindLoopbackListeners(n));
  for (int i = 0; i < n; ++i) {
    if (i > 0) peers_ += ",";
    peers_ += "127.0.0.1:" + std::to_string(listeners_[static_cast<size_t>(i)].port);
    hosts_ += (i > 0 ? "," : "") + config_.layout[static_cast<size_t>(i)].host;
  }
  // torch's rendezvous store (init_process_group's env://) on rank 0's trainer: a free port now.
  // Closed before torch binds it, as torchrun's own choice is: another process could take it
  // meanwhile, and then init_process_group says so.
  KV_ASSIGN_OR_RETURN(Listener master, BindListener("127.0.0.1"));
  master_port_ = master.port;
  ranks_.resize(static_cast<size_t>(n));
  std::map<std::string, int> nodes;
  for (int i = 0; i < n; ++i) {
    Rank& r = ranks_[static_cast<size_t>(i)];
    r.place = config_.layout[static_cast<size_t>(i)];
    r.node = nodes.emplace(r.place.host, static_cast<int>(nodes.size())).first->second;
    r.socket_path = run_dir_->path() + "/rank" + std::to_string(i) + ".sock";
    r.who = "rank " + std::to_string(i);
    r.prefix = "[" + std::to_string(i) + "] ";
    r.log = std::make_unique<SidecarLog>(std::to_string(i), opts_.verbose, err_);
  }
  Note("job " + job_id_ + ": " + std::to_string(n) + " ranks, run directory " + run_dir_->path() +
       ", shared memory prefix " + shm_->prefix() + ", peers " + peers_);
  return OkStatus();
}

Status JobRun::SetupElastic() {
  KV_ASSIGN_OR_RETURN(const std::string key, SetupRun("w999999.sock"));
  hosts_state_.emplace(opts_.blacklist_cooldown);
  if (opts_.discovery_script) {
    KV_ASSIGN_OR_RETURN(std::string out,
                        RunDiscoveryScript(*opts_.discovery_script, kDiscoveryTimeout));
    KV_ASSIGN_OR_RETURN(auto hosts,
                        LocalHostsOnly(ParseDiscoveredHosts(out, opts_.slots_per_host)));
    hosts_state_->SetDiscovered(std::move(hosts));
  } else {
    std::vector<HostSlots> fixed;
    for (const RankPlacement& p : config_.layout) {
      if (fixed.empty() || fixed.back().host != p.host) fixed.push_back({p.host, 0});
      ++fixed.back().slots;
    }
    hosts_state_->SetDiscovered(std::move(fixed));
  }
  next_discovery_ = Clock::now() + kDiscoveryInterval;

  // The membership server listens on loopback only: every worker is on this machine.
  KV_ASSIGN_OR_RETURN(Fd listener, ListenTcp("127.0.0.1", 0, 128));
  ElasticServerOptions so;
  so.job_key = key;
  so.min_workers = *opts_.min_np;
  so.max_workers = opts_.max_np.value_or(0);
  so.reset_limit = opts_.reset_limit.value_or(-1);
  so.timeout = SecondsToMs(opts_.elastic_timeout_s);
  so.listen_fd = listener.release();
  KV_ASSIGN_OR_RETURN(membership_, ElasticRendezvousServer::Start(so));
  Note("job " + job_id_ + ": elastic, " + std::to_string(*opts_.min_np) + " to " +
       (opts_.max_np ? std::to_string(*opts_.max_np) : std::string("any number of")) +
       " workers, membership server 127.0.0.1:" + std::to_string(membership_->port()) +
       ", run directory " + run_dir_->path() + ", shared memory prefix " + shm_->prefix());
  return OkStatus();
}

std::set<Slot> JobRun::OccupiedSlots() const {
  std::set<Slot> occupied;
  for (const Rank& r : ranks_) {
    if (r.live) occupied.insert(r.slot);
  }
  return occupied;
}

int JobRun::FreeSlotCount(Clock::time_point now) const {
  return static_cast<int>(hosts_state_->FreeSlots(OccupiedSlots(), 1 << 20, now).size());
}

int JobRun::LiveWorkers() const {
  int n = 0;
  for (const Rank& r : ranks_) n += r.live ? 1 : 0;
  return n;
}

void JobRun::PublishLiveWorkers() {
  std::set<std::string> live;
  for (const Rank& r : ranks_) {
    if (r.live) live.insert(r.worker_id);
  }
  if (live == published_) return;
  published_ = live;
  membership_->SetLiveWorkers(std::vector<std::string>(live.begin(), live.end()));
}

Status JobRun::StartWorker(const Slot& slot) {
  Rank& r = ranks_.emplace_back();
  const int n = workers_started_++;
  r.slot = slot;
  r.worker_id = slot.first + ":" + std::to_string(slot.second) + "." + std::to_string(n);
  r.who = "worker " + r.worker_id;
  r.prefix = "[" + r.worker_id + "] ";
  r.place.host = slot.first;
  r.socket_path = run_dir_->path() + "/w" + std::to_string(n) + ".sock";
  r.log = std::make_unique<SidecarLog>(r.worker_id, opts_.verbose, err_);
  // Listed before it can register, so that the survivors' next commit sees it coming.
  PublishLiveWorkers();
  return StartSidecar(r);
}

// Drops a worker from the membership: its processes are killed (its peers' collectives fail at
// once and they re-form without it); a failed worker's host is blacklisted.
void JobRun::DropWorker(Rank& r, const std::string& why, bool failed) {
  if (!r.live) return;
  r.live = false;
  if (r.trainer) r.trainer->Signal(SIGKILL);
  if (r.sidecar) r.sidecar->Signal(SIGKILL);
  std::string blacklist;
  if (failed) {
    const auto cooldown = hosts_state_->RecordFailure(r.slot.first, Clock::now());
    blacklist =
        "; host " + r.slot.first + " blacklisted" +
        (cooldown ? " for " + FormatSeconds(cooldown->count() / 1000.0) + " s" : std::string());
  }
  PublishLiveWorkers();
  Say(failed ? logging::Level::kWarning : logging::Level::kInfo,
      "elastic: " + r.who + " " + why + ": dropped" + blacklist + "; " +
          std::to_string(LiveWorkers()) + " workers remain");
}

void JobRun::ElasticTick() {
  const auto now = Clock::now();
  if (opts_.discovery_script && now >= next_discovery_) {
    next_discovery_ = now + kDiscoveryInterval;
    auto out = RunDiscoveryScript(*opts_.discovery_script, kDiscoveryTimeout);
    StatusOr<std::vector<HostSlots>> hosts =
        out.ok() ? LocalHostsOnly(ParseDiscoveredHosts(*out, opts_.slots_per_host))
                 : StatusOr<std::vector<HostSlots>>(out.status());
    if (hosts.ok()) {
      hosts_state_->SetDiscovered(std::move(hosts).value());
      last_discovery_error_.clear();
    } else if (hosts.status().message() != last_discovery_error_) {
      // The last good list stays in force; each new error is said once.
      last_discovery_error_ = hosts.status().message();
      Say(logging::Level::kWarning, "elastic: " + last_discovery_error_ + " (hosts unchanged)");
    }
  }
  for (Rank& r : ranks_) {
    if (r.live && !hosts_state_->Offered(r.slot, now)) {
      DropWorker(r, "lost its slot (host " + r.slot.first + " is no longer discovered)", false);
    }
  }
  for (const std::string& lost : membership_->TakeLost()) {
    for (Rank& r : ranks_) {
      if (r.worker_id == lost) {
        DropWorker(r,
                   "did not join the next epoch within " + FormatSeconds(opts_.elastic_timeout_s) +
                       " s (--elastic-timeout)",
                   true);
      }
    }
  }
  // Once a trainer has finished, training is over: nobody new is started.
  if (!trainer_succeeded_) {
    const int cap = opts_.max_np.value_or(1 << 20);
    for (const Slot& slot :
         hosts_state_->FreeSlots(OccupiedSlots(), cap - LiveWorkers(), Clock::now())) {
      Status s = StartWorker(slot);
      if (!s.ok()) {
        Fail(1, "elastic: a worker could not start on " + slot.first + ": " + s.message());
        return;
      }
    }
  }
  PublishLiveWorkers();
  if (Status f = membership_->failure(); !f.ok()) {
    Fail(1, f.message());
    return;
  }
  const int live = LiveWorkers();
  if (trainer_succeeded_ || live >= *opts_.min_np) {
    short_since_.reset();
  } else if (!opts_.discovery_script && !opts_.blacklist_cooldown && FreeSlotCount(now) == 0) {
    // A fixed pool (-H, no cooldown) with no free slot left can never offer one again (its hosts
    // only get blacklisted): waiting out --elastic-timeout would only delay the failure (a
    // script that fails on every worker would hang the job for it).
    Fail(1,
         "elastic: " + std::to_string(live) + " workers alive, at least " +
             std::to_string(*opts_.min_np) + " needed (--min-np), and no host of -H can take a " +
             "worker any more (each is blacklisted after a failure; --blacklist-cooldown-range " +
             "or --host-discovery-script would let hosts come back)");
  } else if (!short_since_) {
    short_since_ = now;
  } else if (now - *short_since_ >= SecondsToMs(opts_.elastic_timeout_s) + kServerFirst) {
    // The server's wait for the same shortage ends first when workers wait in it, and its
    // message (the one the trainers get) is then the job's; this one is for no worker left.
    Fail(1, "elastic: " + std::to_string(live) + " workers alive, at least " +
                std::to_string(*opts_.min_np) + " needed (--min-np); no slot for more within " +
                FormatSeconds(opts_.elastic_timeout_s) + " s (--elastic-timeout)");
  }
}

void SetRankVars(Environment& env, const std::string& prefix, const RankPlacement& p) {
  env.Set(prefix + "RANK", std::to_string(p.rank));
  env.Set(prefix + "SIZE", std::to_string(p.size));
  env.Set(prefix + "LOCAL_RANK", std::to_string(p.local_rank));
  env.Set(prefix + "LOCAL_SIZE", std::to_string(p.local_size));
  env.Set(prefix + "CROSS_RANK", std::to_string(p.cross_rank));
  env.Set(prefix + "CROSS_SIZE", std::to_string(p.cross_size));
}

// torchrun's variables, so that init_process_group(backend) with env:// finds the job's world; a
// variable the user set is left as it is.
void SetTorchrunVars(Environment& env, const RankPlacement& p, int node, uint16_t master_port) {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(p.rank)},
      {"WORLD_SIZE", std::to_string(p.size)},
      {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(p.local_size)},
      {"GROUP_RANK", std::to_string(node)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", std::to_string(master_port)}};
  for (const auto& [name, value] : vars) {
    if (env.Find(name) == nullptr) env.Set(name, value);
  }
}

Status JobRun::StartChild(Rank& r, Role role, ChildSpec spec) {
  KV_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  KV_ASSIGN_OR_RETURN(Pipe err, MakePipe());
  spec.stdin_fd = dev_null_.get();
  spec.stdout_fd = out.write.get();
  spec.stderr_fd = err.write.get();
  spec.die_with_parent = true;
  KV_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Start(spec));
  out.write.Reset();
  err.write.Reset();

  std::vector<OutputPump::StreamId>& ids =
      role == Role::kSidecar ? r.sidecar_streams : r.trainer_streams;
  if (role == Role::kSidecar) {
    SidecarLog* log = r.log.get();
    for (Pipe* p : {&out, &err}) {
      KV_ASSIGN_OR_RETURN(
          OutputPump::StreamId id,
          pump_.Add(std::move(p->read), [log](std::string_view line) { log->OnLine(line); }));
      ids.push_back(id);
    }
    r.sidecar = std::move(child);
  } else {
    const std::string prefix = r.prefix;
    FdWriter* stdout_writer = out_;
    FdWriter* stderr_writer = err_;
    KV_ASSIGN_OR_RETURN(
        OutputPump::StreamId out_id,
        pump_.Add(std::move(out.read), [stdout_writer, prefix](std::string_view line) {
          stdout_writer->Line(prefix, line);
        }));
    KV_ASSIGN_OR_RETURN(
        OutputPump::StreamId err_id,
        pump_.Add(std::move(err.read), [stderr_writer, prefix](std::string_view line) {
          stderr_writer->Line(prefix, line);
        }));
    ids = {out_id, err_id};
    r.trainer = std::move(child);
  }
  return OkStatus();
}

Status JobRun::StartSidecar(Rank& r) {
  Environment env = Environment::FromCurrentProcess();
  ChildSpec spec;
  Listener* listener = nullptr;  // static jobs: the rank's pre-bound data listener
  if (membership_ != nullptr) {
    // Elastic: the membership server places the worker in each epoch.
    env.Set(env::kElasticRendezvous, "127.0.0.1:" + std::to_string(membership_->port()));
    env.Set(env::kWorkerId, r.worker_id);
    env.Set(env::kHostName, r.slot.first);  // -H / discovered virtual hosts share memory inside
    env.Set(env::kElasticTimeoutSeconds,
            std::to_string(std::max<long>(1, std::lround(opts_.elastic_timeout_s))));
  } else {
    listener = &listeners_[static_cast<size_t>(r.place.rank)];
    SetRankVars(env, "KOROVOD_", r.place);
    env.Set(env::kListenFd, std::to_string(listener->fd.get()));
    env.Set(env::kPeers, peers_);
    env.Set(env::kHosts, hosts_);  // -H's (virtual) hosts: shared memory inside, TCP between
    spec.inherit_fds = {listener->fd.get()};
  }
  env.Set(env::kJobKeyFile, key_file_);
  env.Set(env::kSocket, r.socket_path);
  env.Set(env::kShmPrefix, shm_->prefix());
  if (opts_.timeline) env.Set(env::kTimeline, *opts_.timeline);

  spec.argv = {config_.sidecar_path};
  spec.env = env.ToStrings();
  r.sidecar_started = Clock::now();
  KV_RETURN_IF_ERROR(StartChild(r, Role::kSidecar, std::move(spec)));
  if (listener == nullptr) {
    Note(r.who + " sidecar started (pid " + std::to_string(r.sidecar->pid()) + ")");
    return OkStatus();
  }
  // The sidecar owns its listener now; korovodrun's copy would only keep the port open.
  listener->fd.Reset();
  const RankPlacement& p = r.place;
  Note("rank " + std::to_string(p.rank) + " sidecar started (pid " +
       std::to_string(r.sidecar->pid()) + ", host " + p.host + ", local rank " +
       std::to_string(p.local_rank) + "/" + std::to_string(p.local_size) + ", cross rank " +
       std::to_string(p.cross_rank) + "/" + std::to_string(p.cross_size) + ")");
  return OkStatus();
}

Status JobRun::StartTrainer(Rank& r) {
  const RankPlacement& p = r.place;
  Environment env = Environment::FromCurrentProcess();
  // What only a sidecar may use never reaches a trainer (e.g. from a korovodrun run inside a job).
  for (const char* name : {env::kListenFd, env::kPeers, env::kJobKeyFile}) {
    env.Unset(name);
  }
  if (membership_ != nullptr) {
    // Rank and size come from each epoch (hvd.rank(), hvd.size()); init waits for the epoch to
    // form, up to the elastic timeout plus the sidecar's start.
    env.Set("HOROVOD_ELASTIC", "1");
    env.Set(env::kWorkerId, r.worker_id);
    env.Set("KOROVOD_CONNECT_TIMEOUT",
            FormatSeconds(opts_.elastic_timeout_s + opts_.start_timeout_s));
  } else {
    SetRankVars(env, "KOROVOD_", p);
    SetRankVars(env, "HOROVOD_", p);
    SetTorchrunVars(env, p, r.node, master_port_);
  }
  env.Set(env::kSocket, r.socket_path);
  env.Set(env::kShmPrefix, shm_->prefix());

  ChildSpec spec;
  spec.argv = opts_.command;
  spec.env = env.ToStrings();
  KV_RETURN_IF_ERROR(StartChild(r, Role::kTrainer, std::move(spec)));
  Note(r.who + " trainer started (pid " + std::to_string(r.trainer->pid()) + ")");
  return OkStatus();
}

void JobRun::SignalAll(int sig) {
  for (Rank& r : ranks_) {
    if (r.trainer) r.trainer->Signal(sig);
    if (r.sidecar) r.sidecar->Signal(sig);
  }
}

void JobRun::BeginStop(int sig) {
  if (stopping_) return;
  stopping_ = true;
  kill_at_ = Clock::now() + SecondsToMs(opts_.grace_period_s);
  SignalAll(sig);
}

void JobRun::Fail(int exit_code, const std::string& message) {
  if (stopping_) return;  // the first failure is the one reported
  exit_code_ = exit_code;
  summary_ = message;
  BeginStop(SIGTERM);
}

bool JobRun::AnyChildRunning() const {
  for (const Rank& r : ranks_) {
    if ((r.sidecar && r.sidecar->running()) || (r.trainer && r.trainer->running())) return true;
  }
  return false;
}

void JobRun::OnExit(Rank& r, Role role, const ExitStatus& st) {
  const std::string who = r.who + " " + RoleName(role);
  // What the child wrote before it ended is all in its pipes now.
  for (OutputPump::StreamId id : role == Role::kSidecar ? r.sidecar_streams : r.trainer_streams) {
    pump_.Drain(id);
  }
  if (membership_ != nullptr && !stopping_) {
    // Elastic: a worker's end is the job's only when nobody can carry on (ElasticTick decides).
    if (!r.live) {
      Note(who + " " + st.Describe() + " (dropped)");
    } else if (role == Role::kTrainer && st.success()) {
      Note(who + " finished");
      trainer_succeeded_ = true;
      r.finished = true;
    } else {
      if (role == Role::kSidecar) r.log->PrintUnshownTail();
      DropWorker(r, RoleName(role) + std::string(" ") + st.Describe(), /*failed=*/true);
    }
    return;
  }
  if (role == Role::kTrainer) {
    if (st.success()) {
      Note(who + " finished");
    } else if (!stopping_) {
      Fail(st.signaled ? 1 : st.code, who + " " + st.Describe());
    }
    return;
  }
  // A sidecar.
  if (stopping_) {
    // Ended by our signal: expected. Anything else while stopping is only worth a note.
    bool expected = st.success() || (st.signaled && (st.signal == SIGTERM || st.signal == SIGKILL ||
                                                     st.signal == SIGINT || st.signal == SIGHUP));
    if (!expected && !summary_) {
      r.log->PrintUnshownTail();
      Say(logging::Level::kWarning, who + " " + st.Describe() + " while stopping");
    } else {
      Note(who + " " + st.Describe());
    }
    return;
  }
  if (!st.success()) {
    r.log->PrintUnshownTail();
    Fail(1, who + " " + st.Describe());
  } else if (!r.socket_ready) {
    r.log->PrintUnshownTail();
    Fail(1, who + " exited with code 0 before creating its socket " + r.socket_path);
  } else {
    Note(who + " exited with code 0");
  }
}

void JobRun::ReapAndCheck() {
  for (Rank& r : ranks_) {
    if (r.sidecar && !r.sidecar_exit_handled) {
      if (auto st = r.sidecar->Poll()) {
        r.sidecar_exit_handled = true;
        OnExit(r, Role::kSidecar, *st);
      }
    }
    if (r.trainer && !r.trainer_exit_handled) {
      if (auto st = r.trainer->Poll()) {
        r.trainer_exit_handled = true;
        OnExit(r, Role::kTrainer, *st);
      }
    }
  }
  if (stopping_) return;
  if (membership_ != nullptr) {
    // Elastic: over when no worker trains any more; it succeeded if a trainer finished.
    for (const Rank& r : ranks_) {
      if ((r.live && !r.finished) || (r.trainer && r.trainer->running())) return;
    }
    if (!trainer_succeeded_) return;  // ElasticTick starts more, or times out
    Note("every trainer finished; stopping the sidecars");
    BeginStop(SIGTERM);
    return;
  }
  bool all_trainers_ok = true;
  for (const Rank& r : ranks_) {
    const auto& st = r.trainer ? r.trainer->exit_status() : std::nullopt;
    if (!st || !st->success()) all_trainers_ok = false;
  }
  if (all_trainers_ok) {
    Note("every trainer finished; stopping the sidecars");
    BeginStop(SIGTERM);
  }
}

void JobRun::CheckSockets() {
  if (stopping_) return;
  const auto timeout = SecondsToMs(opts_.start_timeout_s);
  for (Rank& r : ranks_) {
    if (r.socket_ready || !r.sidecar || !r.sidecar->running()) continue;
    if (IsSocket(r.socket_path)) {
      r.socket_ready = true;
      Note(r.who + " sidecar socket ready after " +
           std::to_string(
               std::chrono::duration_cast<milliseconds>(Clock::now() - r.sidecar_started).count()) +
           " ms");
      Status s = StartTrainer(r);
      if (!s.ok()) {
        Fail(s.code() == StatusCode::kFailedPrecondition ? 127 : 1,
             r.who + " trainer could not start: " + s.message());
        return;
      }
    } else if (Clock::now() - r.sidecar_started >= timeout) {
      r.log->PrintUnshownTail();
      Fail(1, r.who + " sidecar did not create its socket " + r.socket_path + " within " +
                  FormatSeconds(opts_.start_timeout_s) + " s (--start-timeout)");
      return;
    }
  }
}

int JobRun::PollTimeoutMs() const {
  if (stopping_) {
    if (killed_) return 1000;
    return Deadline(kill_at_).RemainingMs(1000);
  }
  for (const Rank& r : ranks_) {
    if (!r.socket_ready && r.sidecar && r.sidecar->running()) return kSocketCheckMs;
  }
  if (membership_ != nullptr) return kElasticTickMs;
  return -1;  // a child's exit or a signal wakes the loop
}

void JobRun::Supervise() {
  std::vector<pollfd> fds;
  while (true) {
    ReapAndCheck();
    if (membership_ != nullptr && !stopping_) ElasticTick();
    CheckSockets();
    if (stopping_) {
      if (!AnyChildRunning()) break;
      if (!killed_ && Clock::now() >= kill_at_) {
        Note("grace period over; sending SIGKILL");
        SignalAll(SIGKILL);
        killed_ = true;
      }
    }
    out_->Flush();
    err_->Flush();

    fds.clear();
    fds.push_back({signals_->read_fd(), POLLIN, 0});
    pump_.AddPollFds(&fds);
    int n = ::poll(fds.data(), fds.size(), PollTimeoutMs());
    if (n < 0 && errno != EINTR) {
      Fail(1, std::string("poll failed: ") + std::strerror(errno));
      continue;
    }
    if (n <= 0) continue;
    for (int sig : signals_->Drain()) {
      if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP) continue;  // SIGCHLD: reaped above
      if (!stopping_) {
        exit_code_ = 128 + sig;
        Say(logging::Level::kWarning,
            "interrupted by " + SignalName(sig) + "; stopping every rank");
        BeginStop(sig);  // forwarded to every child's process group
      } else if (!killed_) {
        Say(logging::Level::kWarning, "second " + SignalName(sig) + "; killing every rank now");
        SignalAll(SIGKILL);
        killed_ = true;
      }
    }
    pump_.HandlePoll(fds);
  }
  pump_.FinishAll();
}

int JobRun::Run() {
  Status s = opts_.elastic() ? SetupElastic() : Setup();
  if (s.ok() && !opts_.elastic()) {
    for (Rank& r : ranks_) {
      s = StartSidecar(r);
      if (!s.ok()) {
        s = s.WithContext("rank " + std::to_string(r.place.rank) + " sidecar could not start");
        break;
      }
    }
  }
  if (!s.ok()) {
    if (signals_) {
      // Children already started are stopped the same way as after a failure.
      Fail(1, s.message());
      Supervise();
    } else {
      exit_code_ = 1;
      summary_ = s.message();
    }
  } else {
    Supervise();
  }
  out_->Flush();
  // Children are all reaped: remove what they leave behind before reporting.
  ranks_.clear();
  if (run_dir_) run_dir_->Remove();
  if (shm_) {
    auto removed = shm_->Run();
    if (!removed.empty()) {
      Note("removed " + std::to_string(removed.size()) +
           " shared-memory segment(s) left by the job");
    }
  }
  if (summary_) Say(logging::Level::kError, *summary_);
  err_->Flush();
  return exit_code_;
}

}  // namespace

int Job::Run() {
  JobRun run(config_, out_, err_);
  return run.Run();
}

}  // namespace korovod::launcher
