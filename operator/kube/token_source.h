// The bearer token for each request: a fixed string, or a file re-read whenever it changes
// (projected service-account tokens are rotated by the kubelet about hourly).
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <utility>

#include "common/status.h"

namespace korovod::kube {

class TokenSource {
 public:
  TokenSource(std::string token, std::string token_file)
      : token_(std::move(token)), file_(std::move(token_file)) {}

  // The current token ("" = none). Thread-safe.
  StatusOr<std::string> Token();

 private:
  std::mutex mu_;
  std::string token_;
  const std::string file_;
  std::filesystem::file_time_type mtime_{};
  std::uintmax_t size_ = 0;
};

}  // namespace korovod::kube
