// Interrupts a blocking call (a watch's streaming GET) from another thread. Cancel() is final:
// once cancelled, every later call that uses this canceller returns at once.
#pragma once

#include <functional>
#include <mutex>

namespace korovod::kube {

class Canceller {
 public:
  // Sets the flag and runs the installed hook (which shuts the call's socket down). Calling it
  // again re-runs the hook, which closes the gap where a call had not opened its socket yet.
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    if (hook_) hook_();
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }
  // For the blocking call: installs (or, with nullptr, removes) the hook. Returns false when
  // already cancelled, so the caller does not start.
  bool SetHook(std::function<void()> hook) {
    std::lock_guard<std::mutex> lock(mu_);
    hook_ = std::move(hook);
    return !cancelled_;
  }

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  std::function<void()> hook_;
};

}  // namespace korovod::kube
