#include "operator/api/rank_ranges.h"

#include <charconv>
#include <optional>

namespace korovod::k8s_operator {

std::string FormatRanges(const std::vector<int64_t>& values) {
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    out += out.empty() ? "" : ",";
    out += std::to_string(values[i]);
    if (j > i) out += "-" + std::to_string(values[j]);
    i = j + 1;
  }
  return out;
}

namespace {

std::optional<int64_t> Number(std::string_view s) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

StatusOr<std::vector<int64_t>> ParseRanges(std::string_view text) {
  std::vector<int64_t> out;
  for (bool more = !text.empty(); more;) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    more = comma != std::string_view::npos;  // "0," ends in an empty item: an error
    text = more ? text.substr(comma + 1) : std::string_view();
    const size_t dash = item.find('-');
    const std::optional<int64_t> first = Number(item.substr(0, dash));
    const std::optional<int64_t> last =
        dash == std::string_view::npos ? first : Number(item.substr(dash + 1));
    if (!first || !last || *last < *first) {
      return InvalidArgument("\"" + std::string(item) +
                             "\" is not a rank or an ascending range a-b");
    }
    if (static_cast<uint64_t>(*last - *first) >= kMaxRangeListSize - out.size()) {
      return InvalidArgument("more than " + std::to_string(kMaxRangeListSize) + " ranks");
    }
    for (int64_t v = *first; v <= *last; ++v) out.push_back(v);
  }
  return out;
}

}  // namespace korovod::k8s_operator
