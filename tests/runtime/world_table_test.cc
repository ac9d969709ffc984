// The world table text (world files, the rendezvous answer): parsing, every error naming the
// line, the loopback rule and KOROVOD_IFACE on a table.
#include "runtime/world/world_table.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace korovod {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(WorldTable, ParsesLinesInAnyOrderWithCommentsAndDefaults) {
  const std::string text =
      "# two hosts, two networks\n"
      "rank=1 host=h1 port=29501 addr=eth0/10.0.0.2 addr=eth1/10.1.0.2 node=box1\n"
      "\n"
      "  rank=0 host=h0 port=29500 addr=10.0.0.1   # no interface name, node defaults to host\n";
  auto t = ParseWorldTable(text, "world file w", 2);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].host_name, "h0");
  EXPECT_EQ((*t)[0].node, "h0");
  EXPECT_EQ((*t)[0].port, 29500);
  ASSERT_EQ((*t)[0].addresses.size(), 1u);
  EXPECT_EQ((*t)[0].addresses[0].iface, "");
  EXPECT_EQ((*t)[0].addresses[0].host, "10.0.0.1");
  EXPECT_EQ((*t)[1].node, "box1");
  ASSERT_EQ((*t)[1].addresses.size(), 2u);
  EXPECT_EQ((*t)[1].addresses[1].iface, "eth1");
  EXPECT_EQ((*t)[1].addresses[1].host, "10.1.0.2");
  // Formatting and parsing again gives the same table.
  auto again = ParseWorldTable(FormatWorldTable(*t), "formatted", 2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(FormatWorldTable(*again), FormatWorldTable(*t));
}

struct BadCase {
  const char* text;
  int size;
  const char* expect;  // must appear in the error
};

class WorldTableErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(WorldTableErrors, NameTheProblemAndTheLine) {
  const BadCase c = GetParam();
  auto t = ParseWorldTable(c.text, "world file /w", c.size);
  ASSERT_FALSE(t.ok()) << c.text;
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(t.status().message(), c.expect)) << t.status().ToString();
  EXPECT_TRUE(Contains(t.status().message(), "world file /w")) << t.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, WorldTableErrors,
    ::testing::Values(
        BadCase{"", 0, "lists no ranks"}, BadCase{"# only a comment\n", 0, "lists no ranks"},
        BadCase{"rank=0 host=a port=1 addr=x\nrank=2 host=c port=1 addr=z\n", 0,
                "no line for rank 1"},
        BadCase{"rank=0 host=a port=1 addr=x\nrank=0 host=b port=2 addr=y\n", 0,
                "line 2: rank 0 is already on line 1"},
        BadCase{"rank=0 host=a port=70000 addr=x\n", 0, "line 1: port=70000 is not a port"},
        BadCase{"rank=0 host=a port=0 addr=x\n", 0, "port=0 is not a port"},
        BadCase{"rank=x host=a port=1 addr=x\n", 0, "rank=x is not a rank number"},
        BadCase{"rank=0 host=a port=1 addr=x colour=blue\n", 0, "unknown key \"colour\""},
        BadCase{"rank=0 host=a port=1 addr=x stray\n", 0, "\"stray\" is not key=value"},
        BadCase{"rank=0 host=a port=1\n", 0, "no addr="},
        BadCase{"rank=0 port=1 addr=x\n", 0, "no host="},
        BadCase{"host=a port=1 addr=x\n", 0, "no rank="},
        BadCase{"rank=0 host=a addr=x\n", 0, "no port="},
        BadCase{"rank=0 host=a port=1 addr=eth0/\n", 0, "addr=eth0/ is not ADDRESS"},
        BadCase{"rank=0 host=a port=1 addr=x port=2\n", 0, "port given twice"},
        BadCase{"rank=0 host=a port=1 addr=x\nrank=1 host=b port=1 addr=y\n", 3,
                "lists 2 ranks but the world size is 3"},
        BadCase{"rank=0 host=a port=1 addr=x\nrank=5 host=b port=1 addr=y\n", 2,
                "line 2: rank=5 is outside the world of size 2"}));

TEST(WorldTable, ReadWorldFileNamesAMissingFile) {
  auto t = ReadWorldFile("/nonexistent/korovod-world", 2);
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(Contains(t.status().message(), "/nonexistent/korovod-world"));
}

TEST(WorldTable, ReadWorldFileReadsOne) {
  char path[] = "/tmp/kvworld-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  {
    std::ofstream out(path);
    out << "rank=0 host=a port=5000 addr=lo/127.0.0.1\nrank=1 host=a port=5001 addr=lo/127.0.0.1\n";
  }
  auto t = ReadWorldFile(path, 2);
  std::remove(path);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[1].port, 5001);
}

RankEntry Entry(const std::string& node, std::vector<CandidateAddress> addrs) {
  RankEntry e;
  e.host_name = node;
  e.node = node;
  e.port = 1000;
  e.addresses = std::move(addrs);
  return e;
}

TEST(WorldTable, LoopbackComesFirstWhenEveryRankSharesANode) {
  std::vector<RankEntry> t = {Entry("n", {{"eth0", "10.0.0.1"}, {"lo", "127.0.0.1"}}),
                              Entry("n", {{"eth0", "10.0.0.1"}, {"lo", "127.0.0.1"}})};
  ApplyLoopbackRule(t);
  for (const RankEntry& e : t) {
    ASSERT_EQ(e.addresses.size(), 2u);
    EXPECT_EQ(e.addresses[0].iface, "lo");
    EXPECT_EQ(e.addresses[1].iface, "eth0");
  }
  EXPECT_TRUE(AllOnOneNode(t));
  EXPECT_EQ(FirstChoicePeers(t)[1].ToString(), "127.0.0.1:1000");
}

TEST(WorldTable, LoopbackIsDroppedAcrossNodesUnlessItIsAllARankHas) {
  std::vector<RankEntry> t = {Entry("a", {{"lo", "127.0.0.1"}, {"eth0", "10.0.0.1"}}),
                              Entry("b", {{"lo", "127.0.0.1"}})};
  ApplyLoopbackRule(t);
  ASSERT_EQ(t[0].addresses.size(), 1u);
  EXPECT_EQ(t[0].addresses[0].iface, "eth0");
  ASSERT_EQ(t[1].addresses.size(), 1u);  // all it has: kept, so its error can name it
  EXPECT_EQ(t[1].addresses[0].iface, "lo");
  EXPECT_FALSE(AllOnOneNode(t));
}

TEST(WorldTable, RestrictToInterfaceKeepsItsAddressesOrNamesTheRankWithout) {
  std::vector<RankEntry> t = {Entry("a", {{"eth0", "10.0.0.1"}, {"eth1", "10.1.0.1"}}),
                              Entry("b", {{"eth0", "10.0.0.2"}, {"eth1", "10.1.0.2"}})};
  ASSERT_TRUE(RestrictToInterface(t, "eth1", "world file w").ok());
  EXPECT_EQ(t[0].addresses.size(), 1u);
  EXPECT_EQ(t[1].addresses[0].host, "10.1.0.2");

  std::vector<RankEntry> u = {Entry("a", {{"eth1", "10.1.0.1"}}),
                              Entry("b", {{"eth0", "10.0.0.2"}, {"", "10.2.0.2"}})};
  Status s = RestrictToInterface(u, "eth1", "world file w");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "KOROVOD_IFACE=eth1")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "rank 1 (host b)")) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "eth0, (unnamed) 10.2.0.2")) << s.ToString();
}

TEST(WorldTable, RankLineRoundTripsAndRefusesEmptyOrSeveralLines) {
  const RankEntry e = Entry("n1", {{"eth0", "10.0.0.1"}});
  auto parsed = ParseRankLine(FormatRankLine(3, e), "reg: ");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->first, 3);
  EXPECT_EQ(parsed->second.node, "n1");
  EXPECT_FALSE(ParseRankLine("# nothing", "reg: ").ok());
  EXPECT_FALSE(ParseRankLine(FormatRankLine(0, e) + "\n" + FormatRankLine(1, e), "reg: ").ok());
}

TEST(WorldTable, OneHighRankLineCostsNoMoreThanItsLine) {
  // The table was sized by the largest rank seen (found reading it for world_table_fuzzer), so
  // one line of 60 bytes from another process allocated a million entries.
  auto t = ParseWorldTable("rank=1048575 host=h port=1 addr=a\n", "the world table", 0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has no line for rank 0 (ranks 0..1048575"),
            std::string::npos)
      << t.status().message();
  auto gap = ParseWorldTable(
      "rank=0 host=h port=1 addr=a\nrank=2 host=h port=1 addr=a\n", "the world table", 0);
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("no line for rank 1"), std::string::npos);
  auto dup = ParseWorldTable(
      "rank=0 host=h port=1 addr=a\nrank=0 host=h port=1 addr=a\n", "the world table", 0);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("line 2: rank 0 is already on line 1"), std::string::npos);
}

TEST(WorldTable, AnAcceptedRegistrationFormatsToALineThatParses) {
  // Found by world_table_fuzzer: 253 addresses and no node= made a 256-token registration that
  // the coordinator accepted, then sent back with node= added: 257 tokens, refused by every rank.
  std::string line = "rank=0 host=h port=1";
  for (int i = 0; i < 252; ++i) line += " addr=10.0.0." + std::to_string(i % 250 + 1);
  auto ok = ParseRankLine(line, "reg: ");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ParseWorldTable(FormatWorldTable({ok->second}), "table", 1).ok());
  auto bad = ParseRankLine(line + " addr=10.0.0.9", "reg: ");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("more than 252 addr="), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace korovod
