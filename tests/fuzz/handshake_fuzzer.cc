// The job-key handshake as a stranger on the data port plays it: the acceptor reads a Hello from
// any bytes (ReadHello) and, for a Hello it accepts, answers and reads the proof from the rest
// (AnswerHello); the dialer reads the acceptor's challenge and verdict from any bytes
// (DialHandshake). A socketpair carries the bytes; nothing may crash, and no outcome but
// kAuthenticated / OK may come from bytes that do not hold the key's proof.
#include <string>

#include "runtime/transport/handshake.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string key = "fuzz job key";
  const Deadline deadline = Deadline::After(std::chrono::milliseconds(2000));
  fuzz::FedSocket s = fuzz::Feed(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto hello = ReadHello(s.reader.get(), deadline);
    if (!hello.ok()) return 0;
    // The fuzzer cannot forge an HMAC-SHA256: a proof it wrote is a wrong one.
    const AcceptOutcome out = AnswerHello(s.reader.get(), key, *hello, data[0] >> 1 & 1 ? 0 : 7,
                                          deadline, "fuzz peer");
    FUZZ_CHECK(out != AcceptOutcome::kAuthenticated);
  } else {
    const Status st = DialHandshake(s.reader.get(), key, 1, 0, 0, 2, 0, deadline, "fuzz acceptor");
    FUZZ_CHECK(!st.ok());
  }
  return 0;
}
