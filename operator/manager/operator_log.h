// OperatorLog: one line per call on stderr, "<RFC 3339 UTC time> korovod-operator: <message>",
// whole lines even from concurrent threads.
#pragma once

namespace korovod::op {

void OperatorLog(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace korovod::op
