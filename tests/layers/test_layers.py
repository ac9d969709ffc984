"""The layer check (check_layers.py): the repository is clean, and the checker itself catches what
it must, proved on small fake trees (a check that never fails would pass here too otherwise)."""

import os
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def messages(root):
    return [str(v) for v in check_layers.check(str(root))]


def test_repository_obeys_the_layer_table():
    violations = check_layers.check(REPO)
    assert not violations, "\n" + "\n".join(str(v) for v in violations)


def test_a_clean_tree_passes(tmp_path):
    write(tmp_path, "common/status.h", "#pragma once\n#include <string>\n")
    write(tmp_path, "runtime/transport/socket.h",
          '#include "common/status.h"\n#include "runtime/reduce/reduce.h"\n'
          '#include "runtime/transport/peer_mesh.h"\n#include "nlohmann/json.hpp"\n')
    write(tmp_path, "bench/main.cc", '#include "runtime/core/engine.h"\n'
                                     '#include "operator/api/types.h"\n')
    assert messages(tmp_path) == []
    assert check_layers.main(["check_layers.py", str(tmp_path)]) == 0


def test_an_include_upwards_is_named_with_file_line_and_rule(tmp_path, capsys):
    # The violation the layer work removed: transport/ reaching up into world/.
    write(tmp_path, "runtime/transport/socket.h", """\
        #pragma once
        #include "common/status.h"
          #  include "runtime/world/world.h"
        """)
    assert messages(tmp_path) == [
        'runtime/transport/socket.h:3: includes "runtime/world/world.h" (runtime/world) -- '
        "rule: runtime/transport may import only common, runtime/reduce"
    ]
    assert check_layers.main(["check_layers.py", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "runtime/transport/socket.h:3:" in out
    assert "1 layer violation(s)" in out


@pytest.mark.parametrize("rel,include,rule", [
    ("common/log.cc", "runtime/core/engine.h", "common may import only nothing of the project"),
    ("common/http/server.cc", "sidecar/daemon/op_loop.h", "common/http may import only common"),
    ("sidecar/client/client.cc", "runtime/world/world.h",
     "sidecar/client may import only common, sidecar/arena, sidecar/control"),
    ("sidecar/arena/arena.h", "runtime/transport/socket.h", "sidecar/arena may import only common"),
    ("sidecar/python/module.cc", "sidecar/daemon/op_loop.h",
     "sidecar/python may import only common, sidecar/client"),
    ("launcher/main.cc", "sidecar/client/client.h", "launcher may import only common"),
    ("operator/kube/informer.cc", "operator/api/types.h", "operator/kube may import only common"),
    ("operator/api/json.cc", "operator/controller/reconciler.h",
     "operator/api may import only common"),
    ("operator/controller/reconciler.cc", "operator/kube/api_client.h",
     "operator/controller may import only common, operator/api"),
    ("operator/webhook/server.cc", "operator/manager/main.h",
     "operator/webhook may import only common, common/http, operator/api, operator/controller"),
    ("operator/manager/main.cc", "runtime/core/engine.h", "operator/manager may import only"),
    ("runtime/reduce/kernels.cc", "runtime/core/timeline/timeline.h",
     "runtime/reduce may import only common"),
    ("runtime/collectives/collectives.cc", "runtime/core/engine.h", "runtime/collectives may"),
    ("runtime/core/engine.cc", "sidecar/arena/arena.h", "runtime/core may import only"),
])
def test_each_rule_catches_its_upward_include(tmp_path, rel, include, rule):
    write(tmp_path, rel, f'#include "common/status.h"\n#include "{include}"\n')
    got = messages(tmp_path)
    assert len(got) == 1, got
    assert got[0].startswith(f'{rel}:2: includes "{include}"'), got
    assert rule in got[0], got


def test_generated_proto_headers_belong_to_their_proto(tmp_path):
    write(tmp_path, "sidecar/control/korovod/sidecar/v1/sidecar.proto", 'syntax = "proto3";\n')
    write(tmp_path, "sidecar/client/client.cc",
          '#include "korovod/sidecar/v1/sidecar.grpc.pb.h"\n')
    write(tmp_path, "runtime/core/engine.cc", '#include "korovod/sidecar/v1/sidecar.pb.h"\n')
    assert messages(tmp_path) == [
        'runtime/core/engine.cc:1: includes "korovod/sidecar/v1/sidecar.pb.h" (sidecar/control)'
        " -- rule: runtime/core may import only common, runtime, runtime/reduce, "
        "runtime/transport, runtime/world, runtime/algorithms, runtime/collectives, "
        "runtime/device, runtime/nccl, runtime/core"
    ]


def test_a_link_upwards_is_named_with_file_line_and_rule(tmp_path):
    # The trainer client must not link the engine.
    write(tmp_path, "runtime/core/CMakeLists.txt", "add_library(korovod_core STATIC engine.cc)\n")
    write(tmp_path, "common/CMakeLists.txt", "add_library(korovod_common STATIC status.cc)\n")
    write(tmp_path, "sidecar/arena/CMakeLists.txt", "add_library(korovod_sidecar_arena a.cc)\n")
    write(tmp_path, "sidecar/client/CMakeLists.txt", """\
        add_library(korovod_client STATIC client.cc)
        # korovod_core in a comment is not a link
        target_link_libraries(korovod_client
          PUBLIC korovod_common korovod_sidecar_arena Threads::Threads
          PRIVATE $<$<BOOL:ON>:rt> korovod_core)
        target_link_libraries(korovod_client PRIVATE $<$<BOOL:${X}>:korovod_core>)
        """)
    what = "korovod_client links korovod_core (runtime/core)"
    rule = "rule: sidecar/client may import only common, sidecar/arena, sidecar/control"
    assert messages(tmp_path) == [
        f"sidecar/client/CMakeLists.txt:5: {what} -- {rule}",
        f"sidecar/client/CMakeLists.txt:6: {what} -- {rule}",
    ]


def test_links_follow_the_operator_order(tmp_path):
    write(tmp_path, "operator/api/CMakeLists.txt", "add_library(korovod_operator_api a.cc)\n")
    write(tmp_path, "operator/kube/CMakeLists.txt", textwrap.dedent("""\
        add_library(korovod_kube STATIC k.cc)
        target_link_libraries(korovod_kube PUBLIC korovod_operator_api)
        """))
    write(tmp_path, "operator/manager/CMakeLists.txt", textwrap.dedent("""\
        add_executable(korovod-operator main.cc)
        target_link_libraries(korovod-operator PRIVATE korovod_kube korovod_operator_api)
        """))
    got = messages(tmp_path)
    assert got == ["operator/kube/CMakeLists.txt:2: korovod_kube links korovod_operator_api "
                   "(operator/api) -- rule: operator/kube may import only common"]
