#include "launcher/shm_cleanup.h"

#include <sys/mman.h>

#include "common/shared_memory.h"

namespace korovod::launcher {

std::vector<std::string> UnlinkShmWithPrefix(const std::string& prefix) {
  std::vector<std::string> removed;
  if (prefix.empty() || prefix == "/") return removed;  // never sweep all of /dev/shm
  for (const std::string& name : ListShmNames(prefix)) {
    if (::shm_unlink(name.c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace korovod::launcher
