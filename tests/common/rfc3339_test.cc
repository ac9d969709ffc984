// common/rfc3339: the formats Kubernetes writes (metav1.Time, MicroTime) and log lines use, the
// parser's round trips, and what it refuses.
#include "common/rfc3339.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace korovod {
namespace {

using Clock = std::chrono::system_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

// 2026-11-22T12:00:00Z
const Clock::time_point kNoon = Clock::time_point(seconds(1795348800));

TEST(FormatRfc3339, SecondsMicrosAndMillis) {
  const Clock::time_point t = kNoon + microseconds(123456);
  EXPECT_EQ(FormatRfc3339(t), "2026-11-22T12:00:00Z");
  EXPECT_EQ(FormatRfc3339(t, 0), "2026-11-22T12:00:00Z");
  EXPECT_EQ(FormatRfc3339(t, 3), "2026-11-22T12:00:00.123Z");
  EXPECT_EQ(FormatRfc3339(t, 6), "2026-11-22T12:00:00.123456Z");
  EXPECT_EQ(FormatRfc3339(kNoon, 6), "2026-11-22T12:00:00.000000Z");
}

TEST(FormatRfc3339, TruncatesNeverRoundsUp) {
  // Rounding 59.9996 to 3 digits would carry into the next minute.
  const Clock::time_point t = kNoon + seconds(59) + microseconds(999600);
  EXPECT_EQ(FormatRfc3339(t, 3), "2026-11-22T12:00:59.999Z");
  EXPECT_EQ(FormatRfc3339(t), "2026-11-22T12:00:59Z");
}

TEST(FormatRfc3339, DigitsAreClampedToNanoseconds) {
  const Clock::time_point t = kNoon + nanoseconds(5);
  EXPECT_EQ(FormatRfc3339(t, 9), "2026-11-22T12:00:00.000000005Z");
  EXPECT_EQ(FormatRfc3339(t, 42), "2026-11-22T12:00:00.000000005Z");
  EXPECT_EQ(FormatRfc3339(t, -1), "2026-11-22T12:00:00Z");
}

TEST(FormatRfc3339, EpochLeapDayAndBefore1970) {
  EXPECT_EQ(FormatRfc3339(Clock::time_point()), "1970-01-01T00:00:00Z");
  EXPECT_EQ(FormatRfc3339(Clock::time_point(seconds(951782400))), "2000-02-29T00:00:00Z");
  // Floors, not truncates toward zero: 1 ms before the epoch is still 1969.
  EXPECT_EQ(FormatRfc3339(Clock::time_point(milliseconds(-1)), 3), "1969-12-31T23:59:59.999Z");
}

TEST(ParseRfc3339, RoundTripsEveryPrecision) {
  const Clock::time_point t = kNoon + nanoseconds(123456789);
  for (int digits : {0, 3, 6, 9}) {
    const std::string text = FormatRfc3339(t, digits);
    auto back = ParseRfc3339(text);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status().ToString();
    EXPECT_EQ(FormatRfc3339(*back, digits), text);
    EXPECT_LE(*back, t) << text;
    EXPECT_GT(*back + seconds(1), t) << text;
  }
  EXPECT_EQ(ParseRfc3339("2026-11-22T12:00:00.123456Z").value(), kNoon + microseconds(123456));
}

TEST(ParseRfc3339, OffsetsLowercaseAndLongFractions) {
  EXPECT_EQ(ParseRfc3339("2026-11-22T13:00:00+01:00").value(), kNoon);
  EXPECT_EQ(ParseRfc3339("2026-11-22T06:30:00-05:30").value(), kNoon);
  EXPECT_EQ(ParseRfc3339("2026-11-22t12:00:00z").value(), kNoon);
  // Digits past the nanosecond are dropped, not rounded.
  EXPECT_EQ(ParseRfc3339("2026-11-22T12:00:00.1234567899Z").value(),
            kNoon + nanoseconds(123456789));
  EXPECT_EQ(ParseRfc3339("1970-01-01T00:00:00Z").value(), Clock::time_point());
  EXPECT_EQ(ParseRfc3339("2027-01-15T08:00:00Z").value(), Clock::time_point(seconds(1800000000)));
}

TEST(ParseRfc3339, ALeapSecondIsTheNextMinute) {
  EXPECT_EQ(ParseRfc3339("2026-11-22T11:59:60Z").value(), kNoon);
}

TEST(ParseRfc3339, RefusesMalformedTextNamingIt) {
  for (const char* bad : {
           "",
           "yesterday",
           "2026-11-22",
           "2026-11-22 12:00:00Z",       // space for T
           "2026-11-22T12:00:00",        // no zone
           "2026-11-22T12:00Z",          // no seconds
           "2026-11-22T12:00:00.Z",      // point without digits
           "2026-11-22T12:00:00+0100",   // offset without colon
           "2026-11-22T12:00:00+01",     // short offset
           "2026-11-22T12:00:00Zjunk",   // trailing text
           " 2026-11-22T12:00:00Z",      // leading space
           "26-11-22T12:00:00Z",         // two-digit year
           "2026-1-22T12:00:00Z",        // one-digit month
           "2026-02-30T00:00:00Z",       // no such day
           "2025-02-29T00:00:00Z",       // not a leap year
           "2026-13-01T00:00:00Z",       // no such month
           "2026-00-01T00:00:00Z",       // month 0
           "2026-11-22T24:00:00Z",       // hour
           "2026-11-22T12:60:00Z",       // minute
           "2026-11-22T12:00:61Z",       // second
           "2026-11-22T12:00:00+24:00",  // offset hour
       }) {
    auto t = ParseRfc3339(bad);
    ASSERT_FALSE(t.ok()) << "\"" << bad << "\" parsed as " << FormatRfc3339(*t);
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(t.status().message().find("\"" + std::string(bad) + "\""), std::string::npos)
        << t.status().message();
  }
}

}  // namespace
}  // namespace korovod
