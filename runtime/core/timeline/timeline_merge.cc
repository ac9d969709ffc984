#include "runtime/core/timeline/timeline_merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"
#include "nlohmann/json.hpp"

namespace korovod {
namespace {

using nlohmann::json;

StatusOr<std::string> ReadFile(const std::string& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return ErrnoStatus(StatusCode::kInvalidArgument, path, errno);
  std::string text;
  char buf[1 << 16];
  int err = 0;
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  if (err != 0) return ErrnoStatus(StatusCode::kUnavailable, path, err);
  return text;
}

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// A rank killed mid-run leaves "[ ... {event}" or "[ ... {event},": close the array.
void CloseArray(std::string& text) {
  while (!text.empty() && IsSpace(text.back())) text.pop_back();
  const size_t first = text.find_first_not_of(" \n\r\t");
  if (first == std::string::npos || text[first] != '[' || text.back() == ']') return;
  if (!text.empty() && text.back() == ',') text.pop_back();
  text += "\n]";
}

// Rounds to the nanosecond, so that shifted timestamps print as short decimals.
double RoundToNs(double us) { return std::round(us * 1000.0) / 1000.0; }

struct RankFile {
  std::string path;
  double clock_offset_us = 0;
  json events;  // the file's array
};

bool StringFieldIs(const json& e, const char* key, std::string_view want) {
  const auto it = e.find(key);
  return it != e.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

bool IsMetadata(const json& e, std::string_view name) {
  return e.is_object() && StringFieldIs(e, "ph", "M") && StringFieldIs(e, "name", name);
}

StatusOr<std::pair<int, RankFile>> ParseRankFile(const std::string& path, std::string text) {
  RankFile file;
  file.path = path;
  const std::string not_timeline = path + ": not a korovod timeline (no korovod_clock metadata)";
  CloseArray(text);
  if (text.empty()) return InvalidArgument(not_timeline);
  try {
    file.events = json::parse(text);
  } catch (const json::parse_error& e) {
    return InvalidArgument(path + ": malformed JSON at byte " + std::to_string(e.byte) + ": " +
                           e.what());
  } catch (const json::exception& e) {
    // Well-formed but unrepresentable, e.g. a number past a double (out_of_range 406): found by
    // timeline_merge_fuzzer; it ended korovod-timeline with std::terminate.
    return InvalidArgument(path + ": unreadable JSON: " + e.what());
  }
  if (!file.events.is_array()) return InvalidArgument(not_timeline);
  for (const json& e : file.events) {
    if (!IsMetadata(e, "korovod_clock")) continue;
    const auto args = e.find("args");
    if (args == e.end() || !args->is_object()) break;
    const auto rank = args->find("rank");
    const auto offset = args->find("clock_offset_us");
    if (rank == args->end() || !rank->is_number_integer() || offset == args->end() ||
        !offset->is_number()) {
      return InvalidArgument(path + ": korovod_clock metadata lacks an integer rank or a numeric " +
                             "clock_offset_us");
    }
    if (rank->get<int64_t>() < 0 || rank->get<int64_t>() > std::numeric_limits<int>::max()) {
      return InvalidArgument(path + ": bad rank " + rank->dump() + " in korovod_clock");
    }
    file.clock_offset_us = offset->get<double>();
    return std::make_pair(rank->get<int>(), std::move(file));
  }
  return InvalidArgument(not_timeline);
}

StatusOr<std::pair<int, RankFile>> LoadRankFile(const std::string& path) {
  KV_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseRankFile(path, std::move(text));
}

json ProcessMetadata(int rank, const char* name, json args) {
  return json{{"name", name}, {"ph", "M"}, {"pid", rank}, {"args", std::move(args)}};
}

// Adds a parsed file to `ranks`, refusing a rank seen twice.
Status AddRank(std::map<int, RankFile>& ranks, std::pair<int, RankFile> loaded) {
  const std::string path = loaded.second.path;
  const auto [it, inserted] = ranks.emplace(loaded.first, std::move(loaded.second));
  if (!inserted) {
    return InvalidArgument("rank " + std::to_string(loaded.first) + " appears in both " +
                           it->second.path + " and " + path);
  }
  return OkStatus();
}

std::string Merge(std::map<int, RankFile>& ranks);

}  // namespace

StatusOr<std::string> MergeTimelines(const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument("no timeline files to merge");
  std::map<int, RankFile> ranks;  // ordered: the output lists rank 0 first
  for (const std::string& path : paths) {
    KV_ASSIGN_OR_RETURN(auto loaded, LoadRankFile(path));
    KV_RETURN_IF_ERROR(AddRank(ranks, std::move(loaded)));
  }
  return Merge(ranks);
}

StatusOr<std::string> MergeTimelineTexts(
    const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) return InvalidArgument("no timeline files to merge");
  std::map<int, RankFile> ranks;
  for (const auto& [name, text] : files) {
    KV_ASSIGN_OR_RETURN(auto parsed, ParseRankFile(name, text));
    KV_RETURN_IF_ERROR(AddRank(ranks, std::move(parsed)));
  }
  return Merge(ranks);
}

namespace {

std::string Merge(std::map<int, RankFile>& ranks) {
  json events = json::array();
  for (auto& [rank, file] : ranks) {
    events.push_back(
        ProcessMetadata(rank, "process_name", {{"name", "rank " + std::to_string(rank)}}));
    events.push_back(ProcessMetadata(rank, "process_sort_index", {{"sort_index", rank}}));
    for (json& e : file.events) {
      if (!e.is_object()) continue;
      // Regenerated above; the clock has been applied.
      if (IsMetadata(e, "process_name") || IsMetadata(e, "process_sort_index") ||
          IsMetadata(e, "korovod_clock")) {
        continue;
      }
      e["pid"] = rank;
      if (const auto ts = e.find("ts"); ts != e.end() && ts->is_number()) {
        *ts = RoundToNs(ts->get<double>() - file.clock_offset_us);
      }
      events.push_back(std::move(e));
    }
  }
  json out = json::object();
  out["traceEvents"] = std::move(events);
  out["displayTimeUnit"] = "ms";
  // Invalid UTF-8 in an event name (only possible in a file not written by Timeline) is replaced.
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace
}  // namespace korovod
