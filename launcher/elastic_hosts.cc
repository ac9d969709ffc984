#include "launcher/elastic_hosts.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <sstream>

#include "common/fd.h"
#include "launcher/child_process.h"
#include "launcher/environment.h"

namespace korovod::launcher {

std::optional<std::chrono::milliseconds> ElasticHosts::RecordFailure(const std::string& host,
                                                                     Clock::time_point now) {
  Failures& f = failures_[host];
  ++f.count;
  if (!cooldown_s_) {
    f.until.reset();
    return std::nullopt;
  }
  const double s = std::min(cooldown_s_->first * std::ldexp(1.0, std::min(f.count - 1, 30)),
                            cooldown_s_->second);
  const std::chrono::milliseconds cooldown(static_cast<long>(std::llround(s * 1000)));
  f.until = now + cooldown;
  return cooldown;
}

bool ElasticHosts::Blacklisted(const std::string& host, Clock::time_point now) const {
  auto it = failures_.find(host);
  if (it == failures_.end()) return false;
  return !it->second.until || now < *it->second.until;
}

bool ElasticHosts::Offered(const Slot& slot, Clock::time_point now) const {
  if (Blacklisted(slot.first, now)) return false;
  for (const HostSlots& h : discovered_) {
    if (h.host == slot.first) return slot.second < h.slots;
  }
  return false;
}

std::vector<Slot> ElasticHosts::FreeSlots(const std::set<Slot>& occupied, int want,
                                          Clock::time_point now) const {
  std::vector<Slot> out;
  for (const HostSlots& h : discovered_) {
    if (Blacklisted(h.host, now)) continue;
    for (int s = 0; s < h.slots && static_cast<int>(out.size()) < want; ++s) {
      if (occupied.count({h.host, s}) == 0) out.emplace_back(h.host, s);
    }
  }
  return out;
}

int ElasticHosts::OfferedSlots(Clock::time_point now) const {
  int n = 0;
  for (const HostSlots& h : discovered_) {
    if (!Blacklisted(h.host, now)) n += h.slots;
  }
  return n;
}

StatusOr<std::vector<HostSlots>> ParseDiscoveredHosts(const std::string& text, int default_slots) {
  std::vector<HostSlots> hosts;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    line = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
    const std::string where =
        "host discovery output line " + std::to_string(number) + " (\"" + line + "\")";
    if (line.find_first_of(" \t,") != std::string::npos) {
      return InvalidArgument(where + ": one host[:slots] per line");
    }
    std::string entry = line;
    if (line.find(':') == std::string::npos) entry += ":" + std::to_string(default_slots);
    auto parsed = ParseHostList(entry);
    if (!parsed.ok()) return InvalidArgument(where + ": " + parsed.status().message());
    for (const HostSlots& h : hosts) {
      if (h.host == parsed->front().host) {
        return InvalidArgument(where + ": host " + h.host + " is listed twice");
      }
    }
    hosts.push_back(parsed->front());
  }
  return hosts;
}

StatusOr<std::string> RunDiscoveryScript(const std::string& script,
                                         std::chrono::milliseconds timeout) {
  int out_fds[2], err_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0 || ::pipe2(err_fds, O_CLOEXEC) != 0) {
    return ErrnoStatus(StatusCode::kInternal, "pipe2", errno);
  }
  Fd out_read(out_fds[0]), out_write(out_fds[1]), err_read(err_fds[0]), err_write(err_fds[1]);
  ChildSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.env = Environment::FromCurrentProcess().ToStrings();
  spec.stdout_fd = out_write.get();
  spec.stderr_fd = err_write.get();
  spec.die_with_parent = true;
  KV_ASSIGN_OR_RETURN(ChildProcess child, ChildProcess::Start(spec));
  out_write.Reset();
  err_write.Reset();
  const Deadline deadline = Deadline::After(timeout);
  std::string out, err;
  bool out_open = true, err_open = true;
  while ((out_open || err_open) && !deadline.Expired()) {
    pollfd fds[2] = {{out_open ? out_read.get() : -1, POLLIN, 0},
                     {err_open ? err_read.get() : -1, POLLIN, 0}};
    if (::poll(fds, 2, deadline.RemainingMs(100)) <= 0) continue;
    char buf[4096];
    for (int k = 0; k < 2; ++k) {
      if (fds[k].revents == 0) continue;
      const ssize_t n = ::read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        (k == 0 ? out : err).append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (k == 0 ? out_open : err_open) = false;
      }
    }
    if (out.size() > (1 << 20)) {
      return InvalidArgument("host discovery script \"" + script + "\" printed more than 1 MiB");
    }
  }
  std::optional<ExitStatus> st;
  while (!(st = child.Poll()) && !deadline.Expired()) {
    ::usleep(5000);
  }
  if (!st) {
    return DeadlineExceeded("host discovery script \"" + script + "\" did not finish within " +
                            std::to_string(timeout.count()) + " ms");
  }
  if (!st->success()) {
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    const size_t nl = err.rfind('\n');
    return FailedPrecondition(
        "host discovery script \"" + script + "\" " + st->Describe() +
        (err.empty() ? "" : ": " + err.substr(nl == std::string::npos ? 0 : nl + 1)));
  }
  return out;
}

}  // namespace korovod::launcher
