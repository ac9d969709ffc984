// korovod-timeline: tools for timeline files.
//   korovod-timeline merge -o OUT.json IN0.json IN1.json ...
// merges per-rank timelines into one trace (one process lane per rank, rank 0's clock).
// Exit status: 0 success, 1 failure (the error is printed), 2 bad arguments.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/log.h"
#include "nlohmann/json.hpp"
#include "runtime/core/timeline/timeline_merge.h"

namespace {

constexpr char kUsage[] =
    "usage: korovod-timeline merge -o OUT.json IN0.json [IN1.json ...]\n"
    "  Merges per-rank timeline files (written with the engine's timeline option) into one\n"
    "  Chrome trace-event file (open it in https://ui.perfetto.dev or chrome://tracing):\n"
    "  one process lane per rank, every timestamp on rank 0's clock.\n"
    "  -o, --output FILE   the merged trace to write\n";

int Usage(const std::string& error) {
  if (!error.empty()) KV_LOG(kError, kTimeline, "%s", error.c_str());
  std::fputs(kUsage, stderr);
  return 2;
}

int Fail(const std::string& error) {
  KV_LOG(kError, kTimeline, "%s", error.c_str());
  return 1;
}

// Writes `text` to `path` (created 0644, truncated); returns an error message or "".
std::string WriteFile(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return path + ": " + std::strerror(errno);
  std::string error;
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = path + ": " + std::strerror(errno);
      break;
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
  if (::close(fd) != 0 && error.empty()) error = path + ": " + std::strerror(errno);
  return error;
}

int Merge(const std::vector<std::string_view>& args) {
  std::string output;
  std::vector<std::string> inputs;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "-o" || a == "--output") {
      if (i + 1 == args.size()) return Usage(std::string(a) + " needs a file name");
      if (!output.empty()) return Usage("more than one output file");
      output = args[++i];
    } else if (a.starts_with("--output=")) {
      if (!output.empty()) return Usage("more than one output file");
      output = a.substr(std::string_view("--output=").size());
    } else if (a.size() > 1 && a.front() == '-') {
      return Usage("unknown option " + std::string(a));
    } else {
      inputs.emplace_back(a);
    }
  }
  if (output.empty()) return Usage("merge needs an output file (-o OUT.json)");
  if (inputs.empty()) return Usage("merge needs at least one input file");

  auto merged = korovod::MergeTimelines(inputs);
  if (!merged.ok()) return Fail(merged.status().message());

  size_t events = 0;  // excluding metadata
  const auto trace = nlohmann::json::parse(merged.value(), nullptr, /*allow_exceptions=*/false);
  if (const auto list = trace.find("traceEvents"); list != trace.end()) {
    for (const auto& e : *list) {
      const auto ph = e.find("ph");
      if (ph == e.end() || *ph != "M") ++events;
    }
  }
  if (const std::string error = WriteFile(output, merged.value()); !error.empty()) {
    return Fail(error);
  }
  std::printf("merged %zu rank%s, %zu events into %s\n", inputs.size(),
              inputs.size() == 1 ? "" : "s", events, output.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  korovod::logging::SetRole("korovod-timeline");
  korovod::logging::ConfigureFromEnvironment(korovod::logging::Subsystem::kTimeline);
  if (argc < 2) return Usage("missing command");
  const std::string_view command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command != "merge") return Usage("unknown command " + std::string(command));
  return Merge(std::vector<std::string_view>(argv + 2, argv + argc));
}
