#include "launcher/run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/env_settings.h"

namespace korovod::launcher {

StatusOr<RunDir> RunDir::Create(const std::string& name_prefix) {
  // Find: the system's variable, not a korovod setting, so not logged as an override.
  const auto tmp = EnvSettings(ProcessGetenv(), logging::Subsystem::kLauncher).Find("TMPDIR");
  std::string base = tmp ? tmp->value : "/tmp";
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::string templ = base + "/" + name_prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return ErrnoStatus(StatusCode::kUnavailable, "cannot create the run directory " + templ, errno);
  }
  std::string path(buf.data());
  ::chmod(path.c_str(), 0700);  // mkdtemp already uses 0700; make it explicit
  return RunDir(std::move(path));
}

RunDir::RunDir(RunDir&& o) noexcept : path_(std::exchange(o.path_, std::string())) {}

RunDir& RunDir::operator=(RunDir&& o) noexcept {
  if (this != &o) {
    Remove();
    path_ = std::exchange(o.path_, std::string());
  }
  return *this;
}

RunDir::~RunDir() { Remove(); }

void RunDir::Remove() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

}  // namespace korovod::launcher
