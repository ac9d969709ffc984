"""Static checks of the container images in images/*/Dockerfile (label `images`).

No Docker engine is needed: each Dockerfile is parsed and checked against the repository it builds
from (build context = repository root), the CMake targets, .dockerignore, scripts/install-deps.sh,
the Helm chart and the sidecar container the operator renders. See images/README.md.
"""
import json
import posixpath
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
IMAGE_LABEL = "dev.korovod.image"
# The binary each published image must run as its entrypoint, where something outside the image
# (the operator, the chart) starts the container without a command.
ENTRYPOINT_OF = {
    "ghcr.io/korovod/operator": "korovod-operator",
    "ghcr.io/korovod/sidecar": "korovod-sidecar",
    "ghcr.io/korovod/sidecar-cuda": "korovod-sidecar",
}
# Never in a final stage: they make the image a build environment.
BUILD_TOOLS = {"gcc", "g++", "clang", "cpp", "make", "cmake", "ninja-build", "build-essential",
               "binutils", "protobuf-compiler", "protobuf-compiler-grpc", "python3-pip",
               "pybind11-dev"}


# ---- Dockerfile parsing -------------------------------------------------------------------------

class Instruction:
    def __init__(self, cmd, args, line):
        self.cmd, self.args, self.line = cmd, args, line

    def __repr__(self):
        return f"line {self.line}: {self.cmd} {self.args}"


class Stage:
    def __init__(self, index, base, name, line):
        self.index, self.base, self.name, self.line = index, base, name, line
        self.instructions = []

    def of(self, cmd):
        return [i for i in self.instructions if i.cmd == cmd]

    def label(self):
        return self.name or f"#{self.index}"


def logical_lines(text):
    """(line number, text) of each instruction: comments dropped, continuations joined."""
    out, buf, start = [], "", None
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments and blank lines may sit inside a continued instruction
        if start is None:
            start = n
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        out.append((start, buf + stripped))
        buf, start = "", None
    if buf:
        out.append((start, buf))
    return out


def substitute(value, args):
    def repl(m):
        name = m.group(1) or m.group(2)
        return args.get(name, "")
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, value)


def split_args(args):
    """JSON (exec) form or whitespace-separated words."""
    s = args.strip()
    if s.startswith("["):
        return json.loads(s)
    return shlex.split(s)


def parse_flags(words):
    flags, rest = {}, []
    for w in words:
        if w.startswith("--") and not rest:
            k, _, v = w[2:].partition("=")
            flags[k] = v
        else:
            rest.append(w)
    return flags, rest


class Dockerfile:
    def __init__(self, path):
        self.path = path
        self.name = path.parent.name
        self.global_args = {}   # ARGs before the first FROM, with their defaults
        self.from_raw = []      # FROM lines as written, for the pinning check
        self.stages = []
        for line, text in logical_lines(path.read_text()):
            cmd, _, args = text.partition(" ")
            cmd, args = cmd.upper(), args.strip()
            if cmd == "FROM":
                words = [w for w in args.split() if not w.startswith("--platform")]
                base = substitute(words[0], self.global_args)
                name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
                self.from_raw.append((line, words[0], base))
                self.stages.append(Stage(len(self.stages), base, name, line))
            elif not self.stages:
                assert cmd == "ARG", f"{path}:{line}: only ARG may come before FROM, got {cmd}"
                k, _, v = args.partition("=")
                self.global_args[k] = v.strip('"')
            else:
                self.stages[-1].instructions.append(Instruction(cmd, args, line))

    @property
    def final(self):
        return self.stages[-1]

    def stage(self, ref, before):
        for s in self.stages[:before]:
            if s.name == ref or str(s.index) == ref:
                return s
        return None

    def label_value(self, key):
        for ins in self.final.of("LABEL"):
            for w in shlex.split(ins.args):
                k, _, v = w.partition("=")
                if k == key:
                    return v
        return None

    def copies(self, stage):
        """(instruction, flags, sources, destination) of each COPY/ADD of a stage."""
        out = []
        for ins in stage.instructions:
            if ins.cmd in ("COPY", "ADD"):
                flags, rest = parse_flags(split_args(ins.args))
                assert len(rest) >= 2, f"{self.path}:{ins.line}: COPY needs a source and a destination"
                out.append((ins, flags, rest[:-1], rest[-1]))
        return out


def stage_args(stage):
    """ARG defaults declared inside a stage (RUN sees them as variables)."""
    args = {}
    for ins in stage.of("ARG"):
        k, _, v = ins.args.partition("=")
        args[k] = v.strip('"')
    return args


def run_text(stage):
    return substitute(" ".join(i.args for i in stage.of("RUN")), stage_args(stage))


def apt_installs(stage):
    """[(has --no-install-recommends, [packages])] of each `apt-get install` in the stage's RUNs."""
    out = []
    for ins in stage.of("RUN"):
        for cmd in re.split(r"&&|;|\|\|", substitute(ins.args, stage_args(stage))):
            words = cmd.split()
            if len(words) >= 2 and words[0] in ("apt-get", "apt") and "install" in words:
                rest = words[words.index("install") + 1:]
                out.append(("--no-install-recommends" in rest,
                            [w for w in rest if not w.startswith("-")]))
    return out


# ---- repository facts ---------------------------------------------------------------------------

def cmake_files():
    return [p for p in REPO.rglob("CMakeLists.txt")
            if not any(part.startswith(("build", ".")) for part in p.relative_to(REPO).parts)]


def build_artifacts():
    """Paths relative to the build directory -> the CMake target producing them."""
    top = (REPO / "CMakeLists.txt").read_text()
    m = re.search(r"CMAKE_RUNTIME_OUTPUT_DIRECTORY\s+\$\{CMAKE_BINARY_DIR\}/(\S+?)\)", top)
    assert m, "CMakeLists.txt no longer sets CMAKE_RUNTIME_OUTPUT_DIRECTORY under the build dir"
    bindir = m.group(1)
    artifacts = {}
    for f in cmake_files():
        text = f.read_text()
        for name in re.findall(r"add_executable\(\s*([\w.+-]+)", text):
            artifacts[f"{bindir}/{name}"] = name
        # A module with its own LIBRARY_OUTPUT_DIRECTORY (the Python extension): the directory.
        for target, props in re.findall(r"set_target_properties\(\s*([\w.+-]+)\s+PROPERTIES(.*?)\)\s*$",
                                        text, re.S | re.M):
            d = re.search(r"LIBRARY_OUTPUT_DIRECTORY\s+\$\{CMAKE_BINARY_DIR\}/(\S+)", props)
            if d:
                artifacts[d.group(1).rstrip("/")] = target
    return artifacts


def executable_targets():
    names = set()
    for f in cmake_files():
        names.update(re.findall(r"add_executable\(\s*([\w.+-]+)", f.read_text()))
    return names


def dockerignore_patterns():
    path = REPO / ".dockerignore"
    if not path.exists():
        return []
    pats = []
    for raw in path.read_text().splitlines():
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        neg = s.startswith("!")
        s = s[1:] if neg else s
        s = s.strip("/")
        # Docker's matching: anchored at the context root, * and ? stay within one path element,
        # ** spans any number of them.
        rx, i = "", 0
        while i < len(s):
            if s.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif s.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif s[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif s[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(s[i]), i + 1
        pats.append((neg, re.compile(rx + r"\Z")))
    return pats


def dockerignored(rel):
    """True if rel (or a directory above it) is excluded from the build context."""
    parts = Path(rel).parts
    pats = dockerignore_patterns()
    for n in range(1, len(parts) + 1):
        prefix = "/".join(parts[:n])
        excluded = False
        for neg, rx in pats:
            if rx.match(prefix):
                excluded = not neg
        if excluded:
            return True
    return False


def top_level_block(text, key):
    m = re.search(rf"^{re.escape(key)}:\s*\n((?:[ #].*\n|\n)*)", text, re.M)
    return m.group(1) if m else ""


def helm_values():
    return (REPO / "helm/korovod/values.yaml").read_text()


def helm_image_repositories():
    return re.findall(r"^\s*repository:\s*(\S+)", helm_values(), re.M)


def sample_images():
    out = set()
    for f in sorted((REPO / "crds/samples").glob("*.yaml")):
        out.update(re.findall(r"^\s*image:\s*([^\s:]+)", f.read_text(), re.M))
    return out


def sidecar_container_source():
    return (REPO / "operator/controller/sidecar_container.cc").read_text()


def numeric_user(df):
    users = df.final.of("USER")
    assert users, f"{df.path}: the final stage sets no USER (it would run as root)"
    user = users[-1].args.split(":")[0]
    assert user.isdigit(), (f"{df.path}:{users[-1].line}: USER {user} is not numeric; "
                            "Kubernetes' runAsNonRoot can only verify a numeric user")
    return int(user)


def by_image():
    out = {}
    for p in DOCKERFILES:
        df = Dockerfile(p)
        out[df.label_value(IMAGE_LABEL)] = df
    return out


ids = [p.parent.name for p in DOCKERFILES]
param = pytest.mark.parametrize("path", DOCKERFILES, ids=ids)


# ---- tests --------------------------------------------------------------------------------------

def test_images_exist():
    assert {p.parent.name for p in DOCKERFILES} >= {"operator", "sidecar", "sidecar-cuda", "trainer"}


@param
def test_stages(path):
    df = Dockerfile(path)
    assert len(df.stages) >= 2, f"{path}: needs a builder stage and a final stage"
    assert any(s.name == "builder" for s in df.stages[:-1]), f"{path}: no stage named builder"
    assert any(f.get("from") for _, f, _, _ in df.copies(df.final)), \
        f"{path}: the final stage copies nothing from an earlier stage"


@param
def test_from_pinned(path):
    df = Dockerfile(path)
    stage_names = {s.name for s in df.stages if s.name}
    for line, raw, base in df.from_raw:
        if base in stage_names:
            continue
        # One ARG names the base, so bumping it is a one-line change shared by all stages.
        m = re.fullmatch(r"\$\{?(\w+)\}?", raw)
        assert m and df.global_args.get(m.group(1)), \
            f"{path}:{line}: FROM {raw} should name the base through an ARG with a default"
        assert "@sha256:" not in base or ":" in base.split("@")[0], base
        image = base.split("@")[0]
        name, sep, tag = image.rpartition(":")
        assert sep and "/" not in tag, f"{path}:{line}: FROM {base} has no tag"
        assert tag != "latest", f"{path}:{line}: FROM {base} uses latest"
        assert re.search(r"(?<!\d)20\d{6}(?!\d)|\d+\.\d+\.\d+", tag), \
            f"{path}:{line}: tag {tag} is neither dated (YYYYMMDD) nor an exact version"
    assert len({b for _, r, b in df.from_raw if b not in stage_names}) == 1, \
        f"{path}: stages use different bases; one pinned ARG is expected"


@param
def test_context_sources_exist_and_not_ignored(path):
    df = Dockerfile(path)
    for stage in df.stages:
        for ins, flags, sources, _ in df.copies(stage):
            if "from" in flags:
                continue
            for src in sources:
                assert not re.match(r"\w+://", src), f"{path}:{ins.line}: ADD of a URL is not pinned"
                rel = src.lstrip("/").rstrip("/") or "."
                matches = list(REPO.glob(rel)) if any(c in rel for c in "*?[") else [REPO / rel]
                assert matches and all(m.exists() for m in matches), \
                    f"{path}:{ins.line}: COPY source {src} does not exist in the build context"
                for m in matches:
                    r = m.relative_to(REPO).as_posix()
                    assert r == "." or not dockerignored(r), \
                        f"{path}:{ins.line}: COPY source {src} is excluded by .dockerignore"


def stage_products(df, stage):
    """(build directory, other directories the stage writes) from its RUNs, COPYs and WORKDIR."""
    text = run_text(stage)
    builds = re.findall(r"cmake\s[^&;]*?-B\s*(\S+)", text)
    dirs = re.findall(r"--target[= ](/\S+)", text)  # pip install --target
    dirs += re.findall(r"(?:mkdir(?:\s+-p)?|cp\s+\S+)\s+(/\S+)", text)
    workdir = "/"
    for ins in stage.instructions:  # relative COPY destinations are under the WORKDIR in effect
        if ins.cmd == "WORKDIR":
            workdir = ins.args if ins.args.startswith("/") else workdir.rstrip("/") + "/" + ins.args
        elif ins.cmd in ("COPY", "ADD"):
            dest = split_args(ins.args)[-1]
            dirs.append(posixpath.normpath(dest if dest.startswith("/") else workdir + "/" + dest))
    return builds, dirs


def built_targets(stage):
    targets = set()
    for m in re.finditer(r"cmake\s+--build\s+\S+((?:\s+(?:--target|-t)(?:\s+[\w.+-]+)+)+)", run_text(stage)):
        targets.update(w for w in m.group(1).split() if w not in ("--target", "-t"))
    return targets


def under(path, root):
    p, r = path.rstrip("/"), root.rstrip("/")
    return p == r or p.startswith(r + "/")


@param
def test_stage_copies_name_what_the_stage_produces(path):
    df = Dockerfile(path)
    artifacts = build_artifacts()
    for stage in df.stages:
        for ins, flags, sources, _ in df.copies(stage):
            ref = flags.get("from")
            if not ref:
                continue
            src_stage = df.stage(ref, stage.index)
            assert src_stage, f"{path}:{ins.line}: COPY --from={ref} names no earlier stage"
            builds, dirs = stage_products(df, src_stage)
            targets = built_targets(src_stage)
            for src in sources:
                build = next((b for b in builds if under(src, b)), None)
                if build:
                    rel = src.rstrip("/")[len(build.rstrip("/")) + 1:]
                    assert rel in artifacts, (
                        f"{path}:{ins.line}: {src} is not a CMake output (known: "
                        f"{sorted(artifacts)})")
                    assert artifacts[rel] in targets, (
                        f"{path}:{ins.line}: {src} comes from target {artifacts[rel]}, which "
                        f"stage {src_stage.label()} does not build (cmake --build --target "
                        f"{' '.join(sorted(targets))})")
                else:
                    assert any(under(src, d) for d in dirs), \
                        f"{path}:{ins.line}: nothing in stage {src_stage.label()} produces {src}"


@param
def test_builder_has_the_sources_cmake_configures(path):
    """The builder copies what the top-level CMakeLists.txt reads under the options it passes."""
    df = Dockerfile(path)
    for stage in df.stages[:-1]:
        text = run_text(stage)
        if "cmake --build" not in text:
            continue
        options = dict(re.findall(r"-D(\w+)(?::\w+)?=(\S+)", text))
        copied = {s.strip("/").rstrip("/") or "."
                  for _, f, srcs, _ in df.copies(stage) if "from" not in f for s in srcs}
        needed, conds = {"CMakeLists.txt"}, []
        for line in (REPO / "CMakeLists.txt").read_text().splitlines():
            code = line.split("#")[0].strip()
            if code.startswith("if("):
                conds.append(code)
            elif code.startswith("endif("):
                conds.pop()
            elif m := re.match(r"include\((cmake/[^)]+)\)", code):
                needed.add(m.group(1).split("/")[0])
            elif m := re.match(r"add_subdirectory\((\w+)\)", code):
                off = any(options.get(o, "").upper() in ("OFF", "0", "FALSE", "NO")
                          for c in conds for o in re.findall(r"KOROVOD_\w+", c))
                optional = any("EXISTS" in c for c in conds)
                if not off and not optional:
                    needed.add(m.group(1))
        missing = sorted(n for n in needed if n not in copied)
        assert not missing, f"{path}: stage {stage.label()} configures CMake without {missing}"


@param
def test_entrypoint_is_a_copied_binary(path):
    df = Dockerfile(path)
    eps = df.final.of("ENTRYPOINT")
    assert eps, f"{path}: the final stage has no ENTRYPOINT"
    assert eps[-1].args.startswith("["), f"{path}:{eps[-1].line}: ENTRYPOINT is not in exec form"
    exe = json.loads(eps[-1].args)[0]
    installed = set()
    for _, _, sources, dest in df.copies(df.final):
        for src in sources:
            installed.add(dest.rstrip("/") + "/" + Path(src.rstrip("/")).name
                          if dest.endswith("/") or len(sources) > 1 else dest)
    assert exe in installed, f"{path}: ENTRYPOINT {exe} is not copied in ({sorted(installed)})"


@param
def test_final_user_is_not_root(path):
    df = Dockerfile(path)
    assert numeric_user(df) != 0, f"{path}: the final stage runs as root"


@param
def test_final_stage_is_runtime_only(path):
    df = Dockerfile(path)
    for no_recommends, pkgs in apt_installs(df.final):
        # Recommends pull build tools back in (python3-torch recommends build-essential).
        assert no_recommends, f"{path}: final-stage apt-get install without --no-install-recommends"
        bad = [p for p in pkgs if p.endswith("-dev") or p in BUILD_TOOLS]
        assert not bad, f"{path}: the final stage installs build packages {bad}"
    assert not df.final.of("VOLUME"), \
        f"{path}: VOLUME in the final stage (Kubernetes ignores it; root filesystems are read-only)"


def test_cuda_wheel_pins_match_install_deps():
    script = (REPO / "scripts/install-deps.sh").read_text()
    want = set()
    for var in ("CU13_CUDA", "CU13_NCCL"):
        m = re.search(rf"^{var}=\(([^)]*)\)", script, re.M)
        assert m, f"scripts/install-deps.sh no longer defines {var}"
        want.update(m.group(1).split())
    df = Dockerfile(IMAGES / "sidecar-cuda/Dockerfile")
    builder = df.stage("builder", len(df.stages))
    got = set(stage_args(builder).get("CUDA_WHEELS", "").split())
    assert got == want, f"images/sidecar-cuda CUDA_WHEELS {sorted(got)} != install-deps.sh {sorted(want)}"
    assert "KOROVOD_WITH_NCCL=ON" in run_text(builder), "the CUDA image must fail without NCCL"
    envs = " ".join(i.args for i in df.final.of("ENV"))
    assert "KOROVOD_DEVICE_BACKEND=nccl" in envs, \
        "the CUDA image must run GPU tensors on NCCL (and fail without a GPU)"


def test_every_published_image_has_a_dockerfile():
    images = by_image()
    assert None not in images, f"a Dockerfile lacks LABEL {IMAGE_LABEL}"
    for df in images.values():
        assert df.label_value(IMAGE_LABEL).rsplit("/", 1)[-1].startswith(df.name), \
            f"{df.path}: label {df.label_value(IMAGE_LABEL)} does not match folder {df.name}"
    helm = helm_image_repositories()
    assert set(helm) >= {"ghcr.io/korovod/operator", "ghcr.io/korovod/sidecar"}, helm
    for repo in list(helm) + sorted(sample_images()):
        if repo.startswith("ghcr.io/korovod/"):
            assert repo in images, f"{repo} (helm/crds samples) is built by no images/*/Dockerfile"


def test_entrypoints_match_how_the_containers_are_started():
    images = by_image()
    for repo, binary in ENTRYPOINT_OF.items():
        df = images[repo]
        exe = json.loads(df.final.of("ENTRYPOINT")[-1].args)[0]
        assert Path(exe).name == binary, f"{df.path}: ENTRYPOINT {exe}, expected {binary}"
    # The operator renders the sidecar without command/args, the chart the operator with args only:
    # both rely on the image's ENTRYPOINT, and neither may be given a CMD it would not expect.
    assert '"command"' not in sidecar_container_source(), \
        "sidecar_container.cc now sets a command: check the sidecar images' ENTRYPOINT/CMD"
    deployment = (REPO / "helm/korovod/templates/deployment.yaml").read_text()
    assert not re.search(r"^\s*command:", deployment, re.M), \
        "the chart now sets the operator's command: check images/operator's ENTRYPOINT/CMD"


def test_sidecar_images_match_the_operator_security_context():
    src = sidecar_container_source()
    images = by_image()
    for repo in ("ghcr.io/korovod/sidecar", "ghcr.io/korovod/sidecar-cuda"):
        df = images[repo]
        uid = numeric_user(df)
        m = re.search(r'\{"runAsUser",\s*(\d+)\}', src)
        if m:
            assert uid == int(m.group(1)), f"{df.path}: USER {uid} != operator runAsUser {m.group(1)}"
        if re.search(r'\{"runAsNonRoot",\s*true\}', src):
            assert uid != 0, f"{df.path}: the operator sets runAsNonRoot, the image runs as root"
        if re.search(r'\{"readOnlyRootFilesystem",\s*true\}', src):
            assert not df.final.of("VOLUME")
        port = re.search(r"metricsPort:\s*(\d+)", top_level_block(helm_values(), "sidecar"))
        exposed = {int(p.split("/")[0]) for i in df.final.of("EXPOSE") for p in i.args.split()}
        assert port and exposed <= {int(port.group(1))}, \
            f"{df.path}: EXPOSE {sorted(exposed)} vs helm sidecar.metricsPort"


def test_operator_image_matches_the_chart():
    df = by_image()["ghcr.io/korovod/operator"]
    values = helm_values()
    deployment = (REPO / "helm/korovod/templates/deployment.yaml").read_text()
    uid = numeric_user(df)
    m = re.search(r"runAsUser:\s*(\d+)", deployment)
    if m:
        assert uid == int(m.group(1)), f"{df.path}: USER {uid} != chart runAsUser {m.group(1)}"
    if "runAsNonRoot: true" in deployment:
        assert uid != 0
    ports = {int(re.search(r"metricsPort:\s*(\d+)", top_level_block(values, "operator")).group(1)),
             int(re.search(r"port:\s*(\d+)", top_level_block(values, "webhook")).group(1))}
    exposed = {int(p.split("/")[0]) for i in df.final.of("EXPOSE") for p in i.args.split()}
    assert exposed <= ports, f"{df.path}: EXPOSE {sorted(exposed)} vs chart ports {sorted(ports)}"


def test_executables_list_is_sane():
    # Guards the artifact map the copy checks rely on.
    assert {"korovod-sidecar", "korovod-operator", "korovodrun"} <= executable_targets()
    assert "python/korovod" in build_artifacts()
