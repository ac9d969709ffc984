// korovodrun's command line and the rank layout (host:slots -> local and cross ranks).
#include "launcher/options.h"

#include "gtest/gtest.h"
#include "launcher/local_host.h"
#include "launcher/rank_layout.h"

namespace korovod::launcher {
namespace {

TEST(Options, FlagsThenCommand) {
  auto o = ParseOptions({"-np", "4", "-H", "localhost:4", "--timeline=/t/{rank}.json", "--verbose",
                         "--sidecar", "/x/sc", "--start-timeout", "2.5", "--grace-period=0",
                         "python3", "-u", "train.py", "--lr", "0.1"});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->num_proc, 4);
  EXPECT_EQ(*o->hosts, "localhost:4");
  EXPECT_EQ(*o->timeline, "/t/{rank}.json");
  EXPECT_TRUE(o->verbose);
  EXPECT_EQ(*o->sidecar_path, "/x/sc");
  EXPECT_DOUBLE_EQ(o->start_timeout_s, 2.5);
  EXPECT_DOUBLE_EQ(o->grace_period_s, 0);
  EXPECT_EQ(o->command, (std::vector<std::string>{"python3", "-u", "train.py", "--lr", "0.1"}));
}

TEST(Options, DoubleDashEndsFlags) {
  auto o = ParseOptions({"--num-proc=2", "--", "-weird-program", "x"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->num_proc, 2);
  EXPECT_EQ(o->command, (std::vector<std::string>{"-weird-program", "x"}));
  EXPECT_DOUBLE_EQ(o->start_timeout_s, 60);
  EXPECT_DOUBLE_EQ(o->grace_period_s, 5);
}

TEST(Options, Errors) {
  using V = std::vector<std::string>;
  for (const V& args :
       {V{}, V{"a.out"}, V{"-np", "1"}, V{"-np", "0", "x"}, V{"-np", "1.5", "x"}, V{"-np"},
        V{"-np", "2", "--nope", "x"}, V{"-np", "2", "--verbose=1", "x"},
        V{"-np", "2", "--start-timeout", "-1", "x"}, V{"-np", "2", "--start-timeout", "nan", "x"},
        V{"-np", "2", "--timeline"}, V{"-np", "2", "--sidecar=", "x"}}) {
    auto o = ParseOptions(args);
    EXPECT_FALSE(o.ok()) << ::testing::PrintToString(args);
    if (!o.ok()) {
      EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(ParseOptions({"-np", "2", "--nope", "x"}).status().message(), "unknown flag '--nope'");
  EXPECT_EQ(ParseOptions({"-np", "2"}).status().message(), "no command to run");
  EXPECT_EQ(ParseOptions({"x"}).status().message(), "-np N is required");
}

TEST(Options, Help) {
  auto o = ParseOptions({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

TEST(HostList, Parses) {
  auto h = ParseHostList("a:2,b.example.com:16,::1:3");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->size(), 3u);
  EXPECT_EQ((*h)[0].host, "a");
  EXPECT_EQ((*h)[0].slots, 2);
  EXPECT_EQ((*h)[1].host, "b.example.com");
  EXPECT_EQ((*h)[1].slots, 16);
  EXPECT_EQ((*h)[2].host, "::1");
  EXPECT_EQ((*h)[2].slots, 3);
}

TEST(HostList, Errors) {
  for (const char* text : {"", "a", "a:", ":2", "a:0", "a:-1", "a:+2", "a:2x", "a:2,", ",a:2",
                           "a:2,,b:2", "a:2,a:3"}) {
    EXPECT_FALSE(ParseHostList(text).ok()) << text;
  }
  EXPECT_EQ(ParseHostList("a:2,a:3").status().message(), "-H lists host 'a' more than once");
}

struct Want {
  const char* host;
  int local_rank, local_size, cross_rank, cross_size;
};

void ExpectLayout(const std::vector<HostSlots>& hosts, int np, const std::vector<Want>& want) {
  auto l = ComputeRankLayout(hosts, np);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  ASSERT_EQ(l->size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    const RankPlacement& p = (*l)[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(p.rank, static_cast<int>(r));
    EXPECT_EQ(p.size, np);
    EXPECT_EQ(p.host, want[r].host);
    EXPECT_EQ(p.local_rank, want[r].local_rank);
    EXPECT_EQ(p.local_size, want[r].local_size);
    EXPECT_EQ(p.cross_rank, want[r].cross_rank);
    EXPECT_EQ(p.cross_size, want[r].cross_size);
  }
}

TEST(RankLayout, OneHost) {
  ExpectLayout({{"localhost", 3}}, 3,
               {{"localhost", 0, 3, 0, 1}, {"localhost", 1, 3, 0, 1}, {"localhost", 2, 3, 0, 1}});
}

TEST(RankLayout, TwoByTwo) {
  ExpectLayout({{"a", 2}, {"b", 2}}, 4,
               {{"a", 0, 2, 0, 2}, {"a", 1, 2, 0, 2}, {"b", 0, 2, 1, 2}, {"b", 1, 2, 1, 2}});
}

TEST(RankLayout, UnevenAndUnusedHosts) {
  // Horovod: a:3 b:1 -> local rank 0 on both hosts, local ranks 1, 2 only on a; c gets nothing.
  ExpectLayout({{"a", 3}, {"b", 4}, {"c", 2}}, 4,
               {{"a", 0, 3, 0, 2}, {"a", 1, 3, 0, 1}, {"a", 2, 3, 0, 1}, {"b", 0, 1, 1, 2}});
  ExpectLayout({{"a", 1}, {"b", 2}, {"c", 2}}, 5,
               {{"a", 0, 1, 0, 3},
                {"b", 0, 2, 1, 3},
                {"b", 1, 2, 0, 2},
                {"c", 0, 2, 2, 3},
                {"c", 1, 2, 1, 2}});
}

TEST(RankLayout, NotEnoughSlots) {
  auto l = ComputeRankLayout({{"a", 1}, {"b", 2}}, 4);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().message(), "-np 4 needs 4 slots but -H offers only 3");
}

TEST(LocalHost, Names) {
  EXPECT_TRUE(IsLocalHost("localhost"));
  EXPECT_TRUE(IsLocalHost("LocalHost"));
  EXPECT_TRUE(IsLocalHost("127.0.0.1"));
  EXPECT_TRUE(IsLocalHost("127.3.4.5"));
  EXPECT_TRUE(IsLocalHost("::1"));
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  EXPECT_TRUE(IsLocalHost(name));
  EXPECT_FALSE(IsLocalHost("192.0.2.7"));  // TEST-NET-1: never assigned
  EXPECT_FALSE(IsLocalHost("2001:db8::1"));
  EXPECT_FALSE(IsLocalHost(""));
}

}  // namespace
}  // namespace korovod::launcher
