// RunDir: the job's private directory (mkdtemp under $TMPDIR, mode 0700) holding the sidecars'
// unix sockets and the job key file; removed with everything in it on destruction.
#pragma once

#include <string>

#include "common/status.h"

namespace korovod::launcher {

class RunDir {
 public:
  // Creates $TMPDIR/<name_prefix>XXXXXX (/tmp when TMPDIR is unset or empty).
  static StatusOr<RunDir> Create(const std::string& name_prefix);

  RunDir(RunDir&& o) noexcept;
  RunDir& operator=(RunDir&& o) noexcept;
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  ~RunDir();

  const std::string& path() const { return path_; }
  // Removes the directory now (idempotent).
  void Remove();

 private:
  explicit RunDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace korovod::launcher
