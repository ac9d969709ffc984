#include "launcher/options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string_view>

namespace korovod::launcher {
namespace {

StatusOr<int> ParsePositiveInt(const std::string& flag, const std::string& text) {
  if (text.empty()) return InvalidArgument(flag + " needs a number");
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < 1 || v > 1000000) {
    return InvalidArgument(flag + " must be a whole number of at least 1, got '" + text + "'");
  }
  return static_cast<int>(v);
}

StatusOr<int> ParseCount(const std::string& flag, const std::string& text) {
  if (text == "0") return 0;
  return ParsePositiveInt(flag, text);
}

StatusOr<double> ParseSeconds(const std::string& flag, const std::string& text, bool allow_zero) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v) ||
      v < 0 || (!allow_zero && v == 0) || v > 1e6) {
    return InvalidArgument(flag + " must be a number of seconds" +
                           (allow_zero ? std::string(" (0 or more)") : std::string(" above 0")) +
                           ", got '" + text + "'");
  }
  return v;
}

}  // namespace

const char* UsageText() {
  return "usage: korovodrun -np N [-H host:slots,...] [--timeline FILE] [--verbose]\n"
         "                  [--sidecar PATH] [--start-timeout S] [--grace-period S] command...\n"
         "\n"
         "Starts N korovod sidecars and N copies of the command on this machine.\n"
         "  -np, --num-proc N    number of ranks (at least 1)\n"
         "  -H, --hosts LIST     virtual hosts for the rank layout, e.g. localhost:2,127.0.0.2:2;\n"
         "                       every host must be this machine (default localhost:N)\n"
         "  --timeline FILE      Horovod timeline; \"{rank}\" in FILE records every rank\n"
         "  --verbose            print every sidecar line and the launcher's progress\n"
         "  --sidecar PATH       the sidecar binary (default: korovod-sidecar next to korovodrun)\n"
         "  --start-timeout S    seconds a sidecar may take to create its socket (default 60)\n"
         "  --grace-period S     seconds between SIGTERM and SIGKILL when stopping (default 5)\n"
         "  -h, --help           this text\n"
         "\n"
         "Elastic jobs (any of --min-np, --max-np, --host-discovery-script; -np is then "
         "optional):\n"
         "  --min-np N           fewest workers to train with (default -np)\n"
         "  --max-np N           most workers (default: every discovered slot)\n"
         "  --host-discovery-script CMD  prints the usable hosts, one host[:slots] per line;\n"
         "                       run every second (default: the -H list, fixed)\n"
         "  --slots-per-host N   slots of a discovered host that names none (default 1)\n"
         "  --elastic-timeout S  how long to wait for enough workers, or for a worker to join a\n"
         "                       new epoch (default 600)\n"
         "  --reset-limit N      most re-formations of the world after the first (default: none)\n"
         "  --blacklist-cooldown-range LO HI  a failing host returns after LO*2^(failures-1) s,\n"
         "                       at most HI (default: never)\n";
}

StatusOr<LauncherOptions> ParseOptions(const std::vector<std::string>& args) {
  LauncherOptions o;
  bool have_np = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-' || a == "-") break;  // the command starts here

    std::string name = a;
    std::optional<std::string> inline_value;
    if (a.rfind("--", 0) == 0) {
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
      }
    }
    auto value = [&]() -> StatusOr<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) return InvalidArgument(name + " needs a value");
      return args[++i];
    };
    auto no_value = [&]() -> Status {
      if (inline_value) return InvalidArgument(name + " takes no value");
      return OkStatus();
    };

    if (name == "-np" || name == "-n" || name == "--num-proc") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(o.num_proc, ParsePositiveInt(name, v));
      have_np = true;
    } else if (name == "-H" || name == "--hosts") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      o.hosts = v;
    } else if (name == "--timeline") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      if (v.empty()) return InvalidArgument("--timeline needs a file name");
      o.timeline = v;
    } else if (name == "--verbose" || name == "-v") {
      KV_RETURN_IF_ERROR(no_value());
      o.verbose = true;
    } else if (name == "--sidecar") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      if (v.empty()) return InvalidArgument("--sidecar needs a path");
      o.sidecar_path = v;
    } else if (name == "--start-timeout") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(o.start_timeout_s, ParseSeconds(name, v, /*allow_zero=*/false));
    } else if (name == "--grace-period") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(o.grace_period_s, ParseSeconds(name, v, /*allow_zero=*/true));
    } else if (name == "--min-np" || name == "--min-num-proc") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(int n, ParsePositiveInt(name, v));
      o.min_np = n;
    } else if (name == "--max-np" || name == "--max-num-proc") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(int n, ParsePositiveInt(name, v));
      o.max_np = n;
    } else if (name == "--host-discovery-script") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      if (v.empty()) return InvalidArgument("--host-discovery-script needs a command");
      o.discovery_script = v;
    } else if (name == "--slots-per-host") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(o.slots_per_host, ParsePositiveInt(name, v));
    } else if (name == "--elastic-timeout") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(o.elastic_timeout_s, ParseSeconds(name, v, /*allow_zero=*/false));
    } else if (name == "--reset-limit") {
      KV_ASSIGN_OR_RETURN(std::string v, value());
      KV_ASSIGN_OR_RETURN(int n, ParseCount(name, v));
      o.reset_limit = n;
    } else if (name == "--blacklist-cooldown-range") {
      if (inline_value || i + 2 >= args.size()) {
        return InvalidArgument(name + " needs two numbers of seconds: LO HI");
      }
      KV_ASSIGN_OR_RETURN(double lo, ParseSeconds(name, args[i + 1], /*allow_zero=*/false));
      KV_ASSIGN_OR_RETURN(double hi, ParseSeconds(name, args[i + 2], /*allow_zero=*/false));
      if (hi < lo) return InvalidArgument(name + ": HI (" + args[i + 2] + ") is below LO");
      o.blacklist_cooldown = std::make_pair(lo, hi);
      i += 2;
    } else if (name == "-h" || name == "--help") {
      KV_RETURN_IF_ERROR(no_value());
      o.help = true;
      return o;
    } else {
      return InvalidArgument("unknown flag '" + a + "'");
    }
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.elastic()) {
    if (!have_np && !o.min_np) return InvalidArgument("-np N or --min-np N is required");
    if (!o.min_np) o.min_np = o.num_proc;
    if (!have_np) o.num_proc = *o.min_np;
    if (o.max_np && *o.max_np < *o.min_np) {
      return InvalidArgument("--max-np " + std::to_string(*o.max_np) + " is below --min-np " +
                             std::to_string(*o.min_np));
    }
  } else if (o.reset_limit || o.blacklist_cooldown) {
    return InvalidArgument(
        std::string(o.reset_limit ? "--reset-limit" : "--blacklist-cooldown-range") +
        " applies to elastic jobs only (--min-np, --max-np or "
        "--host-discovery-script)");
  }
  if (!have_np && !o.elastic()) return InvalidArgument("-np N is required");
  if (o.command.empty()) return InvalidArgument("no command to run");
  return o;
}

}  // namespace korovod::launcher
