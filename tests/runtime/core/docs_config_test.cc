// docs/configuration.md lists exactly the engine's variables, with the code's defaults.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "runtime/core/engine_config.h"

namespace korovod {
namespace {

std::string Section() {
  std::ifstream in(KOROVOD_SOURCE_DIR "/docs/configuration.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t begin = doc.find("<!-- engine-variables");
  const size_t end = doc.find("<!-- end engine-variables -->");
  EXPECT_NE(begin, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  return begin == std::string::npos || end == std::string::npos ? ""
                                                                : doc.substr(begin, end - begin);
}

TEST(DocsConfig, EveryEngineVariableIsDocumentedWithItsDefault) {
  const std::string section = Section();
  for (const EngineVariable& v : EngineVariables()) {
    const std::string row =
        std::string("| `") + v.name + "` | `" + v.default_value + "` | " + v.meaning + " |";
    EXPECT_NE(section.find(row), std::string::npos) << "docs/configuration.md lacks: " << row;
  }
}

TEST(DocsConfig, DocumentsNoVariableTheCodeDoesNotRead) {
  std::set<std::string> known;
  for (const EngineVariable& v : EngineVariables()) known.insert(v.name);
  const std::string section = Section();
  // Every `KOROVOD_...` name in backquotes (no <regex>: GCC 12 warns inside it under ASan).
  for (size_t at = section.find("`KOROVOD_"); at != std::string::npos;
       at = section.find("`KOROVOD_", at + 1)) {
    const size_t end = section.find('`', at + 1);
    ASSERT_NE(end, std::string::npos);
    const std::string name = section.substr(at + 1, end - at - 1);
    EXPECT_TRUE(known.count(name)) << name << " is documented but not read";
  }
}

// The defaults in the table are the ones the code applies when nothing is set.
TEST(DocsConfig, DocumentedDefaultsParseToTheBuiltInDefaults) {
  auto from_docs = EngineConfig::FromEnvironment([](const std::string& name) {
    for (const EngineVariable& v : EngineVariables()) {
      if (name == v.name && v.default_value[0] != '\0')
        return std::optional<std::string>(v.default_value);
    }
    return std::optional<std::string>();
  });
  ASSERT_TRUE(from_docs.ok()) << from_docs.status().ToString();
  EngineConfig built_in;
  EXPECT_EQ(from_docs->fusion_threshold_bytes, built_in.fusion_threshold_bytes);
  EXPECT_EQ(from_docs->cycle_time_ms, built_in.cycle_time_ms);
  EXPECT_EQ(from_docs->cache_capacity, built_in.cache_capacity);
  EXPECT_EQ(from_docs->stall_check, built_in.stall_check);
  EXPECT_EQ(from_docs->stall_shutdown, built_in.stall_shutdown);
  EXPECT_EQ(from_docs->timeline_mark_cycles, built_in.timeline_mark_cycles);
  EXPECT_EQ(from_docs->autotune, built_in.autotune);
  EXPECT_EQ(from_docs->autotune_warmup_samples, built_in.autotune_warmup_samples);
  EXPECT_EQ(from_docs->autotune_cycles_per_sample, built_in.autotune_cycles_per_sample);
  EXPECT_EQ(from_docs->autotune_samples_per_trial, built_in.autotune_samples_per_trial);
  EXPECT_EQ(from_docs->autotune_max_trials, built_in.autotune_max_trials);
}

}  // namespace
}  // namespace korovod
