// A URL query string built from key/value pairs, each percent-encoded (label selectors carry
// '=', ',', '!' and spaces).
#pragma once

#include <string>
#include <string_view>

namespace korovod::kube {

std::string QueryEscape(std::string_view text);

class Query {
 public:
  // Skips empty values, so optional parameters need no branches at the call site.
  Query& Add(std::string_view key, std::string_view value);
  // `path` + "?" + the pairs ("&" when `path` already has a query); `path` alone when empty.
  std::string AppendTo(const std::string& path) const;

 private:
  std::string text_;
};

}  // namespace korovod::kube
