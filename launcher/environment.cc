#include "launcher/environment.h"

#include <unistd.h>

namespace korovod::launcher {

Environment Environment::FromCurrentProcess() {
  Environment env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.vars_.emplace(entry.substr(0, eq), entry.substr(eq + 1));  // first occurrence wins
  }
  return env;
}

const std::string* Environment::Find(const std::string& name) const {
  auto it = vars_.find(name);
  return it == vars_.end() ? nullptr : &it->second;
}

std::vector<std::string> Environment::ToStrings() const {
  std::vector<std::string> out;
  out.reserve(vars_.size());
  for (const auto& [k, v] : vars_) out.push_back(k + "=" + v);
  return out;
}

}  // namespace korovod::launcher
