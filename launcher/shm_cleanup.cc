#include "launcher/shm_cleanup.h"

#include <dirent.h>
#include <sys/mman.h>

#include <memory>

namespace korovod::launcher {

std::vector<std::string> UnlinkShmWithPrefix(const std::string& prefix) {
  std::vector<std::string> removed;
  // shm_open names are "/name"; glibc keeps them as /dev/shm/name.
  std::string file_prefix = prefix;
  if (!file_prefix.empty() && file_prefix[0] == '/') file_prefix.erase(0, 1);
  if (file_prefix.empty()) return removed;  // never sweep all of /dev/shm
  struct DirCloser {
    void operator()(DIR* d) const { ::closedir(d); }
  };
  std::unique_ptr<DIR, DirCloser> dir(::opendir("/dev/shm"));
  if (!dir) return removed;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(dir.get())) {
    std::string name(e->d_name);
    if (name.compare(0, file_prefix.size(), file_prefix) == 0) names.push_back(name);
  }
  for (const std::string& name : names) {
    if (::shm_unlink(("/" + name).c_str()) == 0) removed.push_back("/" + name);
  }
  return removed;
}

}  // namespace korovod::launcher
