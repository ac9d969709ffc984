#include "runtime/world/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace korovod {

std::string LocalHostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

std::string LocalNodeId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  struct stat st {};
  if (!std::getline(in, boot) || boot.empty() || ::stat("/proc/self/ns/net", &st) != 0) {
    return LocalHostName();
  }
  return boot + "-net" + std::to_string(static_cast<unsigned long long>(st.st_ino));
}

}  // namespace korovod
