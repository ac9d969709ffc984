// Elastic korovodrun's pieces without a job: its flags, the discovery script's output and run,
// and which slots are offered as hosts come, go and fail (blacklist and cooldown).
#include "launcher/elastic_hosts.h"

#include <chrono>

#include "gtest/gtest.h"
#include "launcher/options.h"

namespace korovod::launcher {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ElasticOptions, FlagsMakeTheJobElastic) {
  auto o = ParseOptions({"--min-np", "2", "--max-np", "4", "--host-discovery-script", "./h.sh",
                         "--slots-per-host", "2", "--elastic-timeout", "30", "--reset-limit", "0",
                         "--blacklist-cooldown-range", "5", "60", "python3", "t.py"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE(o->elastic());
  EXPECT_EQ(*o->min_np, 2);
  EXPECT_EQ(o->num_proc, 2);  // -np defaults to --min-np
  EXPECT_EQ(*o->max_np, 4);
  EXPECT_EQ(*o->discovery_script, "./h.sh");
  EXPECT_EQ(o->slots_per_host, 2);
  EXPECT_DOUBLE_EQ(o->elastic_timeout_s, 30);
  EXPECT_EQ(*o->reset_limit, 0);
  EXPECT_DOUBLE_EQ(o->blacklist_cooldown->first, 5);
  EXPECT_DOUBLE_EQ(o->blacklist_cooldown->second, 60);
  EXPECT_EQ(o->command, (std::vector<std::string>{"python3", "t.py"}));

  auto np = ParseOptions({"-np", "3", "--max-np", "5", "x"});
  ASSERT_TRUE(np.ok());
  EXPECT_EQ(*np->min_np, 3);  // --min-np defaults to -np
  EXPECT_FALSE(ParseOptions({"-np", "3", "x"})->elastic());
}

TEST(ElasticOptions, ErrorsNameTheFlag) {
  auto msg = [](std::vector<std::string> args) { return ParseOptions(args).status().message(); };
  EXPECT_EQ(msg({"--host-discovery-script", "h", "x"}), "-np N or --min-np N is required");
  EXPECT_EQ(msg({"--min-np", "4", "--max-np", "2", "x"}), "--max-np 2 is below --min-np 4");
  EXPECT_TRUE(Contains(msg({"-np", "2", "--reset-limit", "1", "x"}),
                       "--reset-limit applies to elastic jobs only"));
  EXPECT_TRUE(Contains(msg({"--min-np", "2", "--blacklist-cooldown-range", "5"}),
                       "needs two numbers of seconds"));
  EXPECT_TRUE(Contains(msg({"--min-np", "2", "--blacklist-cooldown-range", "9", "3", "x"}),
                       "HI (3) is below LO"));
  EXPECT_TRUE(Contains(msg({"--min-np", "0", "x"}), "--min-np must be a whole number"));
  EXPECT_TRUE(Contains(msg({"--min-np", "2", "--elastic-timeout", "0", "x"}),
                       "--elastic-timeout must be a number of seconds above 0"));
}

TEST(DiscoveredHosts, ParsesHostsAndSlots) {
  auto h =
      ParseDiscoveredHosts("# the pool\nlocalhost:2\n\n  127.0.0.2  \n127.0.0.3:1 # spot\n", 3);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].host, "localhost");
  EXPECT_EQ((*h)[0].slots, 2);
  EXPECT_EQ((*h)[1].host, "127.0.0.2");
  EXPECT_EQ((*h)[1].slots, 3);  // --slots-per-host
  EXPECT_EQ((*h)[2].slots, 1);
  EXPECT_TRUE(ParseDiscoveredHosts("", 1)->empty());
  auto twice = ParseDiscoveredHosts("a:1\nb:1\na:2\n", 1);
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(Contains(twice.status().message(), "line 3 (\"a:2\"): host a is listed twice"));
  auto bad = ParseDiscoveredHosts("a:1\nb:zero\n", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status().message(), "line 2")) << bad.status().ToString();
  auto two = ParseDiscoveredHosts("a b\n", 1);
  ASSERT_FALSE(two.ok());
  EXPECT_TRUE(Contains(two.status().message(), "one host[:slots] per line"));
}

TEST(DiscoveryScript, OutputExitStatusAndTimeout) {
  auto out = RunDiscoveryScript("echo localhost:2; echo 127.0.0.2", seconds(10));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "localhost:2\n127.0.0.2\n");
  auto failed = RunDiscoveryScript("echo partial; echo 'no inventory' >&2; exit 3", seconds(10));
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(Contains(failed.status().message(), "exited with code 3: no inventory"))
      << failed.status().ToString();
  auto slow = RunDiscoveryScript("sleep 5", milliseconds(300));
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Contains(slow.status().message(), "did not finish within 300 ms"));
}

TEST(ElasticHostsTest, FreeSlotsFollowTheListAndSkipOccupiedOnes) {
  ElasticHosts hosts;
  hosts.SetDiscovered({{"a", 2}, {"b", 1}});
  const auto now = Clock::now();
  EXPECT_EQ(hosts.OfferedSlots(now), 3);
  EXPECT_EQ(hosts.FreeSlots({}, 10, now), (std::vector<Slot>{{"a", 0}, {"a", 1}, {"b", 0}}));
  EXPECT_EQ(hosts.FreeSlots({{"a", 0}}, 1, now), (std::vector<Slot>{{"a", 1}}));
  EXPECT_TRUE(hosts.Offered({"a", 1}, now));
  hosts.SetDiscovered({{"a", 1}});  // b left, a shrank
  EXPECT_FALSE(hosts.Offered({"a", 1}, now));
  EXPECT_FALSE(hosts.Offered({"b", 0}, now));
  EXPECT_TRUE(hosts.Offered({"a", 0}, now));
}

TEST(ElasticHostsTest, AFailedHostIsBlacklistedForGoodWithoutACooldown) {
  ElasticHosts hosts;
  hosts.SetDiscovered({{"a", 1}, {"b", 1}});
  const auto now = Clock::now();
  EXPECT_FALSE(hosts.RecordFailure("a", now).has_value());
  EXPECT_TRUE(hosts.Blacklisted("a", now + std::chrono::hours(1000)));
  EXPECT_EQ(hosts.FreeSlots({}, 10, now), (std::vector<Slot>{{"b", 0}}));
  EXPECT_EQ(hosts.OfferedSlots(now), 1);
}

TEST(ElasticHostsTest, TheCooldownDoublesWithEachFailureUpToTheMaximum) {
  ElasticHosts hosts(std::make_pair(2.0, 5.0));
  hosts.SetDiscovered({{"a", 1}});
  const auto t0 = Clock::now();
  EXPECT_EQ(*hosts.RecordFailure("a", t0), milliseconds(2000));
  EXPECT_TRUE(hosts.Blacklisted("a", t0 + milliseconds(1999)));
  EXPECT_FALSE(hosts.Blacklisted("a", t0 + milliseconds(2000)));
  EXPECT_TRUE(hosts.Offered({"a", 0}, t0 + milliseconds(2000)));
  EXPECT_EQ(*hosts.RecordFailure("a", t0), milliseconds(4000));
  EXPECT_EQ(*hosts.RecordFailure("a", t0), milliseconds(5000));
  EXPECT_EQ(*hosts.RecordFailure("a", t0), milliseconds(5000));
}

}  // namespace
}  // namespace korovod::launcher
