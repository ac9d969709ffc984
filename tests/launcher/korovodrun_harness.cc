#include "tests/launcher/korovodrun_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "launcher/environment.h"

namespace korovod::launcher::testing {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/korovodrun-test-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) std::abort();
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string KorovodrunPath() { return KOROVODRUN_PATH; }
std::string FakeSidecarPath() { return FAKE_SIDECAR_PATH; }

RunningLauncher::RunningLauncher(const std::vector<std::string>& args,
                                 const std::map<std::string, std::string>& env,
                                 const std::string& program) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) std::abort();
  out_ = Fd(out[0]);
  err_ = Fd(err[0]);
  Fd out_w(out[1]), err_w(err[1]);
  Environment e = Environment::FromCurrentProcess();
  for (const auto& [k, v] : env) e.Set(k, v);
  ChildSpec spec;
  spec.argv = {program};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = e.ToStrings();
  spec.stdout_fd = out_w.get();
  spec.stderr_fd = err_w.get();
  started_ = NowSeconds();
  auto c = ChildProcess::Start(spec);
  if (!c.ok()) {
    ADD_FAILURE() << c.status().ToString();
    std::abort();
  }
  child_.emplace(std::move(c).value());
  for (int fd : {out_.get(), err_.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void RunningLauncher::PumpOnce(int timeout_ms) {
  std::vector<pollfd> fds;
  if (out_.valid()) fds.push_back({out_.get(), POLLIN, 0});
  if (err_.valid()) fds.push_back({err_.get(), POLLIN, 0});
  if (fds.empty()) {
    ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    return;
  }
  ::poll(fds.data(), fds.size(), timeout_ms);
  char buf[65536];
  for (auto [fd, text] : {std::pair{&out_, &out_text_}, std::pair{&err_, &err_text_}}) {
    while (fd->valid()) {
      ssize_t n = ::read(fd->get(), buf, sizeof buf);
      if (n > 0) {
        text->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        fd->Reset();
      } else {
        break;
      }
    }
  }
}

LaunchResult RunningLauncher::Finish(double timeout_s) {
  double end = NowSeconds() + timeout_s;
  while (!child_->Poll() || out_.valid() || err_.valid()) {
    if (NowSeconds() > end) {
      ADD_FAILURE() << "korovodrun did not finish within " << timeout_s << " s; stderr so far:\n"
                    << err_text_;
      child_->Signal(SIGKILL);
      child_->Wait();
      break;
    }
    PumpOnce(20);
  }
  LaunchResult r;
  r.status = *child_->exit_status();
  r.out = out_text_;
  r.err = err_text_;
  r.seconds = NowSeconds() - started_;
  return r;
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    names.push_back(e.path().filename().string());
  }
  return names;
}

std::vector<std::string> ShmEntriesWithPrefix(const std::string& prefix) {
  std::vector<std::string> found;
  std::string p = prefix.substr(prefix[0] == '/' ? 1 : 0);
  for (const std::string& name : ListDir("/dev/shm")) {
    if (name.rfind(p, 0) == 0) found.push_back(name);
  }
  return found;
}

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> m;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

bool ProcessExists(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A zombie waiting for a reaper (an orphan under a PID 1 that does not reap) is gone too.
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return !(paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z');
}

}  // namespace korovod::launcher::testing
