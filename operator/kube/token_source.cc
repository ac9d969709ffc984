#include "operator/kube/token_source.h"

#include <fstream>
#include <sstream>

namespace korovod::kube {

StatusOr<std::string> TokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  if (file_.empty()) return token_;
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(file_, ec);
  const auto size = ec ? 0 : std::filesystem::file_size(file_, ec);
  if (ec) {
    // A rotation replaces the file through a symlink swap; a brief gap keeps the old token.
    if (!token_.empty()) return token_;
    return Unavailable("token file " + file_ + ": " + ec.message());
  }
  if (!token_.empty() && mtime == mtime_ && size == size_) return token_;
  std::ifstream in(file_, std::ios::binary);
  if (!in) return Unavailable("token file " + file_ + ": cannot read");
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) {
    token.pop_back();
  }
  if (token.empty()) return Unavailable("token file " + file_ + " is empty");
  token_ = std::move(token);
  mtime_ = mtime;
  size_ = size;
  return token_;
}

}  // namespace korovod::kube
