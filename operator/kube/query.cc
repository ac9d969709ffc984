#include "operator/kube/query.h"

#include <cctype>

namespace korovod::kube {

std::string QueryEscape(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

Query& Query::Add(std::string_view key, std::string_view value) {
  if (value.empty()) return *this;
  if (!text_.empty()) text_ += '&';
  text_ += QueryEscape(key);
  text_ += '=';
  text_ += QueryEscape(value);
  return *this;
}

std::string Query::AppendTo(const std::string& path) const {
  if (text_.empty()) return path;
  return path + (path.find('?') == std::string::npos ? "?" : "&") + text_;
}

}  // namespace korovod::kube
