// korovod-operator's flags and the REST paths of what it writes.
#include "operator/manager/operator_options.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "operator/manager/child_resource.h"

namespace korovod::k8s_operator {
namespace {

TEST(OperatorOptions, Defaults) {
  auto o = ParseOperatorFlags({});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->metrics_bind_address, "0.0.0.0:8080");
  EXPECT_FALSE(o->leader_elect);
  EXPECT_EQ(o->leader_election_namespace, "default");
  EXPECT_EQ(o->leader_election_id, "korovod-operator");
  EXPECT_EQ(o->workers, 2);
  EXPECT_EQ(o->settings.coordinator_port, 28500);
}

TEST(OperatorOptions, ValuesBothSpellings) {
  auto o = ParseOperatorFlags(
      {"--namespace", "ml", "--leader-elect", "--workers=4", "--leader-election-lease-duration=3",
       "--leader-election-renew-deadline", "2", "--leader-election-retry-period", "0.5",
       "--sidecar-image=img:1", "--coordinator-port", "1234"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->namespace_name, "ml");
  EXPECT_EQ(o->leader_election_namespace, "ml");  // follows --namespace
  EXPECT_TRUE(o->leader_elect);
  EXPECT_EQ(o->workers, 4);
  EXPECT_EQ(o->lease_duration, std::chrono::milliseconds(3000));
  EXPECT_EQ(o->retry_period, std::chrono::milliseconds(500));
  EXPECT_EQ(o->settings.default_sidecar_image, "img:1");
  EXPECT_EQ(o->settings.coordinator_port, 1234);
}

TEST(OperatorOptions, WebhookIsOffUntilGivenAnAddress) {
  auto off = ParseOperatorFlags({});
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->webhook_bind_address.empty());
  EXPECT_EQ(off->webhook_cert_dir, "/etc/korovod/webhook");
  auto on =
      ParseOperatorFlags({"--webhook-bind-address=[::]:9443", "--webhook-cert-dir", "/run/certs"});
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_EQ(on->webhook_cert_dir, "/run/certs");
  auto at = SplitHostPort("--webhook-bind-address", on->webhook_bind_address);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(at->host, "::");
  EXPECT_EQ(at->port, 9443);
}

TEST(OperatorOptions, OwnWebhookCertificate) {
  auto o = ParseOperatorFlags(
      {"--webhook-bind-address=0.0.0.0:9443", "--webhook-cert-secret=sys/rel-korovod-webhook-cert",
       "--webhook-dns-names=a.sys.svc,a.sys,a", "--webhook-configuration=rel-korovod",
       "--webhook-setup-timeout=30"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->webhook_cert_secret_namespace, "sys");
  EXPECT_EQ(o->webhook_cert_secret_name, "rel-korovod-webhook-cert");
  EXPECT_EQ(o->webhook_dns_names, (std::vector<std::string>{"a.sys.svc", "a.sys", "a"}));
  EXPECT_EQ(o->webhook_configuration, "rel-korovod");
  EXPECT_EQ(o->webhook_setup_timeout, std::chrono::seconds(30));
}

TEST(OperatorOptions, WorkerNetworkPolicyNamesTheOperatorsNamespaceAndLabels) {
  auto off = ParseOperatorFlags({});
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->settings.worker_network_policy.enabled());
  auto o = ParseOperatorFlags(
      {"--worker-network-policy=sys:app.kubernetes.io/name=korovod,app.kubernetes.io/instance=r"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->settings.worker_network_policy.enabled());
  EXPECT_EQ(o->settings.worker_network_policy.operator_namespace, "sys");
  EXPECT_EQ(o->settings.worker_network_policy.operator_pod_labels,
            (std::map<std::string, std::string>{{"app.kubernetes.io/name", "korovod"},
                                                {"app.kubernetes.io/instance", "r"}}));
}

TEST(OperatorOptions, ErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {{"--bogus"}, "unknown flag --bogus"},
           {{"--workers"}, "--workers needs a value"},
           {{"--workers", "0"}, "--workers=0"},
           {{"--coordinator-port", "x"}, "--coordinator-port=x"},
           {{"--leader-election-retry-period", "-1"}, "--leader-election-retry-period=-1"},
           {{"--leader-election-renew-deadline", "20"}, "shorter than"},
           {{"--leader-elect=maybe"}, "--leader-elect=maybe"},
           {{"--namespace="}, "--namespace needs a non-empty value"},
           {{"--metrics-bind-address", "8080"}, "--metrics-bind-address=8080: expected HOST:PORT"},
           {{"--webhook-bind-address", ":9443"},
            "--webhook-bind-address=:9443: expected HOST:PORT"},
           {{"--webhook-bind-address", "0.0.0.0:99999"}, "--webhook-bind-address=99999"},
           {{"--webhook-cert-secret", "name"},
            "--webhook-cert-secret=name: expected NAMESPACE/NAME"},
           {{"--webhook-cert-secret", "ns/name"},
            "--webhook-cert-secret needs --webhook-dns-names"},
           {{"--webhook-cert-secret=ns/n", "--webhook-dns-names=a,,b"}, "an empty name"},
           {{"--webhook-configuration", "c"},
            "--webhook-configuration needs --webhook-cert-secret"},
           {{"--worker-network-policy", "sys"},
            "--worker-network-policy=sys: expected NAMESPACE:KEY=VALUE"},
           {{"--worker-network-policy", "sys:app"}, "\"app\" is not KEY=VALUE"},
       }) {
    auto o = ParseOperatorFlags(c.args);
    ASSERT_FALSE(o.ok()) << c.args[0];
    EXPECT_NE(o.status().message().find(c.expect), std::string::npos) << o.status().ToString();
  }
}

TEST(ChildResource, PathsOfWhatTheOperatorWrites) {
  auto pod = ObjectPath({{"apiVersion", "v1"},
                         {"kind", "Pod"},
                         {"metadata", {{"name", "j-worker-0"}, {"namespace", "ns"}}}});
  ASSERT_TRUE(pod.ok());
  EXPECT_EQ(*pod, "/api/v1/namespaces/ns/pods/j-worker-0");
  auto pg = ObjectPath({{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                        {"kind", "PodGroup"},
                        {"metadata", {{"name", "j"}, {"namespace", "ns"}}}});
  ASSERT_TRUE(pg.ok());
  EXPECT_EQ(*pg, "/apis/scheduling.volcano.sh/v1beta1/namespaces/ns/podgroups/j");
  auto job = ObjectPath({{"apiVersion", "korovod.dev/v1alpha1"},
                         {"kind", "HorovodJob"},
                         {"metadata", {{"name", "j"}, {"namespace", "ns"}}}});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(*job, "/apis/korovod.dev/v1alpha1/namespaces/ns/horovodjobs/j");
  auto policy = ObjectPath({{"apiVersion", "networking.k8s.io/v1"},
                            {"kind", "NetworkPolicy"},
                            {"metadata", {{"name", "j-workers"}, {"namespace", "ns"}}}});
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(*policy, "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/j-workers");
  auto other = ResourceOf("apps/v1", "Deployment");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("Deployment (apps/v1)"), std::string::npos);
}

}  // namespace
}  // namespace korovod::k8s_operator
