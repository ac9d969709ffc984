// World table: every rank's host, data port and candidate addresses, as a world file states them
// or as the rendezvous coordinator collects them (the coordinator sends it in the same text).
//
// Text format, one rank per line, `#` starts a comment, blank lines are ignored:
//
//   rank=0 host=h0 port=29500 addr=eth0/10.0.0.1 addr=eth1/10.1.0.1
//   rank=1 host=h1 port=29500 addr=eth0/10.0.0.2 addr=eth1/10.1.0.2 node=h1
//
//   rank    0 .. size-1, each exactly once, any line order
//   host    the rank's host name, used in messages
//   port    the rank's data listen port, 1-65535
//   addr    IFACE/ADDRESS or ADDRESS (interface unknown); one or more, most preferred first;
//           ADDRESS is an IPv4 address or a name every rank can resolve
//   node    optional: ranks with equal node share a machine and network namespace (loopback
//           reaches each other, shared memory works); defaults to host
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "runtime/world/world.h"

namespace korovod {

// `source` names the text in errors ("world file /etc/korovod/world"); every error names the
// line. `expected_size` > 0: the table must hold exactly that many ranks.
StatusOr<std::vector<RankEntry>> ParseWorldTable(std::string_view text, const std::string& source,
                                                 int expected_size);
StatusOr<std::vector<RankEntry>> ReadWorldFile(const std::string& path, int expected_size);
std::string FormatWorldTable(const std::vector<RankEntry>& ranks);

// One line of the format: a rank's registration with the rendezvous coordinator. An empty line
// (nothing but a comment) is an error here.
std::string FormatRankLine(int rank, const RankEntry& entry);
StatusOr<std::pair<int, RankEntry>> ParseRankLine(std::string_view line, const std::string& where);

// True for 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackAddress(const std::string& host);

// Loopback addresses reach a rank only from its own node: when every rank shares one node they
// are kept and moved to the front (the fastest path); otherwise they are dropped, except where
// they are all a rank has (its error then says so when nobody can reach it).
void ApplyLoopbackRule(std::vector<RankEntry>& ranks);

// KOROVOD_IFACE for a world file: keeps only the addresses on interface `iface`. A rank left with
// none is an error naming it, its host and the interfaces it does list.
Status RestrictToInterface(std::vector<RankEntry>& ranks, const std::string& iface,
                           const std::string& source);

bool AllOnOneNode(const std::vector<RankEntry>& ranks);

// Each rank's first address with its port: WorldOptions::peers before preflight chooses.
std::vector<PeerAddress> FirstChoicePeers(const std::vector<RankEntry>& ranks);

// "rank 2 (host h2)".
std::string DescribeRank(const std::vector<RankEntry>& ranks, int rank);

}  // namespace korovod
