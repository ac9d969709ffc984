"""horovodrun on korovod: Horovod's launcher command line, run by korovodrun.

`horovodrun -np 4 --fusion-threshold-mb 32 --timeline-filename tl.json python3 train.py` runs
`korovodrun -np 4 --timeline tl.json -- python3 train.py` with KOROVOD_FUSION_THRESHOLD=33554432
in its environment: korovodrun's children inherit it, and the engine in every sidecar reads it
(docs/configuration.md). Each flag maps to a korovodrun flag or an engine variable; a flag that
means nothing here is an error naming it, never dropped, so a job never runs with settings other
than the ones asked for.

korovodrun starts every rank on this machine: -H and --hostfile may name only this machine's
names and addresses (korovodrun refuses any other host; a multi-host job is a HorovodJob, see
docs/operator.md).
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading

USAGE = """\
usage: horovodrun -np N [-H host:slots,... | --hostfile FILE] [flags] command...

Horovod's launcher on korovod: runs the command under korovodrun (N sidecars and N trainers on
this machine). Each flag maps to a korovodrun flag or an engine variable:
  -np, --num-proc N                    korovodrun -np N
  -H, --hosts host:slots,...           korovodrun -H; every host must be this machine
  -hostfile, --hostfile FILE           lines 'hostname slots=N', as -H
  --start-timeout S                    korovodrun --start-timeout S and
                                       KOROVOD_START_TIMEOUT_SECONDS=S
                                       (default: $HOROVOD_START_TIMEOUT)
  --network-interface(s) IF[,IF...]    checked to exist; ranks on one machine meet over loopback
  --output-filename DIR                also writes rank R's output to DIR/rank.R/{stdout,stderr}
  --verbose                            korovodrun --verbose
  --log-level LEVEL                    KOROVOD_LOG_LEVEL (FATAL: error); TRACE, DEBUG and INFO
                                       also korovodrun --verbose, which shows those lines
  --fusion-threshold-mb MB             KOROVOD_FUSION_THRESHOLD (bytes)
  --cycle-time-ms MS                   KOROVOD_CYCLE_TIME
  --cache-capacity N                   KOROVOD_CACHE_CAPACITY
  --timeline-filename FILE             korovodrun --timeline FILE (KOROVOD_TIMELINE)
  --[no-]timeline-mark-cycles          KOROVOD_TIMELINE_MARK_CYCLES
  --[no-]autotune                      KOROVOD_AUTOTUNE
  --[no-]hierarchical-allreduce        KOROVOD_HIERARCHICAL_ALLREDUCE (1/0; auto when absent)
  --autotune-log-file FILE             KOROVOD_AUTOTUNE_LOG
  --autotune-warmup-samples N          KOROVOD_AUTOTUNE_WARMUP_SAMPLES
  --autotune-steps-per-sample N        KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE
  --autotune-bayes-opt-max-samples N   KOROVOD_AUTOTUNE_MAX_TRIALS
  --autotune-gaussian-process-noise X  checked (0 to 1); the engine fits the noise to its samples
  --no-stall-check                     KOROVOD_STALL_CHECK_TIME_SECONDS=0
  --stall-check-warning-time-seconds S KOROVOD_STALL_CHECK_TIME_SECONDS
  --stall-check-shutdown-time-seconds S KOROVOD_STALL_SHUTDOWN_TIME_SECONDS
  --gloo, --mpi                        accepted: the korovod engine replaces either controller
  -v, --version                        print the version
  -h, --help                           this text
Any other flag is an error. korovodrun --help lists korovodrun's own flags.
"""

LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")
# Horovod's level -> KOROVOD_LOG_LEVEL (korovod has no fatal level: its errors stop the job).
_KOROVOD_LOG_LEVELS = {"TRACE": "trace", "DEBUG": "debug", "INFO": "info", "WARNING": "warning",
                       "ERROR": "error", "FATAL": "error"}
# korovodrun shows a sidecar's warnings and errors; lines below those only with --verbose.
_VERBOSE_LOG_LEVELS = ("TRACE", "DEBUG", "INFO")
_MIB = 1024 * 1024


class UsageError(Exception):
    """A command line horovodrun cannot run; the message names the flag."""


def _int(low):
    def convert(flag, text):
        try:
            value = int(text)
        except ValueError:
            raise UsageError("%s needs a whole number, got %r" % (flag, text)) from None
        if value < low:
            raise UsageError("%s must be at least %d, got %d" % (flag, low, value))
        return value
    return convert


def _number(low, high=None, low_open=False):
    def convert(flag, text):
        try:
            value = float(text)
        except ValueError:
            raise UsageError("%s needs a number, got %r" % (flag, text)) from None
        if (value != value or value < low or (low_open and value == low)
                or (high is not None and value > high)):
            bounds = "%s %g" % ("above" if low_open else "at least", low)
            if high is not None:
                bounds += " and at most %g" % high
            raise UsageError("%s must be %s, got %s" % (flag, bounds, text))
        return value
    return convert


def _text(flag, text):
    if not text:
        raise UsageError("%s needs a value" % flag)
    return text


def _names(flag, text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError("%s needs an interface name" % flag)
    return names


def _log_level(flag, text):
    if text.upper() not in LOG_LEVELS:
        raise UsageError("%s must be one of %s, got %r" % (flag, ", ".join(LOG_LEVELS), text))
    return text.upper()


# Flag -> (option name, conversion of its value).
_VALUE_FLAGS = {
    "-np": ("num_proc", _int(1)),
    "--num-proc": ("num_proc", _int(1)),
    "-H": ("hosts", _text),
    "--hosts": ("hosts", _text),
    "-hostfile": ("hostfile", _text),
    "--hostfile": ("hostfile", _text),
    "--start-timeout": ("start_timeout", _number(0, low_open=True)),
    "--network-interface": ("nics", _names),
    "--network-interfaces": ("nics", _names),
    "--output-filename": ("output_filename", _text),
    "--log-level": ("log_level", _log_level),
    "--fusion-threshold-mb": ("fusion_threshold_mb", _int(0)),
    "--cycle-time-ms": ("cycle_time_ms", _number(0, 60000, low_open=True)),
    "--cache-capacity": ("cache_capacity", _int(0)),
    "--timeline-filename": ("timeline_filename", _text),
    "--autotune-log-file": ("autotune_log_file", _text),
    "--autotune-warmup-samples": ("autotune_warmup_samples", _int(0)),
    "--autotune-steps-per-sample": ("autotune_steps_per_sample", _int(1)),
    "--autotune-bayes-opt-max-samples": ("autotune_bayes_opt_max_samples", _int(1)),
    "--autotune-gaussian-process-noise": ("autotune_gaussian_process_noise", _number(0, 1)),
    "--stall-check-warning-time-seconds": ("stall_check_warning_time_seconds", _int(0)),
    "--stall-check-shutdown-time-seconds": ("stall_check_shutdown_time_seconds", _int(0)),
    # Elastic (korovodrun takes the same flags).
    "--min-np": ("min_np", _int(1)),
    "--min-num-proc": ("min_np", _int(1)),
    "--max-np": ("max_np", _int(1)),
    "--max-num-proc": ("max_np", _int(1)),
    "--slots-per-host": ("slots_per_host", _int(1)),
    "--elastic-timeout": ("elastic_timeout", _number(0, low_open=True)),
    "--reset-limit": ("reset_limit", _int(0)),
    "--host-discovery-script": ("host_discovery_script", _text),
}
_ELASTIC_KEYS = ("min_np", "max_np", "host_discovery_script")

# Flag -> (option name, value it sets).
_SWITCHES = {
    "--verbose": ("verbose", True),
    "--timeline-mark-cycles": ("timeline_mark_cycles", True),
    "--no-timeline-mark-cycles": ("timeline_mark_cycles", False),
    "--autotune": ("autotune", True),
    "--no-autotune": ("autotune", False),
    "--hierarchical-allreduce": ("hierarchical_allreduce", True),
    "--no-hierarchical-allreduce": ("hierarchical_allreduce", False),
    "--no-stall-check": ("no_stall_check", True),
    "--stall-check": ("no_stall_check", False),
    "--gloo": ("controller", "--gloo"),
    "--mpi": ("controller", "--mpi"),
    "-h": ("help", True),
    "--help": ("help", True),
    "-v": ("version", True),
    "--version": ("version", True),
}

_NO_SSH = "korovodrun uses no SSH: every rank runs on this machine"
_NO_MPI = "korovod runs no MPI"
_NO_TIMESTAMP = "korovodrun prefixes each output line with its rank, not a timestamp"
_NO_HIERARCHICAL = ("allgather is not hierarchical in korovod (allreduce is: "
                    "--hierarchical-allreduce)")
# Horovod flags that have no korovod equivalent, with the reason the error gives.
_UNSUPPORTED = {
    "-cb": "korovod has no Horovod build to check; python3 -c 'import horovod.torch' checks the "
           "installed package",
    "--check-build": "korovod has no Horovod build to check; python3 -c 'import horovod.torch' "
                     "checks the installed package",
    "--disable-cache": "there is no host-check cache: " + _NO_SSH,
    "-p": _NO_SSH,
    "--ssh-port": _NO_SSH,
    "-i": _NO_SSH,
    "--ssh-identity-file": _NO_SSH,
    "--config-file": "give the settings as flags",
    "--hierarchical-allgather": _NO_HIERARCHICAL,
    "--no-hierarchical-allgather": _NO_HIERARCHICAL,
    "--jsrun": _NO_MPI,
    "--mpi-args": _NO_MPI,
    "--mpi-threads-disable": _NO_MPI,
    "--no-mpi-threads-disable": _NO_MPI,
    "--binding-args": _NO_MPI,
    "--tcp": "korovodrun connects ranks on one machine over shared memory and loopback TCP itself",
    "--num-nccl-streams": "GPU tensors do not go through the korovod sidecar yet",
    "--thread-affinity": "the engine has no thread-affinity setting",
    "--gloo-timeout-seconds": "korovod runs no Gloo; --start-timeout bounds the start",
    "--log-with-timestamp": _NO_TIMESTAMP,
    "--log-without-timestamp": _NO_TIMESTAMP,
    "--log-hide-timestamp": _NO_TIMESTAMP,
    "--no-log-hide-timestamp": _NO_TIMESTAMP,
    "-prefix-timestamp": _NO_TIMESTAMP,
    "--prefix-output-with-timestamp": _NO_TIMESTAMP,
}


def parse_args(argv):
    """horovodrun's command line -> (options dict, command list). Raises UsageError."""
    opts = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break  # the command starts here
        name, inline = arg, None
        if "=" in arg:  # --flag=value, and -np=4 as argparse takes it
            name, inline = arg.split("=", 1)
        if name in _VALUE_FLAGS:
            key, convert = _VALUE_FLAGS[name]
            if inline is None:
                i += 1
                if i == len(argv):
                    raise UsageError("%s needs a value" % name)
                inline = argv[i]
            value = convert(name, inline)
            if key == "nics":  # repeatable, as in Horovod
                nics = opts.setdefault(key, [])
                for nic in value:
                    if nic not in nics:
                        nics.append(nic)
            else:
                opts[key] = value
        elif name == "--blacklist-cooldown-range":  # two values: LO HI
            if inline is not None or i + 2 >= len(argv):
                raise UsageError("%s needs two numbers of seconds: LO HI" % name)
            lo = _number(0, low_open=True)(name, argv[i + 1])
            hi = _number(0, low_open=True)(name, argv[i + 2])
            if hi < lo:
                raise UsageError("%s: HI (%s) is below LO (%s)" % (name, argv[i + 2], argv[i + 1]))
            opts["blacklist_cooldown"] = (lo, hi)
            i += 2
        elif name in _SWITCHES:
            if inline is not None:
                raise UsageError("%s takes no value" % name)
            key, value = _SWITCHES[name]
            if key == "controller" and opts.get(key, value) != value:
                raise UsageError("--gloo and --mpi exclude each other")
            opts[key] = value
        elif name in _UNSUPPORTED:
            raise UsageError("%s is not supported: %s" % (name, _UNSUPPORTED[name]))
        else:
            raise UsageError("unknown flag %s (horovodrun --help lists the flags it takes)" % arg)
        i += 1
    command = list(argv[i:])
    if opts.get("help") or opts.get("version"):
        return opts, command
    elastic = any(k in opts for k in _ELASTIC_KEYS)
    if "num_proc" not in opts and not (elastic and "min_np" in opts):
        raise UsageError("-np N is required" + (" (or --min-np N)" if elastic else ""))
    if not elastic:
        for key, flag in (("reset_limit", "--reset-limit"), ("elastic_timeout", "--elastic-timeout"),
                          ("blacklist_cooldown", "--blacklist-cooldown-range"),
                          ("slots_per_host", "--slots-per-host")):
            if key in opts:
                raise UsageError("%s applies to elastic jobs only (--min-np, --max-np or "
                                 "--host-discovery-script)" % flag)
    if elastic and "output_filename" in opts:
        raise UsageError("--output-filename is not supported for elastic jobs: a worker's rank "
                         "changes with each epoch (korovodrun prefixes its lines with the worker)")
    if "hosts" in opts and "hostfile" in opts:
        raise UsageError("-H and --hostfile exclude each other")
    if opts.get("no_stall_check"):
        for key in ("stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds"):
            if key in opts:
                raise UsageError("--no-stall-check contradicts --%s" % key.replace("_", "-"))
    if not command:
        raise UsageError("no command to run")
    return opts, command


def read_hostfile(path):
    """Horovod's host file (`hostname slots=N` per line; `#` comments) -> "host:N,..." for -H."""
    entries = []
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError("--hostfile %s: %s" % (path, e.strerror or e)) from None
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"(\S+)\s+slots\s*=\s*(\d+)", line)
        if not m:
            raise UsageError("--hostfile %s line %d: expected 'hostname slots=N', got %r"
                             % (path, number, line))
        entries.append("%s:%s" % m.groups())
    if not entries:
        raise UsageError("--hostfile %s lists no host" % path)
    return ",".join(entries)


def _seconds(value):
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class Launch:
    """What to run: korovodrun's arguments (after its name), the variables to add to its
    environment, and notes for stderr about flags accepted without an effect here."""

    def __init__(self, args, env, notes, output_filename, num_proc):
        self.args = args
        self.env = env
        self.notes = notes
        self.output_filename = output_filename
        self.num_proc = num_proc


def plan(opts, command, environ=None, interfaces=None):
    """Maps parsed options to a Launch. `environ` (default os.environ) supplies
    HOROVOD_START_TIMEOUT; `interfaces` (default this machine's) checks --network-interface."""
    environ = os.environ if environ is None else environ
    args = ["-np", str(opts["num_proc"])] if "num_proc" in opts else []
    env = {}
    notes = []
    for key, flag in (("min_np", "--min-np"), ("max_np", "--max-np"),
                      ("host_discovery_script", "--host-discovery-script"),
                      ("slots_per_host", "--slots-per-host"), ("reset_limit", "--reset-limit")):
        if key in opts:
            args += [flag, str(opts[key])]
    if "elastic_timeout" in opts:
        args += ["--elastic-timeout", _seconds(opts["elastic_timeout"])]
    if "blacklist_cooldown" in opts:
        args += ["--blacklist-cooldown-range"] + [_seconds(v) for v in opts["blacklist_cooldown"]]

    hosts = opts.get("hosts")
    if "hostfile" in opts:
        hosts = read_hostfile(opts["hostfile"])
    if hosts:
        args += ["-H", hosts]  # korovodrun rejects a host that is not this machine, naming it

    start_timeout = opts.get("start_timeout")
    if start_timeout is None and environ.get("HOROVOD_START_TIMEOUT"):
        # As Horovod's horovodrun: the variable is the default of --start-timeout.
        start_timeout = _number(0, low_open=True)("HOROVOD_START_TIMEOUT",
                                                  environ["HOROVOD_START_TIMEOUT"])
    if start_timeout is not None:
        # Horovod's timeout covers starting every process and their meeting: korovodrun's bounds
        # a sidecar's start, the sidecar's its rendezvous, mesh and link probe.
        args += ["--start-timeout", _seconds(start_timeout)]
        env["KOROVOD_START_TIMEOUT_SECONDS"] = _seconds(start_timeout)

    if "timeline_filename" in opts:
        args += ["--timeline", opts["timeline_filename"]]
    verbose = opts.get("verbose", False) or opts.get("log_level") in _VERBOSE_LOG_LEVELS
    if verbose:
        args.append("--verbose")
    if "log_level" in opts:
        env["KOROVOD_LOG_LEVEL"] = _KOROVOD_LOG_LEVELS[opts["log_level"]]

    if "fusion_threshold_mb" in opts:
        env["KOROVOD_FUSION_THRESHOLD"] = str(opts["fusion_threshold_mb"] * _MIB)
    if "cycle_time_ms" in opts:
        env["KOROVOD_CYCLE_TIME"] = repr(opts["cycle_time_ms"])
    if "cache_capacity" in opts:
        env["KOROVOD_CACHE_CAPACITY"] = str(opts["cache_capacity"])
    if "timeline_mark_cycles" in opts:
        env["KOROVOD_TIMELINE_MARK_CYCLES"] = "1" if opts["timeline_mark_cycles"] else "0"
    if "autotune" in opts:
        env["KOROVOD_AUTOTUNE"] = "1" if opts["autotune"] else "0"
    if "hierarchical_allreduce" in opts:
        env["KOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if opts["hierarchical_allreduce"] else "0"
    if "autotune_log_file" in opts:
        env["KOROVOD_AUTOTUNE_LOG"] = opts["autotune_log_file"]
    if "autotune_warmup_samples" in opts:
        env["KOROVOD_AUTOTUNE_WARMUP_SAMPLES"] = str(opts["autotune_warmup_samples"])
    if "autotune_steps_per_sample" in opts:
        # Horovod's "steps" are the background cycles that had tensors to process.
        env["KOROVOD_AUTOTUNE_CYCLES_PER_SAMPLE"] = str(opts["autotune_steps_per_sample"])
    if "autotune_bayes_opt_max_samples" in opts:
        # Each Horovod Bayesian-optimisation sample scores one set of parameters: a trial here.
        env["KOROVOD_AUTOTUNE_MAX_TRIALS"] = str(opts["autotune_bayes_opt_max_samples"])
    if "autotune_gaussian_process_noise" in opts:
        notes.append("--autotune-gaussian-process-noise %g is not used: the engine's Gaussian "
                     "process fits its noise to the samples (docs/engine.md)"
                     % opts["autotune_gaussian_process_noise"])
    if opts.get("no_stall_check"):
        env["KOROVOD_STALL_CHECK_TIME_SECONDS"] = "0"
    if "stall_check_warning_time_seconds" in opts:
        env["KOROVOD_STALL_CHECK_TIME_SECONDS"] = str(opts["stall_check_warning_time_seconds"])
    if "stall_check_shutdown_time_seconds" in opts:
        env["KOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(
            opts["stall_check_shutdown_time_seconds"])

    if "nics" in opts:
        if interfaces is None:
            interfaces = [name for _, name in socket.if_nameindex()]
        unknown = [n for n in opts["nics"] if n not in interfaces]
        if unknown:
            raise UsageError("--network-interface: no interface %s on this machine (it has %s)"
                             % (", ".join(unknown), ", ".join(sorted(interfaces))))
        notes.append("--network-interface %s is not used: korovodrun runs every rank on this "
                     "machine, connected over loopback and shared memory" % ",".join(opts["nics"]))
    if "controller" in opts and verbose:
        notes.append("%s: the korovod engine in each sidecar is the controller"
                     % opts["controller"])

    return Launch(args + ["--"] + list(command), env, notes, opts.get("output_filename"),
                  opts.get("num_proc", opts.get("min_np")))


def find_korovodrun(argv0=None):
    """korovodrun next to this horovodrun (pip installs both into one scripts directory), else
    the one on PATH (a build tree's bin/)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if argv0:
        beside = os.path.join(os.path.dirname(os.path.abspath(argv0)), "korovodrun")
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    found = shutil.which("korovodrun")
    if found:
        return found
    raise UsageError("korovodrun not found next to %s or on PATH (pip install . installs it; for "
                     "a build tree, put its bin/ on PATH)" % (argv0 or "horovodrun"))


_RANK_PREFIX = re.compile(rb"\[(\d+)\] ")


def run_with_output_files(korovodrun, launch, env):
    """Runs korovodrun as a child and, as Horovod's --output-filename, also writes each rank's
    lines (korovodrun prefixes them `[rank] `) to <dir>/rank.<rank>/stdout and stderr, rank padded
    with zeros to sort. Returns the exit code."""
    width = len(str(launch.num_proc - 1))
    files = {}
    try:
        for rank in range(launch.num_proc):
            rank_dir = os.path.join(launch.output_filename, "rank.%s" % str(rank).zfill(width))
            os.makedirs(rank_dir, exist_ok=True)
            for stream in ("stdout", "stderr"):
                files[(rank, stream)] = open(os.path.join(rank_dir, stream), "wb")
    except OSError as e:
        raise UsageError("--output-filename %s: %s" % (launch.output_filename, e)) from None

    # Its own process group: a terminal's Ctrl-C reaches korovodrun once, forwarded from here
    # (korovodrun kills at once on a second signal).
    child = subprocess.Popen([korovodrun] + launch.args, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)

    def forward(signum, _frame):
        child.send_signal(signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)

    def pump(source, console, stream):
        for line in iter(source.readline, b""):
            console.write(line)
            console.flush()
            m = _RANK_PREFIX.match(line)
            if m and int(m.group(1)) < launch.num_proc:
                out = files[(int(m.group(1)), stream)]
                out.write(line[m.end():])
                out.flush()

    pumps = [threading.Thread(target=pump, args=(child.stdout, sys.stdout.buffer, "stdout")),
             threading.Thread(target=pump, args=(child.stderr, sys.stderr.buffer, "stderr"))]
    for t in pumps:
        t.start()
    code = child.wait()
    for t in pumps:
        t.join()
    for f in files.values():
        f.close()
    return code if code >= 0 else 128 - code


def main(argv=None):
    """The horovodrun console script. Returns its exit code (2: usage error)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts, command = parse_args(argv)
        if opts.get("help"):
            sys.stdout.write(USAGE)
            return 0
        if opts.get("version"):
            import horovod
            import korovod
            print("horovodrun %s (korovod %s)" % (horovod.__version__, korovod.__version__))
            return 0
        launch = plan(opts, command)
        korovodrun = find_korovodrun()
    except UsageError as e:
        sys.stderr.write("horovodrun: %s\n" % e)
        return 2
    for note in launch.notes:
        sys.stderr.write("horovodrun: note: %s\n" % note)
    env = dict(os.environ)
    env.update(launch.env)
    sys.stdout.flush()
    sys.stderr.flush()
    if launch.output_filename:
        try:
            return run_with_output_files(korovodrun, launch, env)
        except UsageError as e:
            sys.stderr.write("horovodrun: %s\n" % e)
            return 2
    try:
        os.execve(korovodrun, ["korovodrun"] + launch.args, env)
    except OSError as e:
        sys.stderr.write("horovodrun: cannot run %s: %s\n" % (korovodrun, e.strerror or e))
    return 127


if __name__ == "__main__":
    sys.exit(main())
