// The sidecar's gRPC control requests as a trainer (or anything that can reach the socket) sends
// them: each request message parsed from bytes as gRPC does, then the checks the handlers run
// before they touch the engine: the protocol version (Hello), the process set's ranks
// (AddProcessSet: ProcessSet::Create in Engine::AddProcessSet), the timeline path's "{rank}"
// expansion (StartTimeline). The handlers themselves need a live engine; the sidecar's own
// sidecar_fuzz_test drives them through a real socket.
#include <string>
#include <vector>

#include "korovod/sidecar/v1/sidecar.pb.h"
#include "runtime/core/timeline/timeline.h"
#include "runtime/world/process_set.h"
#include "sidecar/control/protocol_version.h"
#include "tests/fuzz/fuzz_check.h"

using namespace korovod;
namespace v1 = korovod::sidecar::v1;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int world = data[0] % 8 + 1;
  const int kind = (data[0] >> 3) % 5;
  const void* bytes = data + 1;
  const int len = static_cast<int>(size - 1);
  switch (kind) {
    case 0: {
      v1::HelloRequest req;
      if (!req.ParseFromArray(bytes, len)) return 0;
      const Status s = sidecar::CheckProtocolVersion(req.protocol_version(),
                                                     sidecar::kSidecarProtocolVersion);
      FUZZ_CHECK(s.ok() == (req.protocol_version() == sidecar::kSidecarProtocolVersion));
      break;
    }
    case 1: {
      v1::AddProcessSetRequest req;
      if (!req.ParseFromArray(bytes, len)) return 0;
      std::vector<int> ranks(req.ranks().begin(), req.ranks().end());
      auto set = ProcessSet::Create(ranks, world, 0);
      if (set.ok()) FUZZ_CHECK(set->size() <= world);
      break;
    }
    case 2: {
      v1::StartTimelineRequest req;
      if (!req.ParseFromArray(bytes, len)) return 0;
      const std::string path = ExpandTimelinePath(req.path(), world - 1);
      FUZZ_CHECK(path.find("{rank}") == std::string::npos ||
                 req.path().find("{rank}") != std::string::npos);
      break;
    }
    case 3: {
      v1::RemoveProcessSetRequest req;
      (void)req.ParseFromArray(bytes, len);
      break;
    }
    default: {
      v1::ShutdownRequest req;
      (void)req.ParseFromArray(bytes, len);
      break;
    }
  }
  return 0;
}
