// Which interfaces a rank offers as candidate addresses, and KOROVOD_IFACE's errors.
#include "runtime/world/interfaces.h"

#include <gtest/gtest.h>

#include "runtime/world/host_identity.h"

namespace korovod {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

NetInterface If(std::string name, std::string ip, bool up = true, bool running = true,
                bool loopback = false) {
  return {std::move(name), std::move(ip), up, running, loopback};
}

const std::vector<NetInterface> kHost = {
    If("lo", "127.0.0.1", true, true, true),
    If("eth0", "10.0.0.2"),
    If("eth1", "10.1.0.2"),
    If("eth1", "10.1.9.2"),               // a second address on eth1
    If("eth2", "10.2.0.2", false),        // administratively down
    If("eth3", "10.3.0.2", true, false),  // no carrier
    If("wg0", ""),                        // no IPv4 address
};

TEST(Interfaces, EveryUsableIpv4AddressLoopbackLast) {
  auto c = SelectCandidates(kHost, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 4u);
  EXPECT_EQ((*c)[0].iface, "eth0");
  EXPECT_EQ((*c)[1].host, "10.1.0.2");
  EXPECT_EQ((*c)[2].host, "10.1.9.2");
  EXPECT_EQ((*c)[3].iface, "lo");
}

TEST(Interfaces, OnlyLoopbackIsStillACandidate) {
  auto c = SelectCandidates({If("lo", "127.0.0.1", true, true, true), If("eth0", "", true)}, "");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 1u);
  EXPECT_EQ((*c)[0].host, "127.0.0.1");
}

TEST(Interfaces, NoUsableInterfaceIsAnErrorListingThem) {
  auto c = SelectCandidates({If("eth0", "10.0.0.2", false)}, "");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "eth0 10.0.0.2 (down)")) << c.status().ToString();
}

TEST(Interfaces, KorovodIfaceKeepsOnlyThatInterface) {
  auto c = SelectCandidates(kHost, "eth1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ((*c)[0].iface, "eth1");
  EXPECT_EQ((*c)[1].iface, "eth1");
  auto lo = SelectCandidates(kHost, "lo");  // loopback when asked for by name
  ASSERT_TRUE(lo.ok());
  EXPECT_EQ((*lo)[0].host, "127.0.0.1");
}

TEST(Interfaces, UnknownKorovodIfaceListsTheInterfacesThatExist) {
  auto c = SelectCandidates(kHost, "eth9");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = c.status().message();
  EXPECT_TRUE(Contains(m, "KOROVOD_IFACE=eth9: no such interface")) << m;
  EXPECT_TRUE(Contains(m, "lo 127.0.0.1, eth0 10.0.0.2, eth1 10.1.0.2")) << m;
  EXPECT_TRUE(Contains(m, "eth2 10.2.0.2 (down)")) << m;
  EXPECT_TRUE(Contains(m, "eth3 10.3.0.2 (no carrier)")) << m;
  EXPECT_TRUE(Contains(m, "wg0 (no IPv4)")) << m;
}

TEST(Interfaces, UnusableKorovodIfaceSaysWhy) {
  for (const char* name : {"eth2", "eth3", "wg0"}) {
    auto c = SelectCandidates(kHost, name);
    ASSERT_FALSE(c.ok()) << name;
    EXPECT_TRUE(
        Contains(c.status().message(), std::string("KOROVOD_IFACE=") + name + " is not usable"))
        << c.status().ToString();
  }
}

TEST(Interfaces, ThisHostHasLoopbackAndAnIdentity) {
  auto all = ListInterfaces();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(InterfaceOf(*all, "127.0.0.1").empty(), false) << DescribeInterfaces(*all);
  EXPECT_EQ(InterfaceOf(*all, "203.0.113.77"), "");
  EXPECT_FALSE(LocalHostName().empty());
  EXPECT_EQ(LocalNodeId(), LocalNodeId());
}

}  // namespace
}  // namespace korovod
