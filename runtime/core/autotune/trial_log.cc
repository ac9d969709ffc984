#include "runtime/core/autotune/trial_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <utility>

namespace korovod::autotune {
namespace {

template <typename T>
void Append(std::string& out, T value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  out.append(buf, result.ptr);
}

}  // namespace

StatusOr<TrialLog> TrialLog::Open(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec)) {
      return InvalidArgument("AutotuneOptions.log_path '" + path + "': directory '" +
                             parent.string() + "' does not exist");
    }
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return ErrnoStatus(StatusCode::kInvalidArgument,
                       "AutotuneOptions.log_path: cannot open '" + path + "'", errno);
  }
  (void)::fchmod(fd, 0644);  // regardless of the umask; best effort on a file we do not own
  TrialLog log(fd, path);
  KV_RETURN_IF_ERROR(log.WriteAll(kTrialLogHeader));
  return log;
}

TrialLog::TrialLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

Status TrialLog::WriteTrial(int trial, const TunableParams& params, double score, bool best) {
  std::string label;
  Append(label, trial);
  return WriteRow(label, params, score, best);
}

Status TrialLog::WriteFinal(const TunableParams& params, double score) {
  return WriteRow("final", params, score, true);
}

Status TrialLog::WriteRow(std::string_view trial, const TunableParams& params, double score,
                          bool best) {
  std::string row(trial);
  row += ',';
  Append(row, params.fusion_threshold_bytes);
  row += ',';
  Append(row, params.cycle_time_ms);
  row += ',';
  Append(row, params.small_allreduce_max_bytes);
  row += ',';
  Append(row, params.tcp_stripe_min_bytes);
  row += ',';
  Append(row, score);
  row += best ? ",1\n" : ",0\n";
  return WriteAll(row);
}

Status TrialLog::WriteAll(std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd_.get(), text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(StatusCode::kInternal, "autotune log '" + path_ + "': write", errno);
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  return OkStatus();
}

}  // namespace korovod::autotune
