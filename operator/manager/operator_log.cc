#include "operator/manager/operator_log.h"

#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>

namespace korovod::op {

void OperatorLog(const char* format, ...) {
  char message[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  ::gmtime_r(&ts.tv_sec, &utc);
  char stamp[40];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  // One fprintf per line: stdio locks the stream for the call, so lines never interleave.
  std::fprintf(stderr, "%s.%03ldZ korovod-operator: %s\n", stamp, ts.tv_nsec / 1000000, message);
}

}  // namespace korovod::op
