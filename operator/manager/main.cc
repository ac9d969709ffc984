// korovod-operator: watches HorovodJobs and runs them (operator/README.md). Flags: --help.
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/http/health_server.h"
#include "common/log.h"
#include "operator/kube/api_client.h"
#include "operator/kube/event_recorder.h"
#include "operator/kube/kube_config.h"
#include "operator/kube/leader_election.h"
#include "operator/manager/ca_bundle_keeper.h"
#include "operator/manager/job_controller.h"
#include "operator/manager/operator_metrics.h"
#include "operator/manager/operator_options.h"
#include "operator/manager/webhook_certificate_setup.h"
#include "operator/webhook/webhook_server.h"

namespace korovod::k8s_operator {
namespace {

int Fail(const Status& s) {
  KV_LOG(kError, kOperator, "fatal: %s", s.ToString().c_str());
  return 1;
}

std::string DefaultIdentity() {
  char host[256] = "operator";
  ::gethostname(host, sizeof(host) - 1);
  return std::string(host) + "-" + std::to_string(::getpid());
}

int Run(const OperatorOptions& options, const sigset_t& signals) {
  StatusOr<kube::KubeConfig> config =
      options.kubeconfig.empty() ? kube::LoadDefault()
                                 : kube::LoadKubeconfig(options.kubeconfig, options.context);
  if (!config.ok()) return Fail(config.status());
  const std::string server = config->server;
  http::MetricsRegistry registry;
  auto metrics = OperatorMetrics::Create(registry);
  if (!metrics.ok()) return Fail(metrics.status());

  kube::ApiClientOptions client_options;
  client_options.qps = options.kube_api_qps;
  client_options.burst = options.kube_api_burst;
  client_options.on_rate_limit_wait =
      [wait = (*metrics)->rate_limit_wait](std::chrono::nanoseconds waited) {
        wait->Observe(std::chrono::duration<double>(waited).count());
      };
  // The job controller's writes are fenced at the wire: a leader paused (or deposed) after the
  // executor's check, while its writes waited for a token or a connection, sends none of them.
  std::unique_ptr<kube::LeaderElector> elector;  // set below with --leader-elect
  client_options.write_fence = [&elector]() -> Status {
    if (!elector || elector->HoldsLease()) return OkStatus();
    return Unavailable("not sent: this replica no longer holds the leader lease");
  };
  // The Lease has a client of its own, outside the rate limit and the fence: a renewal queued
  // behind a 1000-pod start's creates (up to (1000 - burst) / qps seconds) would miss the renew
  // deadline and depose a healthy leader. It sends one request per retry period. The webhook's
  // certificate setup and caBundle keeper use it too: every replica writes those, leader or not.
  auto lease_client = kube::ApiClient::FromConfig(*config);
  if (!lease_client.ok()) return Fail(lease_client.status());
  auto client = kube::ApiClient::FromConfig(std::move(*config), std::move(client_options));
  if (!client.ok()) return Fail(client.status());

  kube::EventRecorder recorder(**client, "korovod-operator");
  JobControllerOptions controller_options;
  controller_options.namespace_name = options.namespace_name;
  controller_options.workers = options.workers;
  controller_options.watch_timeout_seconds = options.watch_timeout_seconds;
  controller_options.settings = options.settings;
  controller_options.elastic_port = options.elastic_rendezvous_port;
  controller_options.may_write = [&elector] { return !elector || elector->HoldsLease(); };
  JobController controller(**client, recorder, **metrics, controller_options);

  // Both addresses were checked by ParseOperatorFlags.
  const HostPort metrics_at =
      *SplitHostPort("--metrics-bind-address", options.metrics_bind_address);
  http::HealthServerOptions http;
  http.host = metrics_at.host;
  http.port = metrics_at.port;
  http.registry = &registry;
  http.not_ready_reason = "informers not synced with " + server;
  OperatorMetrics* m = metrics->get();
  http.before_scrape = [m, &controller] {
    m->SetJobsByPhase(controller.JobsByPhase());
    m->workqueue_depth->Set(static_cast<double>(controller.QueueDepth()));
  };
  auto health = http::HealthServer::Start(std::move(http));
  if (!health.ok()) return Fail(health.status().WithContext("--metrics-bind-address"));

  KV_LOG(kInfo, kOperator,
         "starting: API server %s (client-side limit %g requests/s, burst %d), namespace %s, "
         "endpoints on %s, identity %s%s",
         server.c_str(), options.kube_api_qps, options.kube_api_burst,
         options.namespace_name.empty() ? "(all)" : options.namespace_name.c_str(),
         (*health)->address().c_str(), options.identity.c_str(),
         options.leader_elect ? ", leader election on" : "");
  // Every replica serves admission, leader or not: pod creation must not wait for an election.
  std::unique_ptr<WebhookServer> webhook;
  std::unique_ptr<CaBundleKeeper> ca_bundle_keeper;
  if (!options.webhook_bind_address.empty()) {
    const HostPort at = *SplitHostPort("--webhook-bind-address", options.webhook_bind_address);
    if (!options.webhook_cert_secret_name.empty()) {
      // Serve only once the certificate and the caBundle agree: the API server would otherwise
      // call a webhook it cannot verify (and, with failurePolicy Fail, refuse the pods).
      WebhookCertificateSetupOptions setup;
      setup.secret_namespace = options.webhook_cert_secret_namespace;
      setup.secret_name = options.webhook_cert_secret_name;
      setup.webhook_configuration = options.webhook_configuration;
      setup.dns_names = options.webhook_dns_names;
      setup.cert_dir = options.webhook_cert_dir;
      setup.timeout = options.webhook_setup_timeout;
      setup.log = [](const std::string& line) {
        logging::Log(logging::Level::kInfo, logging::Subsystem::kWebhook, line);
      };
      StatusOr<std::string> ca = SetUpWebhookCertificate(**lease_client, setup);
      if (!ca.ok()) return Fail(ca.status().WithContext("--webhook-cert-secret"));
      if (!options.webhook_configuration.empty()) {
        CaBundleKeeperOptions keep{setup, std::move(*ca), options.webhook_ca_bundle_check_period};
        ca_bundle_keeper =
            std::make_unique<CaBundleKeeper>(**lease_client, std::move(keep), setup.log);
      }
    }
    WebhookServerOptions w;
    w.host = at.host;
    w.port = at.port;
    w.cert_dir = options.webhook_cert_dir;
    w.settings = options.settings;
    w.log = [](const std::string& line) {
      logging::Log(logging::Level::kInfo, logging::Subsystem::kWebhook, line);
    };
    w.on_review = [m](std::string_view outcome) {
      auto it = m->webhook_reviews.find(outcome);
      if (it != m->webhook_reviews.end()) it->second->Increment();
    };
    auto started = WebhookServer::Start(std::move(w));
    if (!started.ok()) return Fail(started.status().WithContext("--webhook-bind-address"));
    webhook = std::move(*started);
    KV_LOG(kInfo, kWebhook, "serving POST /inject on %s (certificate from %s)",
           webhook->address().c_str(), options.webhook_cert_dir.c_str());
  }
  controller.StartInformers();

  std::atomic<bool> shutting_down{false};
  std::atomic<bool> lost_leadership{false};
  if (options.leader_elect) {
    kube::LeaderElectionConfig le;
    le.namespace_name = options.leader_election_namespace;
    le.lease_name = options.leader_election_id;
    le.identity = options.identity;
    le.lease_duration = options.lease_duration;
    le.renew_deadline = options.renew_deadline;
    le.retry_period = options.retry_period;
    // `le` ends with this block: the callbacks keep their own copies of what they print.
    le.on_started_leading = [m, lease = le.namespace_name + "/" + le.lease_name] {
      KV_LOG(kInfo, kOperator, "leading (Lease %s)", lease.c_str());
      m->leader->Set(1);
    };
    le.on_stopped_leading = [m, &shutting_down, &lost_leadership, &controller] {
      m->leader->Set(0);
      controller.elastic_servers().Depose();  // at once: a new leader may serve these jobs now
      if (!shutting_down.load()) lost_leadership.store(true);
    };
    elector = std::make_unique<kube::LeaderElector>(**lease_client, le);
  }

  // Serve once every informer has its first list; lead (or run alone) after that.
  bool ready = false;
  bool workers_started = false;
  int exit_code = 0;
  while (true) {
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = ::sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      KV_LOG(kInfo, kOperator, "signal %d: shutting down", sig);
      break;
    }
    if (lost_leadership.load()) {
      KV_LOG(kWarning, kOperator, "lost the lease %s/%s: exiting so a fresh replica can stand by",
             options.leader_election_namespace.c_str(), options.leader_election_id.c_str());
      exit_code = 1;
      break;
    }
    if (!ready && controller.Synced()) {
      ready = true;
      (*health)->SetReady(true);
      KV_LOG(kInfo, kOperator, "caches synced");
      if (elector) elector->Start();
    }
    const bool may_write = ready && (!elector || elector->IsLeader());
    if (may_write && !workers_started) {
      workers_started = true;
      if (!elector) m->leader->Set(1);
      // The Lease's transitions when this replica took it: its membership servers' fencing token.
      if (elector) controller.elastic_servers().SetFencingToken(elector->fencing_token());
      controller.StartWorkers();
    }
  }
  shutting_down.store(true);
  (*health)->SetReady(false, "shutting down");
  if (elector) elector->Stop();  // releases the lease: a standby takes over at once
  controller.Stop();
  (*health)->Stop();
  KV_LOG(kInfo, kOperator, "stopped");
  return exit_code;
}

}  // namespace
}  // namespace korovod::k8s_operator

int main(int argc, char** argv) {
  // glibc gives each thread that allocates its own arena (up to 8 per core): the reconcile
  // workers, informers and webhook threads each kept tens of MiB of freed cache copies (RSS +22
  // MiB after a 1000-worker job in bench/operator/scale.py). The operator is not bound by
  // malloc's speed; two arenas hold its memory near what it uses.
  mallopt(M_ARENA_MAX, 2);
  namespace logging = korovod::logging;
  logging::SetRole("korovod-operator");
  logging::ConfigureFromEnvironment(logging::Subsystem::kOperator);
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      std::fputs(korovod::k8s_operator::OperatorUsage().c_str(), stdout);
      return 0;
    }
  }
  auto options = korovod::k8s_operator::ParseOperatorFlags(args);
  if (!options.ok()) {
    KV_LOG(kError, kOperator, "%s", options.status().ToString().c_str());
    std::fputs(korovod::k8s_operator::OperatorUsage().c_str(), stderr);
    return 2;
  }
  if (options->identity.empty()) options->identity = korovod::k8s_operator::DefaultIdentity();
  // Every thread inherits the blocked mask; the main thread takes the signals with sigtimedwait.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return korovod::k8s_operator::Run(*options, signals);
}
