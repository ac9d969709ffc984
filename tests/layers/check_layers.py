#!/usr/bin/env python3
"""The layer check: every project #include and every target_link_libraries line obeys the
allowed-imports table below (docs/architecture.md, runtime/README.md).

A lower layer that includes or links a higher one compiles fine and quietly couples the two (the
trainer client dragging in the collective engine, the operator's Kubernetes client depending on
HorovodJob types); this makes such a change fail CI instead. Each violation prints as
"path:line: <what> -- rule: <module> may import only <allowed>".

Usage: check_layers.py [SOURCE_ROOT]   (default: the repository this file is in)
Exit status 0 when clean, 1 with the violations on stdout.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

# Folders scanned for includes and CMake targets.
ROOTS = ("common", "runtime", "sidecar", "launcher", "operator", "bench")

_RUNTIME_LAYERS = (
    "runtime/reduce",
    "runtime/transport",
    "runtime/world",
    "runtime/algorithms",
    "runtime/collectives",
    "runtime/device",
)


def _runtime_below(layer: str) -> Tuple[str, ...]:
    """common and the runtime layers strictly below `layer`, bottom up."""
    return ("common",) + _RUNTIME_LAYERS[: _RUNTIME_LAYERS.index(layer)]


_ALL_RUNTIME = ("common", "runtime") + _RUNTIME_LAYERS + ("runtime/nccl", "runtime/core")
_ALL_OPERATOR = (
    "operator/api",
    "operator/kube",
    "operator/controller",
    "operator/webhook",
    "operator/manager",
)

ANY = None  # a module that may import anything (bench/)

# module -> the modules it may import besides itself. A file belongs to the longest module that
# prefixes its path. "runtime" is the korovod_runtime library target (runtime/CMakeLists.txt builds
# reduce/ through collectives/ into one archive); it appears only in link lines.
RULES: Dict[str, Optional[Tuple[str, ...]]] = {
    "common": (),
    "common/http": ("common",),
    **{layer: _runtime_below(layer) for layer in _RUNTIME_LAYERS},
    "runtime": ("common",) + _RUNTIME_LAYERS,
    # The CUDA DeviceApi is its own library (korovod_cuda_device) on top of korovod_runtime.
    "runtime/device": ("common", "runtime") + _RUNTIME_LAYERS[: _RUNTIME_LAYERS.index("runtime/device")],
    "runtime/nccl": ("common", "runtime") + _RUNTIME_LAYERS,
    "runtime/core": _ALL_RUNTIME,
    "sidecar/arena": ("common",),
    "sidecar/control": ("common",),
    "sidecar/client": ("common", "sidecar/arena", "sidecar/control"),
    "sidecar/python": ("common", "sidecar/client"),
    # TensorFlow's op library: only the client's C table (sidecar/client/c_api.h), as it is built
    # with TensorFlow's compiler settings, apart from the rest.
    "sidecar/tensorflow": ("sidecar/client",),
    "sidecar/daemon": _ALL_RUNTIME + ("common/http", "sidecar/arena", "sidecar/control"),
    # Elastic jobs: korovodrun hosts the membership server of runtime/world (ADR 0014), which
    # speaks the transport's handshake; no engine, no tensors.
    "launcher": ("common", "runtime", "runtime/transport", "runtime/world"),
    "operator/api": ("common",),
    "operator/kube": ("common",),
    "operator/controller": ("common", "operator/api"),
    "operator/webhook": ("common", "common/http", "operator/api", "operator/controller"),
    # The leader hosts each elastic job's membership server (korovod_membership: runtime/world's
    # server, the transport's handshake and sockets; ADR 0014); no engine, no tensors.
    "operator/manager": ("common", "common/http", "runtime", "runtime/transport", "runtime/world")
    + _ALL_OPERATOR,
    "bench": ANY,
}

CXX_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx", ".cu", ".inl")
_INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')
_GENERATED_PROTO = re.compile(r"^(.*?)(\.grpc)?\.pb\.h$")


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the source root
    line: int
    what: str
    module: str

    def __str__(self) -> str:
        allowed = RULES[self.module]
        allowed_text = ", ".join(allowed) if allowed else "nothing of the project"
        return (f"{self.path}:{self.line}: {self.what} -- rule: {self.module} may import only "
                f"{allowed_text}")


def module_of(rel_path: str) -> Optional[str]:
    """The module a repository-relative path belongs to, or None outside the table."""
    rel_path = rel_path.replace(os.sep, "/")
    best = None
    for module in RULES:
        if rel_path == module or rel_path.startswith(module + "/"):
            if best is None or len(module) > len(best):
                best = module
    return best


def allows(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    allowed = RULES[importer]
    return allowed is ANY or imported in allowed


def _walk(root: str) -> Iterable[str]:
    """Repository-relative paths of the files under ROOTS, sorted, skipping build trees."""
    for top in ROOTS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames
                                 if not d.startswith(".") and d not in ("__pycache__",))
            for name in sorted(filenames):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def _proto_modules(files: Sequence[str]) -> Dict[str, str]:
    """Generated-header stem ("korovod/sidecar/v1/sidecar") -> module of its .proto."""
    protos = {}
    for f in files:
        if f.endswith(".proto"):
            protos[f[: -len(".proto")]] = module_of(f)
    return protos


def _resolve_include(include: str, protos: Dict[str, str]) -> Optional[str]:
    """The module an include names, or None for system and third-party headers."""
    first = include.split("/", 1)[0]
    if first in ROOTS:
        return module_of(include)
    m = _GENERATED_PROTO.match(include)
    if m:
        for proto, module in protos.items():
            if proto == m.group(1) or proto.endswith("/" + m.group(1)):
                return module
    return None


def check_includes(root: str, files: Sequence[str]) -> List[Violation]:
    protos = _proto_modules(files)
    out = []
    for rel in files:
        if not rel.endswith(CXX_SUFFIXES):
            continue
        importer = module_of(rel)
        if importer is None:
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, text in enumerate(f, 1):
                m = _INCLUDE.match(text)
                if not m:
                    continue
                imported = _resolve_include(m.group(1), protos)
                if imported is not None and not allows(importer, imported):
                    out.append(Violation(rel, lineno,
                                         f'includes "{m.group(1)}" ({imported})', importer))
    return out


# One CMake command call: name, then its parenthesised arguments.
_CMAKE_CALL = re.compile(r"\b(add_library|add_executable|target_link_libraries)\s*\(", re.I)
_LINK_KEYWORDS = {"PUBLIC", "PRIVATE", "INTERFACE", "LINK_PUBLIC", "LINK_PRIVATE",
                  "LINK_INTERFACE_LIBRARIES", "debug", "optimized", "general"}


def _strip_cmake_comments(text: str) -> str:
    """Blanks # comments (keeping line numbers); CMake has no # inside our quoted strings."""
    return re.sub(r"#[^\n]*", lambda m: " " * len(m.group(0)), text)


def _cmake_calls(text: str) -> Iterable[Tuple[str, List[Tuple[str, int]]]]:
    """(command, [(argument, line)]) for each add_library/add_executable/target_link_libraries."""
    text = _strip_cmake_comments(text)
    for m in _CMAKE_CALL.finditer(text):
        depth, i, start = 1, m.end(), m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        args = []
        # Words, so that a target inside a generator expression ("$<$<BOOL:X>:korovod_core>")
        # is seen too.
        for tok in re.finditer(r"[\w.+-]+", text[start:i - 1]):
            line = text.count("\n", 0, start + tok.start()) + 1
            args.append((tok.group(0), line))
        yield m.group(1).lower(), args


def check_links(root: str, files: Sequence[str]) -> List[Violation]:
    cmake_files = [f for f in files if os.path.basename(f) == "CMakeLists.txt"]
    target_module: Dict[str, str] = {}
    parsed = []
    for rel in cmake_files:
        module = module_of(rel)
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            calls = list(_cmake_calls(f.read()))
        parsed.append((rel, module, calls))
        for command, args in calls:
            if command in ("add_library", "add_executable") and args and module is not None:
                target_module[args[0][0]] = module
    out = []
    for rel, _, calls in parsed:
        for command, args in calls:
            if command != "target_link_libraries" or not args:
                continue
            target = args[0][0]
            importer = target_module.get(target)
            if importer is None:
                continue
            for dep, line in args[1:]:
                imported = target_module.get(dep)
                if imported is None or dep in _LINK_KEYWORDS:
                    continue
                if not allows(importer, imported):
                    out.append(Violation(rel, line, f"{target} links {dep} ({imported})",
                                         importer))
    return out


def check(root: str) -> List[Violation]:
    files = list(_walk(root))
    return check_includes(root, files) + check_links(root, files)


def main(argv: Sequence[str]) -> int:
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    violations = check(root)
    for v in violations:
        print(v)
    if violations:
        print(f"{len(violations)} layer violation(s): a lower layer includes or links a higher "
              "one (table: tests/layers/check_layers.py RULES, docs/architecture.md)")
        return 1
    print(f"layers: clean ({root})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
