#include "runtime/core/timeline/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "common/fd.h"
#include "common/json_escape.h"

namespace korovod {
namespace {

// The writer wakes at least this often, and sooner once the batch holds kFlushBytes.
constexpr auto kFlushInterval = std::chrono::milliseconds(100);
constexpr size_t kFlushBytes = size_t{1} << 20;

// Writes all of `data`; returns 0 or the errno of the failing write.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

void AppendInt(std::string& out, int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

// Nanoseconds as microseconds with three decimals, exactly ("-1234.005").
void AppendMicros(std::string& out, int64_t ns) {
  uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  if (ns < 0) out.push_back('-');
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof(buf), mag / 1000);
  out.append(buf, r.ptr);
  const unsigned frac = static_cast<unsigned>(mag % 1000);
  out.push_back('.');
  out.push_back(static_cast<char>('0' + frac / 100));
  out.push_back(static_cast<char>('0' + frac / 10 % 10));
  out.push_back(static_cast<char>('0' + frac % 10));
}

bool LooksLikeJsonObject(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b != std::string_view::npos && s[b] == '{' && s[e] == '}';
}

Status OpenError(const std::string& what, int err) {
  const StatusCode code =
      (err == EACCES || err == EPERM || err == EROFS)      ? StatusCode::kPermissionDenied
      : (err == ENOENT || err == ENOTDIR || err == EISDIR) ? StatusCode::kInvalidArgument
                                                           : StatusCode::kUnavailable;
  return ErrnoStatus(code, what, err);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

struct Timeline::State {
  struct Lane {
    int64_t tid;
    int open_spans = 0;  // so that an End without a Start cannot unbalance the lane
    std::list<const std::string*>::iterator use;  // its place in `lru`
  };

  TimelineOptions options;
  Fd fd;

  // Guarded by mu: the events not yet written (each preceded by ",\n"), the lanes, the next tid
  // and the cycle lane's tid (0 until the first MarkCycle).
  std::mutex mu;
  std::condition_variable_any cv;
  std::string batch;
  std::unordered_map<std::string, Lane, StringHash, std::equal_to<>> lanes;
  // The lanes' names (keys of `lanes`, whose nodes do not move), least recently used first.
  std::list<const std::string*> lru;
  int64_t next_tid = 1;
  int64_t cycle_tid = 0;

  mutable std::mutex status_mu;
  Status status;  // guarded by status_mu: the first write error

  std::jthread writer;  // last: stopped and joined before the members above go away

  void RecordWriteError(int err) {
    std::lock_guard<std::mutex> lock(status_mu);
    if (status.ok()) status = ErrnoStatus(StatusCode::kUnavailable, "write " + options.path, err);
  }

  bool failed() const {
    std::lock_guard<std::mutex> lock(status_mu);
    return !status.ok();
  }

  // Writes `data` unless an earlier write failed (then the events are dropped).
  void Write(std::string_view data) {
    if (data.empty() || failed()) return;
    if (const int err = WriteAll(fd.get(), data); err != 0) RecordWriteError(err);
  }

  void WriterLoop(std::stop_token stop) {
    std::string out;
    bool stopping = false;
    while (!stopping) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, stop, kFlushInterval, [&] { return batch.size() >= kFlushBytes; });
        out.swap(batch);
        // Recording ends before the destructor requests the stop, so once it is seen every event
        // is in `out`.
        stopping = stop.stop_requested();
      }
      Write(out);
      out.clear();  // keeps its capacity for the next swap, unless a burst made it large
      if (out.capacity() > 4 * kFlushBytes) out = std::string();
    }
  }

  // ---- Event building; callers hold mu. ----

  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void BeginEvent(std::string_view ph) {
    batch.append(",\n{\"ph\":\"");
    batch.append(ph);
    batch.append("\",\"pid\":");
    AppendInt(batch, options.rank);
  }

  void AppendTidTs(int64_t tid) {
    batch.append(",\"tid\":");
    AppendInt(batch, tid);
    batch.append(",\"ts\":");
    AppendMicros(batch, NowNs());
  }

  void AppendName(std::string_view prefix, std::string_view name) {
    batch.append(",\"name\":\"");
    batch.append(prefix);
    AppendJsonEscaped(batch, name);
    batch.push_back('"');
  }

  void ThreadNameEvent(int64_t tid, std::string_view name) {
    BeginEvent("M");
    batch.append(",\"tid\":");
    AppendInt(batch, tid);
    batch.append(",\"name\":\"thread_name\",\"args\":{\"name\":\"");
    AppendJsonEscaped(batch, name);
    batch.append("\"}}");
  }

  // The lane of `tensor`, allocated (with its thread_name event) on first use.
  Lane& LaneOf(std::string_view tensor) {
    auto it = lanes.find(tensor);
    if (it != lanes.end()) {
      lru.splice(lru.end(), lru, it->second.use);
      return it->second;
    }
    EvictIdleLanes();
    it = lanes.emplace(std::string(tensor), Lane{next_tid++, 0, {}}).first;
    it->second.use = lru.insert(lru.end(), &it->first);
    ThreadNameEvent(it->second.tid, tensor);
    return it->second;
  }

  // Keeps at most kMaxTimelineLanes lanes: the least recently used lanes without an open span
  // go (a name seen again gets a new lane, with its own thread_name event). Lanes with open
  // spans stay, so the cap can be passed only by the ops in flight at once.
  void EvictIdleLanes() {
    auto u = lru.begin();
    while (lanes.size() >= kMaxTimelineLanes && u != lru.end()) {
      const auto l = lanes.find(**u);
      if (l->second.open_spans > 0) {
        ++u;
        continue;
      }
      u = lru.erase(u);
      lanes.erase(l);
    }
  }

  // Wakes the writer early once the batch crosses kFlushBytes.
  void Appended(size_t size_before) {
    if (size_before < kFlushBytes && batch.size() >= kFlushBytes) cv.notify_one();
  }

  void Begin(std::string_view tensor, std::string_view prefix, std::string_view name,
             std::string_view args) {
    std::lock_guard<std::mutex> lock(mu);
    const size_t before = batch.size();
    Lane& lane = LaneOf(tensor);
    ++lane.open_spans;
    BeginEvent("B");
    AppendTidTs(lane.tid);
    AppendName(prefix, name);
    if (!args.empty()) {
      batch.append(",\"args\":");
      if (LooksLikeJsonObject(args)) {
        batch.append(args);
      } else {
        batch.append("{\"text\":\"");
        AppendJsonEscaped(batch, args);
        batch.append("\"}");
      }
    }
    batch.push_back('}');
    Appended(before);
  }

  void EndSpan(std::string_view tensor) {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = lanes.find(tensor);
    if (it == lanes.end() || it->second.open_spans == 0) return;
    --it->second.open_spans;
    lru.splice(lru.end(), lru, it->second.use);
    const size_t before = batch.size();
    BeginEvent("E");
    AppendTidTs(it->second.tid);
    batch.push_back('}');
    Appended(before);
  }
};

StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const TimelineOptions& options) {
  if (options.path.empty()) return InvalidArgument("timeline: empty path");
  const int fd = ::open(options.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return OpenError("open timeline " + options.path, errno);

  auto state = std::make_unique<State>();
  state->options = options;
  state->fd = Fd(fd);

  // The header and metadata are written here, synchronously, so that even a rank killed right
  // after start-up leaves a file the merger recognizes.
  std::string& h = state->batch;
  const std::string rank = std::to_string(options.rank);
  h = "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + rank + ",\"args\":{\"name\":\"rank " +
      rank + "\"}}";
  h += ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + rank +
       ",\"args\":{\"sort_index\":" + rank + "}}";
  h += ",\n{\"name\":\"korovod_clock\",\"ph\":\"M\",\"pid\":" + rank +
       ",\"args\":{\"rank\":" + rank + ",\"clock_offset_us\":";
  AppendMicros(h, options.clock_offset_ns);
  h += "}}";
  if (const int err = WriteAll(fd, h); err != 0) {
    return OpenError("write timeline header " + options.path, err);
  }
  h.clear();

  State* s = state.get();
  state->writer = std::jthread([s](std::stop_token stop) { s->WriterLoop(std::move(stop)); });
  return std::unique_ptr<Timeline>(new Timeline(std::move(state)));
}

Timeline::Timeline(std::unique_ptr<State> state) : state_(std::move(state)) {}

Timeline::~Timeline() {
  state_->writer.request_stop();
  state_->writer.join();  // the writer has written every recorded event
  state_->Write("\n]\n");
  // Fd closes the file.
}

void Timeline::NegotiateStart(std::string_view tensor, std::string_view op) {
  state_->Begin(tensor, "NEGOTIATE_", op, {});
}

void Timeline::NegotiateRankReady(std::string_view tensor, int rank) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t before = s.batch.size();
  const int64_t tid = s.LaneOf(tensor).tid;
  s.BeginEvent("i");
  s.AppendTidTs(tid);
  s.batch.append(",\"s\":\"t\",\"name\":\"READY rank ");
  AppendInt(s.batch, rank);
  s.batch.append("\",\"args\":{\"rank\":");
  AppendInt(s.batch, rank);
  s.batch.append("}}");
  s.Appended(before);
}

void Timeline::NegotiateEnd(std::string_view tensor) { state_->EndSpan(tensor); }

void Timeline::Start(std::string_view tensor, std::string_view activity, std::string_view args) {
  state_->Begin(tensor, {}, activity, args);
}

void Timeline::End(std::string_view tensor) { state_->EndSpan(tensor); }

void Timeline::MarkCycle() {
  State& s = *state_;
  if (!s.options.mark_cycles) return;
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t before = s.batch.size();
  if (s.cycle_tid == 0) {
    s.cycle_tid = s.next_tid++;
    s.ThreadNameEvent(s.cycle_tid, "cycle");
  }
  s.BeginEvent("i");
  s.AppendTidTs(s.cycle_tid);
  s.batch.append(",\"s\":\"t\",\"name\":\"CYCLE_START\"}");
  s.Appended(before);
}

std::string ExpandTimelinePath(std::string_view path, int rank) {
  // One pass: the path comes from the trainer (StartTimeline), and searching again from the start
  // after each replacement is quadratic in the number of "{rank}"s.
  const std::string r = std::to_string(rank);
  std::string out;
  out.reserve(path.size());
  for (size_t at = 0;;) {
    const size_t found = path.find("{rank}", at);
    out.append(path.substr(at, found - at));
    if (found == std::string_view::npos) break;
    out += r;
    at = found + 6;
  }
  return out;
}

const std::string& Timeline::path() const { return state_->options.path; }

size_t Timeline::lanes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->lanes.size();
}

Status Timeline::status() const {
  std::lock_guard<std::mutex> lock(state_->status_mu);
  return state_->status;
}

}  // namespace korovod
