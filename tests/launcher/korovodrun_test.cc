// korovodrun end to end, with fake-sidecar standing in for korovod-sidecar and /bin/sh snippets as
// trainers. Every test also checks the cleanup: the run directory (under the test's own TMPDIR)
// and the job's shared-memory segments are gone after korovodrun exits.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "launcher/shm_cleanup.h"
#include "tests/launcher/korovodrun_harness.h"

namespace korovod::launcher::testing {
namespace {

class KorovodrunTest : public ::testing::Test {
 protected:
  // Environment for korovodrun: private TMPDIR, fake-sidecar reports, plus `extra`.
  std::map<std::string, std::string> Env(std::map<std::string, std::string> extra = {}) {
    extra["TMPDIR"] = tmp_.path();
    extra["FAKE_SIDECAR_REPORT_DIR"] = reports_.path();
    return extra;
  }
  std::vector<std::string> Args(std::vector<std::string> args) {
    std::vector<std::string> all = {"--sidecar", FakeSidecarPath()};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
  LaunchResult Run(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    RunningLauncher l(Args(std::move(args)), Env(std::move(env)));
    return l.Finish();
  }
  std::map<std::string, std::string> SidecarReport(int rank) {
    return ReadEnvFile(reports_.path() + "/sidecar" + std::to_string(rank) + ".env");
  }
  // A finished report: a process killed while writing one leaves only its ".tmp".
  static bool IsReport(const std::string& name, const std::string& prefix,
                       const std::string& suffix) {
    return name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  // The run directory and every shared-memory segment of the job are gone.
  void ExpectCleanedUp() {
    EXPECT_TRUE(ListDir(tmp_.path()).empty()) << "left in TMPDIR: " << ListDir(tmp_.path())[0];
    bool any_report = false;
    for (const std::string& name : ListDir(reports_.path())) {
      if (!IsReport(name, "sidecar", ".env")) continue;
      auto report = ReadEnvFile(reports_.path() + "/" + name);
      const std::string& prefix = report["KOROVOD_SHM_PREFIX"];
      ASSERT_FALSE(prefix.empty());
      any_report = true;
      EXPECT_TRUE(ShmEntriesWithPrefix(prefix).empty()) << "shm segments left with " << prefix;
    }
    EXPECT_TRUE(any_report) << "no sidecar reported";
  }
  // Every pid written by sidecars (reports) and trainers (<reports>/trainer<r>.pid) is gone.
  void ExpectNoProcessesLeft() {
    for (const std::string& name : ListDir(reports_.path())) {
      pid_t pid = 0;
      if (IsReport(name, "sidecar", ".env")) {
        pid = std::stoi(ReadEnvFile(reports_.path() + "/" + name)["PID"]);
      } else if (IsReport(name, "trainer", ".pid")) {
        std::ifstream f(reports_.path() + "/" + name);
        f >> pid;
      }
      if (pid > 0) {
        EXPECT_FALSE(ProcessExists(pid)) << name << " pid " << pid << " still alive";
      }
    }
  }
  // A trainer that records its pid, then sleeps (exec: the pid is the sleeping process).
  std::string SleepingTrainer() {
    return "echo $$ > " + reports_.path() + "/trainer$KOROVOD_RANK.pid.tmp && mv " +
           reports_.path() + "/trainer$KOROVOD_RANK.pid.tmp " + reports_.path() +
           "/trainer$KOROVOD_RANK.pid && exec sleep 30";
  }
  size_t FilesStartingWith(const std::string& prefix) {
    size_t n = 0;
    for (const std::string& name : ListDir(reports_.path())) {
      if (name.rfind(prefix, 0) == 0 && name.find(".tmp") == std::string::npos) ++n;
    }
    return n;
  }

  TempDir tmp_;
  TempDir reports_;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

bool Contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST_F(KorovodrunTest, PrefixesEveryLineWithoutInterleaving) {
  auto r = Run({"-np", "4", "/bin/sh", "-c",
                "i=0; while [ $i -lt 1000 ]; do "
                "echo \"rank $KOROVOD_RANK line $i 0123456789abcdefghijklmnopqrstuvwxyz\"; "
                "i=$((i+1)); done; echo \"to stderr from $KOROVOD_RANK\" >&2"});
  ASSERT_TRUE(r.status.success()) << r.status.Describe() << "\n" << r.err;
  std::regex line_re(R"(\[(\d)\] rank (\d) line (\d+) 0123456789abcdefghijklmnopqrstuvwxyz)");
  int next[4] = {0, 0, 0, 0};
  for (const std::string& line : Lines(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "mangled line: " << line;
    int rank = std::stoi(m[1]);
    ASSERT_EQ(rank, std::stoi(m[2])) << line;
    ASSERT_EQ(next[rank], std::stoi(m[3])) << "out of order for rank " << rank;
    ++next[rank];
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(next[rank], 1000) << "rank " << rank;
    std::string e = "[" + std::to_string(rank) + "] to stderr from " + std::to_string(rank) + "\n";
    EXPECT_TRUE(Contains(r.err, e)) << r.err;
  }
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, PartialLastLineIsFlushed) {
  auto r = Run({"-np", "1", "/bin/sh", "-c", "printf 'first\\nno newline'"});
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(r.out, "[0] first\n[0] no newline\n");
  ExpectCleanedUp();
}

// Each trainer prints its layout; the fake sidecars check their own contract and report it.
struct Layout {
  int local_rank, local_size, cross_rank, cross_size;
};

void CheckLayout(const LaunchResult& r, const std::vector<Layout>& want) {
  ASSERT_TRUE(r.status.success()) << r.status.Describe() << "\n" << r.err;
  for (size_t rank = 0; rank < want.size(); ++rank) {
    const Layout& w = want[rank];
    std::ostringstream line;
    line << "[" << rank << "] K " << rank << " " << want.size() << " " << w.local_rank << " "
         << w.local_size << " " << w.cross_rank << " " << w.cross_size << " H " << rank << " "
         << want.size() << " " << w.local_rank << " " << w.local_size << " " << w.cross_rank << " "
         << w.cross_size << " unset unset unset";
    EXPECT_TRUE(Contains(r.out, line.str() + "\n")) << "want " << line.str() << "\ngot:\n" << r.out;
  }
}

const char* kPrintLayout =
    "echo K $KOROVOD_RANK $KOROVOD_SIZE $KOROVOD_LOCAL_RANK $KOROVOD_LOCAL_SIZE "
    "$KOROVOD_CROSS_RANK $KOROVOD_CROSS_SIZE H $HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_LOCAL_RANK "
    "$HOROVOD_LOCAL_SIZE $HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE ${KOROVOD_LISTEN_FD-unset} "
    "${KOROVOD_PEERS-unset} ${KOROVOD_JOB_KEY_FILE-unset}; echo S $KOROVOD_SOCKET; "
    "test -S \"$KOROVOD_SOCKET\" || echo no socket at $KOROVOD_SOCKET";

TEST_F(KorovodrunTest, EnvLayoutFourRanksOneHost) {
  auto r = Run({"-np", "4", "/bin/sh", "-c", kPrintLayout});
  CheckLayout(r, {{0, 4, 0, 1}, {1, 4, 0, 1}, {2, 4, 0, 1}, {3, 4, 0, 1}});
  EXPECT_FALSE(Contains(r.out, "no socket")) << r.out;
  // The sidecars' view: peers by rank, their socket path, the same key file and prefix.
  auto s0 = SidecarReport(0);
  for (int rank = 0; rank < 4; ++rank) {
    auto s = SidecarReport(rank);
    EXPECT_EQ(s["KOROVOD_RANK"], std::to_string(rank));
    EXPECT_EQ(s["KOROVOD_SIZE"], "4");
    EXPECT_EQ(s["KOROVOD_LOCAL_SIZE"], "4");
    EXPECT_EQ(s["KOROVOD_PEERS"], s0["KOROVOD_PEERS"]);
    EXPECT_EQ(s["KOROVOD_JOB_KEY_FILE"], s0["KOROVOD_JOB_KEY_FILE"]);
    EXPECT_EQ(s["KOROVOD_SHM_PREFIX"], s0["KOROVOD_SHM_PREFIX"]);
    EXPECT_EQ(s.count("KOROVOD_TIMELINE"), 0u);
    std::string sock = s["KOROVOD_SOCKET"];
    EXPECT_TRUE(Contains(r.out, "[" + std::to_string(rank) + "] S " + sock + "\n")) << r.out;
    EXPECT_EQ(
        std::filesystem::path(sock).parent_path().string().rfind(tmp_.path() + "/korovodrun-", 0),
        0u)
        << sock;
  }
  EXPECT_TRUE(std::regex_match(s0["KOROVOD_PEERS"],
                               std::regex(R"(127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){3})")))
      << s0["KOROVOD_PEERS"];
  EXPECT_TRUE(std::regex_match(s0["KOROVOD_SHM_PREFIX"], std::regex(R"(/korovod-[0-9a-f]+-)")));
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, EnvLayoutTwoVirtualHosts) {
  // Two names for this machine act as two hosts of two slots each.
  auto r = Run({"-np", "4", "-H", "localhost:2,127.0.0.1:2", "/bin/sh", "-c", kPrintLayout});
  CheckLayout(r, {{0, 2, 0, 2}, {1, 2, 0, 2}, {0, 2, 1, 2}, {1, 2, 1, 2}});
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, EnvLayoutUnevenHosts) {
  // 3 + 1: local rank 0 exists on both hosts, local ranks 1 and 2 only on the first.
  auto r = Run({"-np", "4", "-H", "localhost:3,127.0.0.2:4", "/bin/sh", "-c", kPrintLayout});
  CheckLayout(r, {{0, 3, 0, 2}, {1, 3, 0, 1}, {2, 3, 0, 1}, {0, 1, 1, 2}});
  ExpectCleanedUp();
}

const char* kPrintTorchrunVars =
    "echo T $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT";

// torchrun's variables (init_process_group's env://): ranks as korovod's, GROUP_RANK the host's
// index, rank 0's store on loopback at one free port for the whole job.
TEST_F(KorovodrunTest, TorchrunVariablesGiveTheLayout) {
  auto r = Run({"-np", "3", "-H", "localhost:2,127.0.0.2:1", "/bin/sh", "-c", kPrintTorchrunVars});
  ASSERT_TRUE(r.status.success()) << r.status.Describe() << "\n" << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\[0\] T 0 3 0 2 0 127\.0\.0\.1 (\d+)\n)")))
      << r.out;
  const std::string port = m[1];
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_TRUE(Contains(r.out, "[1] T 1 3 1 2 0 127.0.0.1 " + port + "\n")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[2] T 2 3 0 1 1 127.0.0.1 " + port + "\n")) << r.out;
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, TorchrunVariablesTheUserSetAreKept) {
  auto r = Run({"-np", "2", "/bin/sh", "-c", kPrintTorchrunVars},
               {{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29999"}});
  ASSERT_TRUE(r.status.success()) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.out, "[0] T 0 2 0 2 0 10.1.2.3 29999\n")) << r.out;
  EXPECT_TRUE(Contains(r.out, "[1] T 1 2 1 2 0 10.1.2.3 29999\n")) << r.out;
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, TimelineIsPassedToSidecars) {
  auto r = Run({"-np", "2", "--timeline", "/somewhere/tl-{rank}.json", "/bin/true"});
  ASSERT_TRUE(r.status.success()) << r.err;
  EXPECT_EQ(SidecarReport(0)["KOROVOD_TIMELINE"], "/somewhere/tl-{rank}.json");
  EXPECT_EQ(SidecarReport(1)["KOROVOD_TIMELINE"], "/somewhere/tl-{rank}.json");
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, SidecarLinesFilteredUnlessVerbose) {
  auto quiet = Run({"-np", "2", "/bin/true"});
  ASSERT_TRUE(quiet.status.success()) << quiet.err;
  EXPECT_TRUE(
      Contains(quiet.err, "[sidecar 1] fake-sidecar rank 1: warning: this is a test warning\n"))
      << quiet.err;
  EXPECT_FALSE(Contains(quiet.err, "fake-sidecar rank 1 ready")) << quiet.err;
  EXPECT_TRUE(quiet.out.empty()) << quiet.out;
  ExpectCleanedUp();

  auto verbose = Run({"-np", "2", "--verbose", "/bin/true"});
  ASSERT_TRUE(verbose.status.success()) << verbose.err;
  EXPECT_TRUE(Contains(verbose.err, "[sidecar 1] fake-sidecar rank 1 ready\n")) << verbose.err;
  EXPECT_TRUE(Contains(verbose.err, "[sidecar 0] fake-sidecar rank 0 stopping on signal 15\n"))
      << verbose.err;
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, FailingTrainerExitCodeIsPropagated) {
  RunningLauncher l(
      Args({"-np", "3", "/bin/sh", "-c",
            "if [ $KOROVOD_RANK = 1 ]; then echo bye >&2; exit 7; fi; " + SleepingTrainer()}),
      Env());
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 7) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.err, "[1] bye\n")) << r.err;
  EXPECT_TRUE(Contains(r.err, "[korovodrun] launcher: rank 1 trainer exited with code 7\n"))
      << r.err;
  EXPECT_LT(r.seconds, 5.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, TrainerKilledBySignal) {
  auto r = Run({"-np", "3", "/bin/sh", "-c",
                "if [ $KOROVOD_RANK = 2 ]; then kill -9 $$; fi; " + SleepingTrainer()});
  EXPECT_EQ(r.status.code, 1) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(
      Contains(r.err, "[korovodrun] launcher: rank 2 trainer was killed by signal 9 (SIGKILL)\n"))
      << r.err;
  EXPECT_LT(r.seconds, 5.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, TrainerThatCannotBeExecuted) {
  auto r = Run({"-np", "2", "korovodrun-test-no-such-command"});
  EXPECT_EQ(r.status.code, 127) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.err,
                       "trainer could not start: cannot execute "
                       "'korovodrun-test-no-such-command': No such file or directory"))
      << r.err;
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, SidecarFailingAtStartIsNamedWithItsLastLines) {
  auto r = Run({"-np", "3", "/bin/sh", "-c", SleepingTrainer()},
               {{"FAKE_SIDECAR_FAIL_RANK", "1"}, {"FAKE_SIDECAR_MODE", "fail-start"}});
  EXPECT_EQ(r.status.code, 1) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.err, "[korovodrun] launcher: rank 1 sidecar exited with code 4\n"))
      << r.err;
  // The last 50 lines: 10..59 (the warning line was shown when it came).
  EXPECT_TRUE(Contains(r.err, "[sidecar 1] startup line 10\n")) << r.err;
  EXPECT_TRUE(Contains(r.err, "[sidecar 1] startup line 59\n")) << r.err;
  EXPECT_FALSE(Contains(r.err, "[sidecar 1] startup line 9\n")) << r.err;
  // The tail comes before the summary line, which is the last line.
  EXPECT_LT(r.err.find("[sidecar 1] startup line 59\n"),
            r.err.find("[korovodrun] launcher: rank 1 sidecar exited with code 4\n"));
  EXPECT_LT(r.seconds, 5.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, SidecarKilledBySignalLeavesNoSharedMemory) {
  auto r = Run({"-np", "2", "/bin/sh", "-c", SleepingTrainer()},
               {{"FAKE_SIDECAR_FAIL_RANK", "1"}, {"FAKE_SIDECAR_MODE", "kill-self"}});
  EXPECT_EQ(r.status.code, 1) << r.err;
  EXPECT_TRUE(
      Contains(r.err, "[korovodrun] launcher: rank 1 sidecar was killed by signal 9 (SIGKILL)\n"))
      << r.err;
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

// The real korovod-sidecar of `rank` among korovodrun's children (by its environment), or -1.
pid_t RealSidecarOf(pid_t launcher, int rank) {
  for (const std::string& entry : ListDir("/proc")) {
    if (entry.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + entry + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos || text.find("(korovod-sidecar)") == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != launcher) continue;
    std::ifstream env("/proc/" + entry + "/environ");
    std::string vars((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
    const std::string want = "KOROVOD_RANK=" + std::to_string(rank);
    if (vars.find('\0' + want + '\0') != std::string::npos || vars.rfind(want + '\0', 0) == 0) {
      return std::stoi(entry);
    }
  }
  return -1;
}

// The shared-memory objects a process maps ("/name"; unlinked ones too).
std::set<std::string> MappedShmNames(pid_t pid) {
  std::set<std::string> names;
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find("/dev/shm/");
    if (at != std::string::npos) names.insert(line.substr(at + 8, line.find(' ', at) - at - 8));
  }
  return names;
}

// Real sidecars: every shared-memory object of the job (arenas and the transport's segments)
// carries the job's prefix, so a sidecar SIGKILLed mid-run leaves nothing in /dev/shm.
TEST_F(KorovodrunTest, RealSidecarKilledMidRunLeavesNoSharedMemory) {
  const std::string file = reports_.path() + "/prefix$KOROVOD_RANK";
  const std::string trainer = "echo \"$KOROVOD_SHM_PREFIX\" > " + file + ".tmp && mv " + file +
                              ".tmp " + file + " && " + SleepingTrainer();
  RunningLauncher l({"--sidecar", KOROVOD_SIDECAR_PATH, "-np", "2", "/bin/sh", "-c", trainer},
                    Env({{"KOROVOD_ARENA_HEAP_MIB", "4"}}));
  ASSERT_TRUE(l.WaitUntil([&] { return FilesStartingWith("trainer") == 2; }, 30));
  std::string prefix;
  std::ifstream(reports_.path() + "/prefix0") >> prefix;
  ASSERT_EQ(prefix.rfind("/korovod-", 0), 0u) << prefix;
  const pid_t victim = RealSidecarOf(l.pid(), 1);
  ASSERT_GT(victim, 0);
  // Its arena, its peer's arena (the engine reduces straight from it) and the segments of both
  // ranks' shm transport, all under the job's prefix.
  const std::set<std::string> mapped = MappedShmNames(victim);
  EXPECT_EQ(mapped.size(), 4u);
  for (const std::string& name : mapped) EXPECT_EQ(name.rfind(prefix, 0), 0u) << name;
  EXPECT_EQ(mapped.count(prefix + "rank1"), 1u);
  EXPECT_EQ(mapped.count(prefix + "rank0"), 1u);
  EXPECT_FALSE(ShmEntriesWithPrefix(prefix).empty());  // the arenas, until cleanup
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 1) << r.err;
  EXPECT_TRUE(
      Contains(r.err, "[korovodrun] launcher: rank 1 sidecar was killed by signal 9 (SIGKILL)\n"))
      << r.err;
  EXPECT_TRUE(ShmEntriesWithPrefix(prefix).empty())
      << "left in /dev/shm: " << ShmEntriesWithPrefix(prefix)[0];
  EXPECT_TRUE(ListDir(tmp_.path()).empty()) << "left in TMPDIR: " << ListDir(tmp_.path())[0];
  ExpectNoProcessesLeft();
}

TEST_F(KorovodrunTest, SidecarWithoutSocketTimesOut) {
  auto r = Run({"-np", "2", "--start-timeout", "0.5", "/bin/sh", "-c", SleepingTrainer()},
               {{"FAKE_SIDECAR_FAIL_RANK", "1"}, {"FAKE_SIDECAR_MODE", "no-socket"}});
  EXPECT_EQ(r.status.code, 1) << r.err;
  std::regex want(R"(\[korovodrun\] launcher: rank 1 sidecar did not create its socket )" +
                  tmp_.path() + R"(/korovodrun-[0-9a-f]+-\w+/rank1\.sock within 0\.5 s)");
  EXPECT_TRUE(std::regex_search(r.err, want)) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

TEST_F(KorovodrunTest, GracePeriodEndsWithSigkill) {
  // Rank 0's trainer and every sidecar ignore SIGTERM; rank 1 fails.
  auto r = Run({"-np", "2", "--grace-period", "0.3", "/bin/sh", "-c",
                "if [ $KOROVOD_RANK = 1 ]; then sleep 0.2; exit 3; fi; trap '' TERM INT HUP; " +
                    SleepingTrainer()},
               {{"FAKE_SIDECAR_FAIL_RANK", "all"}, {"FAKE_SIDECAR_MODE", "ignore-term"}});
  EXPECT_EQ(r.status.code, 3) << r.err;
  EXPECT_TRUE(Contains(r.err, "[korovodrun] launcher: rank 1 trainer exited with code 3\n"))
      << r.err;
  EXPECT_LT(r.seconds, 4.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

class KorovodrunSignalTest : public KorovodrunTest, public ::testing::WithParamInterface<int> {};

TEST_P(KorovodrunSignalTest, ForwardsAndStopsEverything) {
  const int sig = GetParam();
  RunningLauncher l(Args({"-np", "3", "/bin/sh", "-c", SleepingTrainer()}), Env());
  ASSERT_TRUE(l.WaitUntil([&] { return FilesStartingWith("trainer") == 3; }, 10))
      << "trainers did not start";
  ASSERT_EQ(FilesStartingWith("sidecar"), 3u);
  ASSERT_EQ(::kill(l.pid(), sig), 0);
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 128 + sig) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.err, "WARNING [korovodrun] launcher: interrupted by ")) << r.err;
  EXPECT_LT(r.seconds, 5.0);
  ExpectNoProcessesLeft();
  ExpectCleanedUp();
}

INSTANTIATE_TEST_SUITE_P(Signals, KorovodrunSignalTest, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(sigabbrev_np(info.param));
                         });

TEST_F(KorovodrunTest, SigkilledLauncherLeavesNoOrphans) {
  RunningLauncher l(Args({"-np", "2", "/bin/sh", "-c", SleepingTrainer()}), Env());
  ASSERT_TRUE(l.WaitUntil([&] { return FilesStartingWith("trainer") == 2; }, 10));
  ASSERT_EQ(::kill(l.pid(), SIGKILL), 0);
  auto r = l.Finish();
  EXPECT_TRUE(r.status.signaled);
  // Sidecars and trainers die with korovodrun (PR_SET_PDEATHSIG). Nothing can clean up after a
  // SIGKILL, so the test removes the run directory and segments itself.
  bool gone = l.WaitUntil(
      [&] {
        for (const std::string& name : ListDir(reports_.path())) {
          pid_t pid = 0;
          if (name.rfind("sidecar", 0) == 0) {
            pid = std::stoi(ReadEnvFile(reports_.path() + "/" + name)["PID"]);
          } else if (name.rfind("trainer", 0) == 0) {
            std::ifstream(reports_.path() + "/" + name) >> pid;
          }
          if (pid > 0 && ProcessExists(pid)) return false;
        }
        return true;
      },
      3);
  EXPECT_TRUE(gone);
  ExpectNoProcessesLeft();
  UnlinkShmWithPrefix(SidecarReport(0)["KOROVOD_SHM_PREFIX"]);
}

TEST_F(KorovodrunTest, TmpdirTooLongForUnixSockets) {
  std::string deep = tmp_.path() + "/" + std::string(90, 'd');
  ASSERT_TRUE(std::filesystem::create_directory(deep));
  auto env = Env();
  env["TMPDIR"] = deep;
  RunningLauncher l(Args({"-np", "2", "/bin/true"}), env);
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "set TMPDIR to a shorter directory")) << r.err;
  EXPECT_TRUE(ListDir(deep).empty());
  EXPECT_TRUE(ListDir(reports_.path()).empty()) << "a sidecar was started";
}

TEST_F(KorovodrunTest, DefaultSidecarIsNextToTheBinary) {
  TempDir bin;
  const std::string copy = bin.path() + "/korovodrun";
  std::filesystem::copy_file(KorovodrunPath(), copy);
  {
    // Nothing next to the copy: a clear error naming where it looked, exit 2.
    RunningLauncher l({"-np", "1", "/bin/true"}, Env(), copy);
    auto r = l.Finish();
    EXPECT_EQ(r.status.code, 2) << r.err;
    EXPECT_TRUE(Contains(r.err, "ERROR [korovodrun] launcher: no executable sidecar at " +
                                    bin.path() + "/korovod-sidecar"))
        << r.err;
    EXPECT_TRUE(ListDir(tmp_.path()).empty());
  }
  std::filesystem::copy_file(FakeSidecarPath(), bin.path() + "/korovod-sidecar");
  RunningLauncher l({"-np", "2", "/bin/true"}, Env(), copy);
  auto r = l.Finish();
  EXPECT_TRUE(r.status.success()) << r.status.Describe() << "\n" << r.err;
  EXPECT_EQ(FilesStartingWith("sidecar"), 2u);
  ExpectCleanedUp();
}

// Usage errors: usage on stderr, exit 2, nothing started.
class KorovodrunUsageTest : public KorovodrunTest,
                            public ::testing::WithParamInterface<std::vector<std::string>> {};

TEST_P(KorovodrunUsageTest, ExitsTwoWithUsage) {
  RunningLauncher l(GetParam(), Env());
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 2) << r.status.Describe() << "\n" << r.err;
  EXPECT_TRUE(Contains(r.err, " ERROR [korovodrun] launcher: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "usage: korovodrun -np N")) << r.err;
  EXPECT_TRUE(r.out.empty());
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
  EXPECT_TRUE(ListDir(reports_.path()).empty());
}

INSTANTIATE_TEST_SUITE_P(
    Usage, KorovodrunUsageTest,
    ::testing::Values(
        std::vector<std::string>{}, std::vector<std::string>{"/bin/true"},
        std::vector<std::string>{"-np", "2"}, std::vector<std::string>{"-np", "0", "/bin/true"},
        std::vector<std::string>{"-np", "-3", "/bin/true"},
        std::vector<std::string>{"-np", "two", "/bin/true"}, std::vector<std::string>{"-np"},
        std::vector<std::string>{"-np", "2", "--bogus", "/bin/true"},
        std::vector<std::string>{"-np", "2", "-H", "localhost", "/bin/true"},
        std::vector<std::string>{"-np", "2", "-H", "localhost:0", "/bin/true"},
        std::vector<std::string>{"-np", "2", "-H", "localhost:x", "/bin/true"},
        std::vector<std::string>{"-np", "2", "-H", "localhost:1,,", "/bin/true"},
        std::vector<std::string>{"-np", "2", "-H", "localhost:1,localhost:1", "/bin/true"},
        std::vector<std::string>{"-np", "3", "-H", "localhost:1,127.0.0.1:1", "/bin/true"},
        std::vector<std::string>{"-np", "2", "--start-timeout", "0", "/bin/true"},
        std::vector<std::string>{"-np", "2", "--verbose=yes", "/bin/true"}));

TEST_F(KorovodrunTest, NonLocalHostIsRejected) {
  RunningLauncher l(Args({"-np", "2", "-H", "localhost:1,192.0.2.7:1", "/bin/true"}), Env());
  auto r = l.Finish();
  EXPECT_EQ(r.status.code, 2);
  // One log line: time, level, role, subsystem, then the message.
  EXPECT_TRUE(std::regex_match(
      r.err,
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR \[korovodrun\] launcher: )"
                 R"(korovodrun starts ranks on this machine only; 192\.0\.2\.7 is not local )"
                 R"(\(use the operator for multi-host jobs\)\n)")))
      << r.err;
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
  EXPECT_TRUE(ListDir(reports_.path()).empty());
}

}  // namespace
}  // namespace korovod::launcher::testing
