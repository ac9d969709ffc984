// Environment: a child's environment, built from this process's and then edited.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace korovod::launcher {

class Environment {
 public:
  // A copy of this process's environment.
  static Environment FromCurrentProcess();

  void Set(const std::string& name, const std::string& value) { vars_[name] = value; }
  void Unset(const std::string& name) { vars_.erase(name); }
  const std::string* Find(const std::string& name) const;

  // "NAME=value" entries, sorted by name.
  std::vector<std::string> ToStrings() const;

 private:
  std::map<std::string, std::string> vars_;
};

}  // namespace korovod::launcher
