// common/json_escape (hand-written JSON strings: the timeline, bench rows) and common/json_read
// (non-throwing reads of untrusted JSON, for the operator). The escaper's output must parse back
// to the input for valid UTF-8, and stay valid JSON for any bytes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/json_escape.h"
#include "common/json_read.h"

namespace korovod {
namespace {

using nlohmann::json;

TEST(JsonEscape, QuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonQuoted("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonQuoted("\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
  EXPECT_EQ(JsonQuoted(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuoted(std::string("a\0b", 3)), "\"a\\u0000b\"");
  std::string appended = "x";
  AppendJsonEscaped(appended, "\"");
  EXPECT_EQ(appended, "x\\\"");
}

TEST(JsonEscape, Utf8PassesThroughInvalidBytesBecomeReplacementCharacters) {
  const std::string utf8 = "gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x98\x80";
  EXPECT_EQ(JsonQuoted(utf8), "\"" + utf8 + "\"");
  EXPECT_EQ(JsonQuoted("\xff"), "\"\\ufffd\"");
  EXPECT_EQ(JsonQuoted("\xc3"), "\"\\ufffd\"");                        // truncated sequence
  EXPECT_EQ(JsonQuoted("\xc0\xaf"), "\"\\ufffd\\ufffd\"");             // overlong '/'
  EXPECT_EQ(JsonQuoted("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // a surrogate
}

TEST(JsonEscape, EveryByteParsesBack) {
  std::string all;
  for (int i = 0; i < 128; ++i) all.push_back(static_cast<char>(i));
  EXPECT_EQ(json::parse(JsonQuoted(all)).get<std::string>(), all);
  std::string high;
  for (int i = 128; i < 256; ++i) high.push_back(static_cast<char>(i));
  EXPECT_TRUE(json::accept(JsonQuoted(high)));  // valid JSON whatever the bytes
}

TEST(JsonRead, PathsTypesAndFallbacks) {
  const json j = json::parse(R"({"metadata": {"name": "job", "labels": {"a": "b"}},
                                 "spec": {"replicas": 4, "big": 18446744073709551615,
                                          "neg": -3, "text": "4", "nothing": null}})");
  EXPECT_EQ(StringAt(j, {"metadata", "name"}), "job");
  EXPECT_EQ(StringAt(j, {"metadata", "missing"}), "");
  EXPECT_EQ(StringAt(j, {"metadata", "missing"}, "default"), "default");
  EXPECT_EQ(StringAt(j, {"spec", "replicas"}, "fallback"), "fallback");  // wrong type
  EXPECT_EQ(IntAt(j, {"spec", "replicas"}), 4);
  EXPECT_EQ(IntAt(j, {"spec", "neg"}), -3);
  EXPECT_EQ(IntAt(j, {"spec", "big"}), std::nullopt);  // above INT64_MAX
  EXPECT_EQ(IntAt(j, {"spec", "text"}), std::nullopt);
  EXPECT_EQ(IntAt(j, {"spec", "replicas", "deeper"}), std::nullopt);  // through a non-object
  EXPECT_EQ(ObjectAt(j, {"metadata", "labels"}), json({{"a", "b"}}));
  EXPECT_TRUE(ObjectAt(j, {"metadata", "name"}).is_object());  // a string: empty object
  EXPECT_TRUE(ObjectAt(j, {"metadata", "name"}).empty());
  EXPECT_TRUE(Has(j, {"spec", "replicas"}));
  EXPECT_FALSE(Has(j, {"spec", "nothing"}));  // null
  EXPECT_FALSE(Has(j, {"spec", "absent"}));
  EXPECT_EQ(FindPath(j, {}), &j);
  EXPECT_EQ(FindPath(json::array(), {"a"}), nullptr);
  EXPECT_EQ(StringAt(json("scalar"), {"a"}), "");
}

}  // namespace
}  // namespace korovod
