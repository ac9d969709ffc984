// A peer's control connection (goodbye, or abort with its reason), read by PeerMesh's
// OnControlEvent whenever the connection is readable. The peer writes any bytes and then closes;
// this side must end with the peer's last word read or its death noticed (never reading it as
// alive forever), within a bounded number of events.
#include <poll.h>

#include <string>
#include <vector>

#include "runtime/transport/peer_mesh.h"
#include "tests/fuzz/fuzz_check.h"

namespace korovod {

struct PeerMeshFuzzAccess {
  static void Adopt(PeerMesh& mesh, int peer, Fd fd) {
    mesh.conns_[peer][mesh.streams_] = std::move(fd);
    mesh.watched_[peer].store(true);
  }
};

}  // namespace korovod

using namespace korovod;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FedSocket s = fuzz::Feed(data, size);
  std::vector<PeerAddress> peers = {{"127.0.0.1", 1}, {"127.0.0.1", 2}};
  {
    PeerMesh mesh(0, peers, 1);
    PeerMeshFuzzAccess::Adopt(mesh, 1, std::move(s.reader));
    // The peer has closed: each event either reads its word or finds it dead. A partial message
    // followed by EOF must not read as "the rest is in flight" for ever.
    int events = 0;
    while (mesh.watch_fd(1) >= 0 && events < 8) {
      pollfd p{mesh.watch_fd(1), POLLIN | POLLRDHUP, 0};
      FUZZ_CHECK(::poll(&p, 1, 1000) == 1);
      (void)mesh.OnControlEvent(1);
      ++events;
    }
    FUZZ_CHECK(mesh.watch_fd(1) < 0);
    mesh.Abort(Aborted("fuzz"));  // no goodbye into the socket at destruction
  }
  return 0;
}
