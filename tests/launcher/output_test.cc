// Line splitting, sidecar line filtering with its tail, and the output pump over real pipes.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "launcher/fd_writer.h"
#include "launcher/line_splitter.h"
#include "launcher/output_pump.h"
#include "launcher/sidecar_log.h"

namespace korovod::launcher {
namespace {

TEST(LineSplitter, WholeAndPartialLines) {
  std::vector<std::string> lines;
  LineSplitter s([&](std::string_view l) { lines.emplace_back(l); });
  s.Append("a\nb");
  s.Append("c\n\nd");
  EXPECT_EQ(lines, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_TRUE(s.has_partial());
  s.Flush();
  EXPECT_EQ(lines.back(), "d");
  s.Flush();
  EXPECT_EQ(lines.size(), 4u);
}

TEST(LineSplitter, VeryLongLineIsCut) {
  std::vector<std::string> lines;
  LineSplitter s([&](std::string_view l) { lines.emplace_back(l); });
  s.Append(std::string(LineSplitter::kMaxLine * 2 + 5, 'x'));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].size(), LineSplitter::kMaxLine);
  s.Append("y\n");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2], "xxxxxy");
}

// Reads back what a writer wrote to a pipe.
class Capture {
 public:
  Capture() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_NONBLOCK), 0);
    r_ = fds[0];
    w_ = fds[1];
  }
  ~Capture() {
    ::close(r_);
    ::close(w_);
  }
  int fd() const { return w_; }
  std::string Read() {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(r_, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
    return s;
  }

 private:
  int r_, w_;
};

TEST(SidecarLog, NotableLines) {
  EXPECT_TRUE(IsNotableSidecarLine("ERROR: x"));
  EXPECT_TRUE(IsNotableSidecarLine("connect Failed"));
  EXPECT_TRUE(IsNotableSidecarLine("Stall inspector: rank 2"));
  EXPECT_TRUE(IsNotableSidecarLine("warning: slow"));
  EXPECT_FALSE(IsNotableSidecarLine("connected to rank 1 over lo, 9.1 GB/s"));
  EXPECT_TRUE(IsNotableSidecarLine(
      "korovod: rank 1/2 host vm iface lo addr 127.0.0.1:46889 transport shm: next rank 0 "
      "(127.0.0.1) 127.0.0.1 (lo) 1.69 GB/s"));
  // The same summary as the sidecar logs it (common/log.h prefix).
  EXPECT_TRUE(IsNotableSidecarLine(
      "2026-11-25T07:49:50.123Z INFO [rank 1] world: korovod: rank 1/2 host vm iface lo addr "
      "127.0.0.1:46889 transport shm: next rank 0 (127.0.0.1) 127.0.0.1 (lo) 1.69 GB/s"));
  EXPECT_TRUE(IsNotableSidecarLine("2026-11-25T07:49:50.123Z WARNING [rank 1] world: x"));
  EXPECT_FALSE(IsNotableSidecarLine(
      "2026-11-25T07:49:50.123Z INFO [rank 1] sidecar: KOROVOD_LOCAL_RANK=1 (default 0)"));
  // An elastic worker's place in each epoch is shown; its progress towards one is not.
  EXPECT_TRUE(IsNotableSidecarLine(
      "2026-11-28T09:27:41.144Z INFO [worker a:0.2] world: korovod: worker a:0.2 joined "
      "membership epoch 3 as rank 0 of 4"));
  EXPECT_FALSE(IsNotableSidecarLine(
      "2026-11-28T09:27:40.086Z INFO [worker a:0.2] world: worker a:0.2: joining membership "
      "epoch 3"));
}

TEST(SidecarLog, QuietShowsNotableAndTailOnFailure) {
  Capture cap;
  FdWriter w(cap.fd());
  SidecarLog log("3", /*verbose=*/false, &w);
  for (int i = 0; i < 70; ++i) log.OnLine("line " + std::to_string(i));
  log.OnLine("warning: w");
  w.Flush();
  EXPECT_EQ(cap.Read(), "[sidecar 3] warning: w\n");
  EXPECT_EQ(log.PrintUnshownTail(), SidecarLog::kTailLines - 1);
  w.Flush();
  std::string tail = cap.Read();
  EXPECT_EQ(tail.find("[sidecar 3] line 21\n"), 0u) << tail;
  EXPECT_NE(tail.find("[sidecar 3] line 69\n"), std::string::npos);
  EXPECT_EQ(tail.find("warning"), std::string::npos);
  EXPECT_EQ(log.PrintUnshownTail(), 0u);
}

TEST(SidecarLog, VerboseShowsAll) {
  Capture cap;
  FdWriter w(cap.fd());
  SidecarLog log("0", /*verbose=*/true, &w);
  log.OnLine("hello");
  w.Flush();
  EXPECT_EQ(cap.Read(), "[sidecar 0] hello\n");
  EXPECT_EQ(log.PrintUnshownTail(), 0u);
}

TEST(OutputPump, DrainsAndFlushesPartialLines) {
  Capture cap;
  FdWriter w(cap.fd());
  OutputPump pump;
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto id = pump.Add(Fd(fds[0]), [&](std::string_view l) { w.Line("[7] ", l); });
  ASSERT_TRUE(id.ok());
  ASSERT_EQ(::write(fds[1], "one\ntw", 6), 6);
  pump.Drain(*id);
  w.Flush();
  EXPECT_EQ(cap.Read(), "[7] one\n");
  ASSERT_EQ(::write(fds[1], "o", 1), 1);
  ::close(fds[1]);
  pump.FinishAll();
  w.Flush();
  EXPECT_EQ(cap.Read(), "[7] two\n");
}

}  // namespace
}  // namespace korovod::launcher
