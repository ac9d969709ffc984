// The timeline merge's input: per-rank timeline files, as written by ranks that may have been
// killed mid-write (or by anything that can write into the timeline directory). Up to three
// files, split at 0xff bytes. An accepted merge is valid JSON with a traceEvents array.
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/core/timeline/timeline_merge.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::pair<std::string, std::string>> files;
  std::string current;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0xff && files.size() < 2) {
      files.emplace_back("rank" + std::to_string(files.size()) + ".json", std::move(current));
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[i]));
    }
  }
  files.emplace_back("rank" + std::to_string(files.size()) + ".json", std::move(current));
  auto merged = MergeTimelineTexts(files);
  if (!merged.ok()) return 0;
  const nlohmann::json out = nlohmann::json::parse(*merged, nullptr, /*allow_exceptions=*/false);
  FUZZ_CHECK(!out.is_discarded());
  FUZZ_CHECK(out.is_object() && out.contains("traceEvents") && out["traceEvents"].is_array());
  return 0;
}
