// Rank lists as ranges, the compact form status fields use at any world size: "0-3,5,7-9". A
// list keeps its order: each item is an ascending run, so "4-5,0-1" is 4, 5, 0, 1 (the order of
// an elastic epoch's members by rank).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace korovod::k8s_operator {

// The most ranks a range list may expand to: a bound on what a malformed or hostile status can
// make the operator allocate (a world is far smaller).
inline constexpr size_t kMaxRangeListSize = 1 << 20;

// "0-3,5": runs of consecutive ascending values, in the list's order; "" for none.
std::string FormatRanges(const std::vector<int64_t>& values);

// The inverse of FormatRanges; an error names the bad item. Values are >= 0.
StatusOr<std::vector<int64_t>> ParseRanges(std::string_view text);

}  // namespace korovod::k8s_operator
