// common/byte_count: the byte-count syntax of every byte setting (KOROVOD_FUSION_THRESHOLD, the
// webhook's korovod.dev/fusion-threshold-bytes): plain integers, the binary units, the 1 TiB cap
// and the errors.
#include "common/byte_count.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace korovod {
namespace {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kTiB = int64_t{1} << 40;

TEST(ParseByteCount, PlainIntegers) {
  EXPECT_EQ(ParseByteCount("0").value(), 0);
  EXPECT_EQ(ParseByteCount("1").value(), 1);
  EXPECT_EQ(ParseByteCount("67108864").value(), 64 * kMiB);
  EXPECT_EQ(ParseByteCount("10B").value(), 10);
}

TEST(ParseByteCount, EverySuffixIsBinary) {
  EXPECT_EQ(ParseByteCount("512K").value(), 512 * kKiB);
  EXPECT_EQ(ParseByteCount("512k").value(), 512 * kKiB);
  EXPECT_EQ(ParseByteCount("512KiB").value(), 512 * kKiB);
  EXPECT_EQ(ParseByteCount("64M").value(), 64 * kMiB);
  EXPECT_EQ(ParseByteCount("64MiB").value(), 64 * kMiB);
  EXPECT_EQ(ParseByteCount("1G").value(), kGiB);
  EXPECT_EQ(ParseByteCount("1GiB").value(), kGiB);
  EXPECT_EQ(ParseByteCount("0M").value(), 0);
}

TEST(ParseByteCount, UpToOneTiB) {
  EXPECT_EQ(ParseByteCount("1024G").value(), kTiB);
  EXPECT_EQ(ParseByteCount(std::to_string(kTiB)).value(), kTiB);
  EXPECT_EQ(ParseByteCount("1048576M").value(), kTiB);
  for (const std::string& too_big :
       std::initializer_list<std::string>{"1025G", "1048577M", std::to_string(kTiB + 1) + "B",
                                          "9223372036854775807", "9223372036854775807K"}) {
    auto r = ParseByteCount(too_big);
    ASSERT_FALSE(r.ok()) << too_big << " = " << r.value();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("1 TiB"), std::string::npos) << r.status().message();
  }
}

TEST(ParseByteCount, OverflowingTheIntegerIsAnError) {
  // Past INT64_MAX: strtoll's ERANGE, not a wrapped value.
  auto r = ParseByteCount("99999999999999999999");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("byte count"), std::string::npos);
}

TEST(ParseByteCount, RefusesWhatIsNotACount) {
  for (const char* bad : {"", "M", "-1", "-1M", "abc", "0x10"}) {
    auto r = ParseByteCount(bad);
    EXPECT_FALSE(r.ok()) << "\"" << bad << "\" parsed as " << (r.ok() ? r.value() : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

TEST(FormatByteCount, LargestExactUnitAndRoundTrips) {
  EXPECT_EQ(FormatByteCount(0), "0");
  EXPECT_EQ(FormatByteCount(1000), "1000");
  EXPECT_EQ(FormatByteCount(kKiB), "1K");
  EXPECT_EQ(FormatByteCount(1536 * kKiB), "1536K");
  EXPECT_EQ(FormatByteCount(64 * kMiB), "64M");
  EXPECT_EQ(FormatByteCount(kGiB), "1G");
  EXPECT_EQ(FormatByteCount(kTiB), "1024G");
  EXPECT_EQ(FormatByteCount(kGiB + 1), std::to_string(kGiB + 1));
  EXPECT_EQ(FormatByteCount(-kMiB), std::to_string(-kMiB));
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{4095}, kKiB, 3 * kMiB, 5 * kGiB + kKiB, kTiB}) {
    EXPECT_EQ(ParseByteCount(FormatByteCount(n)).value(), n) << FormatByteCount(n);
  }
}

TEST(ParseByteCount, UnknownUnitsAreNamed) {
  for (const char* bad : {"1T", "1TiB", "1KB", "1mb", "64 M", "1g", "1.5G", "1Mi"}) {
    auto r = ParseByteCount(bad);
    ASSERT_FALSE(r.ok()) << "\"" << bad << "\" parsed as " << r.value();
    EXPECT_NE(r.status().message().find("unknown unit"), std::string::npos)
        << bad << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace korovod
