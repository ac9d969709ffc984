// korovod._client: the C++ client (sidecar/client/client.h) for Python. Tensors are passed as raw
// addresses (numpy/torch data_ptr) plus dtype and shape; the caller keeps them alive until the
// handle completes. An address inside the arena's client heap (an ArenaBlock's memory, exposed
// through the buffer protocol so that torch.frombuffer can wrap it) is used where it lies, with
// no copy. Waits release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "sidecar/client/c_api.h"
#include "sidecar/client/client.h"

namespace py = pybind11;
using namespace korovod;
using namespace korovod::sidecar;

namespace {

void Check(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());
}
template <typename T>
T Take(StatusOr<T>&& s) {
  if (!s.ok()) throw std::runtime_error(s.status().ToString());
  return std::move(s).value();
}

OpOptions Options(const std::string& name, int op, double prescale, double postscale, int root,
                  int process_set) {
  OpOptions o;
  o.name = name;
  o.reduce_op = static_cast<ReduceOp>(op);
  o.prescale = prescale;
  o.postscale = postscale;
  o.root = root;
  o.process_set = process_set;
  return o;
}

void* Ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// Runs a submission without the GIL: it copies the tensor into the arena and may wait for heap
// space that only completions (or other Python threads) free. The error is raised with the GIL.
template <typename F>
auto Unlocked(F&& submit) {
  auto result = [&] {
    py::gil_scoped_release release;
    return submit();
  }();
  return Take(std::move(result));
}

// A device buffer as korovod.torch.cuda_ipc.buffer_ref gives it: (handle bytes, allocation base,
// allocation size, offset[, handle kind]); the kind (kDeviceHandleIpc when absent) says whether
// the handle is a CUDA IPC handle or an export id sent with send_device_memory.
using DeviceBufferTuple = py::tuple;

template <size_t N>
std::array<std::byte, N> Bytes(const py::bytes& b, const char* what) {
  const std::string s = b;
  if (s.size() != N) {
    throw std::invalid_argument(std::string(what) + " must be " + std::to_string(N) +
                                " bytes, got " + std::to_string(s.size()));
  }
  std::array<std::byte, N> out;
  std::memcpy(out.data(), s.data(), N);
  return out;
}

DeviceTensorRef DeviceRef(const py::bytes& uuid, const DeviceBufferTuple& t) {
  DeviceTensorRef r;
  const auto u = Bytes<16>(uuid, "device_uuid");
  std::memcpy(r.device_uuid.data(), u.data(), u.size());
  if (t.size() != 4 && t.size() != 5) {
    throw std::invalid_argument("a device buffer is (handle, base, bytes, offset[, kind]), got " +
                                std::to_string(t.size()) + " items");
  }
  r.mem_handle = Bytes<64>(t[0].cast<py::bytes>(), "device memory handle");
  r.allocation_base = t[1].cast<uint64_t>();
  r.allocation_bytes = t[2].cast<uint64_t>();
  r.offset = t[3].cast<uint64_t>();
  if (t.size() == 5) r.handle_kind = t[4].cast<uint32_t>();
  return r;
}

std::optional<DeviceEventHandle> EventHandle(const std::optional<py::bytes>& e) {
  if (!e) return std::nullopt;
  return Bytes<64>(*e, "IPC event handle");
}

// DataType and the reduce ops, by the names korovod.torch uses.
void BindVocabulary(py::module_& m) {
  py::enum_<DataType>(m, "DataType")
      .value("uint8", DataType::kUint8)
      .value("int8", DataType::kInt8)
      .value("int32", DataType::kInt32)
      .value("int64", DataType::kInt64)
      .value("float16", DataType::kFloat16)
      .value("bfloat16", DataType::kBFloat16)
      .value("float32", DataType::kFloat32)
      .value("float64", DataType::kFloat64)
      .value("int16", DataType::kInt16)
      .value("uint16", DataType::kUint16)
      .value("bool", DataType::kBool);

  m.attr("SUM") = static_cast<int>(ReduceOp::kSum);
  m.attr("AVERAGE") = static_cast<int>(ReduceOp::kAverage);
  m.attr("MIN") = static_cast<int>(ReduceOp::kMin);
  m.attr("MAX") = static_cast<int>(ReduceOp::kMax);
  m.attr("PRODUCT") = static_cast<int>(ReduceOp::kProduct);
}

void BindArenaBlock(py::module_& m) {
  // A client-heap block; Python's buffer protocol exposes its bytes (writable, one dimension)
  // and the block is freed when the last reference goes: torch.frombuffer holds one for as long
  // as the tensor's storage lives.
  py::class_<ArenaBuffer>(m, "ArenaBlock", py::buffer_protocol())
      .def_buffer([](ArenaBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {py::ssize_t{1}},
                               /*readonly=*/false);
      })
      .def_property_readonly("nbytes", &ArenaBuffer::size)
      .def_property_readonly("offset", &ArenaBuffer::offset)
      .def_property_readonly(
          "address", [](const ArenaBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); })
      .def("__len__", &ArenaBuffer::size);
}

void BindHandle(py::module_& m) {
  py::class_<ClientHandle>(m, "Handle")
      .def("poll", &ClientHandle::Poll)
      .def(
          "wait",
          [](const ClientHandle& h, double timeout_s) {
            Status s;
            {
              py::gil_scoped_release release;
              s = timeout_s < 0 ? h.Wait()
                                : h.Wait(Deadline::After(std::chrono::milliseconds(
                                      static_cast<int64_t>(timeout_s * 1000))));
            }
            Check(s);
          },
          py::arg("timeout_s") = -1.0)
      .def_property_readonly("shape", [](const ClientHandle& h) { return h.shape(); })
      .def_property_readonly("nbytes", [](const ClientHandle& h) { return h.output().size(); })
      .def("output_bytes",
           [](const ClientHandle& h) {
             auto out = h.output();
             return py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
           })
      .def("copy_output",
           [](const ClientHandle& h, uintptr_t dst, uint64_t nbytes) {
             auto out = h.output();
             if (nbytes != out.size())
               throw std::runtime_error("copy_output: " + std::to_string(nbytes) +
                                        " bytes given, output has " + std::to_string(out.size()));
             if (nbytes) std::memcpy(Ptr(dst), out.data(), nbytes);
           })
      .def_property_readonly("received_splits",
                             [](const ClientHandle& h) { return h.received_splits(); })
      .def_property_readonly("last_joined_rank", &ClientHandle::last_joined_rank);
}

void BindClient(py::module_& m) {
  py::class_<Client>(m, "Client")
      .def_static(
          "connect",
          [](const std::string& path, double timeout_s) {
            std::unique_ptr<Client> c;
            {
              py::gil_scoped_release release;
              c = Take(Client::Connect(
                  path, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                  "korovod Python client"));
            }
            return c;
          },
          py::arg("socket_path"), py::arg("timeout_s") = 10.0)
      .def_property_readonly("rank", &Client::rank)
      .def_property_readonly("size", &Client::size)
      .def_property_readonly("local_rank", &Client::local_rank)
      .def_property_readonly("local_size", &Client::local_size)
      .def_property_readonly("cross_rank", &Client::cross_rank)
      .def_property_readonly("cross_size", &Client::cross_size)
      .def_property_readonly("session_id", &Client::session_id)
      .def_property_readonly("epoch", &Client::epoch)
      .def_property_readonly("device_backend", &Client::device_backend)
      .def_property_readonly("nccl_version", &Client::nccl_version)
      // (address of the C function table, address of this client), for op libraries of other
      // frameworks (korovod.tensorflow's) that share this session: sidecar/client/c_api.h.
      .def("c_api",
           [](Client& c) {
             return py::make_tuple(reinterpret_cast<uintptr_t>(korovod_client_api()),
                                   reinterpret_cast<uintptr_t>(&c));
           })
      .def(
          "allocate",
          [](Client& c, uint64_t nbytes) { return Unlocked([&] { return c.Allocate(nbytes); }); },
          py::arg("nbytes"))
      .def(
          "try_allocate",
          [](Client& c, uint64_t nbytes, uint64_t keep_free) -> std::optional<ArenaBuffer> {
            auto b = c.TryAllocate(nbytes, keep_free);
            if (!b.ok()) return std::nullopt;
            return std::move(*b);
          },
          py::arg("nbytes"), py::arg("keep_free_bytes") = 0)
      .def_property_readonly("client_heap_capacity", &Client::client_heap_capacity)
      .def("in_arena", [](const Client& c, uintptr_t address,
                          uint64_t nbytes) { return c.InArena(Ptr(address), nbytes); })
      .def("copy_stats",
           [](const Client& c) {
             const ClientCopyStats s = c.copy_stats();
             py::dict d;
             d["staged_in_bytes"] = s.staged_in_bytes;
             d["staged_out_bytes"] = s.staged_out_bytes;
             d["staged_tensors"] = s.staged_tensors;
             d["arena_tensors"] = s.arena_tensors;
             return d;
           })
      .def(
          "allreduce",
          [](Client& c, uintptr_t in, uintptr_t out, DataType dt, const TensorShape& shape,
             const std::string& name, int op, double pre, double post, int ps) {
            return Unlocked([&] {
              return c.Allreduce(static_cast<const void*>(Ptr(in)), Ptr(out), dt, shape,
                                 Options(name, op, pre, post, 0, ps));
            });
          },
          py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
          py::arg("name") = "", py::arg("op") = 0, py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0)
      .def(
          "send_device_memory",
          [](Client& c, const std::vector<std::pair<uint64_t, std::vector<uint64_t>>>& exports,
             const std::vector<int>& fds) {
            std::vector<MemoryExport> es;
            for (const auto& [id, pieces] : exports) es.push_back(MemoryExport{id, pieces});
            Status s = [&] {
              py::gil_scoped_release release;
              return c.SendDeviceMemory(es, fds);
            }();
            Check(s);
          },
          "Sends device memory without a CUDA IPC handle: [(export_id, [piece bytes])] and one "
          "file descriptor per piece, in order (borrowed: the caller closes them).",
          py::arg("exports"), py::arg("fds"))
      .def(
          "device_allreduce",
          [](Client& c, const py::bytes& uuid, const DeviceBufferTuple& in,
             const DeviceBufferTuple& out, DataType dt, const TensorShape& shape,
             const std::optional<py::bytes>& event, const std::string& name, int op, double pre,
             double post, int ps) {
            const DeviceTensorRef i = DeviceRef(uuid, in), o = DeviceRef(uuid, out);
            const std::optional<DeviceEventHandle> ev = EventHandle(event);
            return Unlocked([&] {
              return c.DeviceAllreduce(i, o, dt, shape, ev ? &*ev : nullptr,
                                       Options(name, op, pre, post, 0, ps));
            });
          },
          py::arg("device_uuid"), py::arg("input"), py::arg("output"), py::arg("dtype"),
          py::arg("shape"), py::arg("ready_event") = py::none(), py::arg("name") = "",
          py::arg("op") = 0, py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
          py::arg("process_set") = 0)
      .def(
          "device_allgather",
          [](Client& c, const py::bytes& uuid, const DeviceBufferTuple& in,
             const DeviceBufferTuple& out, uint64_t out_bytes, DataType dt,
             const TensorShape& shape, const std::optional<py::bytes>& event,
             const std::string& name, int ps) {
            const DeviceTensorRef i = DeviceRef(uuid, in), o = DeviceRef(uuid, out);
            const std::optional<DeviceEventHandle> ev = EventHandle(event);
            return Unlocked([&] {
              return c.DeviceAllgather(i, o, out_bytes, dt, shape, ev ? &*ev : nullptr,
                                       Options(name, 0, 1, 1, 0, ps));
            });
          },
          py::arg("device_uuid"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"), py::arg("ready_event") = py::none(),
          py::arg("name") = "", py::arg("process_set") = 0)
      .def(
          "device_alltoall",
          [](Client& c, const py::bytes& uuid, const DeviceBufferTuple& in,
             const DeviceBufferTuple& out, uint64_t out_bytes, DataType dt,
             const TensorShape& shape, const std::vector<int64_t>& splits,
             const std::optional<py::bytes>& event, const std::string& name, int ps) {
            const DeviceTensorRef i = DeviceRef(uuid, in), o = DeviceRef(uuid, out);
            const std::optional<DeviceEventHandle> ev = EventHandle(event);
            return Unlocked([&] {
              return c.DeviceAlltoall(i, o, out_bytes, dt, shape, splits, ev ? &*ev : nullptr,
                                      Options(name, 0, 1, 1, 0, ps));
            });
          },
          py::arg("device_uuid"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"), py::arg("splits"),
          py::arg("ready_event") = py::none(), py::arg("name") = "", py::arg("process_set") = 0)
      .def(
          "device_reducescatter",
          [](Client& c, const py::bytes& uuid, const DeviceBufferTuple& in,
             const DeviceBufferTuple& out, uint64_t out_bytes, DataType dt,
             const TensorShape& shape, const std::optional<py::bytes>& event,
             const std::string& name, int op, double pre, double post, int ps) {
            const DeviceTensorRef i = DeviceRef(uuid, in), o = DeviceRef(uuid, out);
            const std::optional<DeviceEventHandle> ev = EventHandle(event);
            return Unlocked([&] {
              return c.DeviceReduceScatter(i, o, out_bytes, dt, shape, ev ? &*ev : nullptr,
                                           Options(name, op, pre, post, 0, ps));
            });
          },
          py::arg("device_uuid"), py::arg("input"), py::arg("output"), py::arg("output_bytes"),
          py::arg("dtype"), py::arg("shape"), py::arg("ready_event") = py::none(),
          py::arg("name") = "", py::arg("op") = 0, py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0)
      .def(
          "device_broadcast",
          [](Client& c, const py::bytes& uuid, const DeviceBufferTuple& t, DataType dt,
             const TensorShape& shape, int root, const std::optional<py::bytes>& event,
             const std::string& name, int ps) {
            const DeviceTensorRef ref = DeviceRef(uuid, t);
            const std::optional<DeviceEventHandle> ev = EventHandle(event);
            return Unlocked([&] {
              return c.DeviceBroadcast(ref, dt, shape, ev ? &*ev : nullptr,
                                       Options(name, 0, 1, 1, root, ps));
            });
          },
          py::arg("device_uuid"), py::arg("tensor"), py::arg("dtype"), py::arg("shape"),
          py::arg("root"), py::arg("ready_event") = py::none(), py::arg("name") = "",
          py::arg("process_set") = 0)
      .def(
          "grouped_allreduce",
          [](Client& c, const std::vector<uintptr_t>& ins, const std::vector<uintptr_t>& outs,
             const std::vector<TensorShape>& shapes, const std::vector<std::string>& names,
             DataType dt, int op, double pre, double post, int ps) {
            std::vector<GroupTensor> ts(ins.size());
            for (size_t i = 0; i < ins.size(); ++i) {
              ts[i].input = Ptr(ins[i]);
              ts[i].output = Ptr(outs.at(i));
              ts[i].shape = shapes.at(i);
              if (i < names.size()) ts[i].name = names[i];
            }
            return Unlocked(
                [&] { return c.GroupedAllreduce(ts, dt, Options("", op, pre, post, 0, ps)); });
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("shapes"), py::arg("names"),
          py::arg("dtype"), py::arg("op") = 0, py::arg("prescale") = 1.0,
          py::arg("postscale") = 1.0, py::arg("process_set") = 0)
      .def(
          "allgather",
          [](Client& c, uintptr_t in, DataType dt, const TensorShape& shape,
             const std::string& name, int ps) {
            return Unlocked([&] {
              return c.Allgather(static_cast<const void*>(Ptr(in)), dt, shape,
                                 Options(name, 0, 1, 1, 0, ps));
            });
          },
          py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("name") = "",
          py::arg("process_set") = 0)
      .def(
          "broadcast",
          [](Client& c, uintptr_t t, DataType dt, const TensorShape& shape, int root,
             const std::string& name, int ps) {
            return Unlocked(
                [&] { return c.Broadcast(Ptr(t), dt, shape, Options(name, 0, 1, 1, root, ps)); });
          },
          py::arg("tensor"), py::arg("dtype"), py::arg("shape"), py::arg("root"),
          py::arg("name") = "", py::arg("process_set") = 0)
      .def(
          "alltoall",
          [](Client& c, uintptr_t in, DataType dt, const TensorShape& shape,
             const std::vector<int64_t>& splits, const std::string& name, int ps) {
            return Unlocked([&] {
              return c.Alltoall(static_cast<const void*>(Ptr(in)), dt, shape, splits,
                                Options(name, 0, 1, 1, 0, ps));
            });
          },
          py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("splits"),
          py::arg("name") = "", py::arg("process_set") = 0)
      .def(
          "reducescatter",
          [](Client& c, uintptr_t in, DataType dt, const TensorShape& shape,
             const std::string& name, int op, double pre, double post, int ps) {
            return Unlocked([&] {
              return c.ReduceScatter(static_cast<const void*>(Ptr(in)), dt, shape,
                                     Options(name, op, pre, post, 0, ps));
            });
          },
          py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("name") = "",
          py::arg("op") = 0, py::arg("prescale") = 1.0, py::arg("postscale") = 1.0,
          py::arg("process_set") = 0)
      .def(
          "barrier",
          [](Client& c, int ps, const std::string& name) {
            return Unlocked([&] { return c.Barrier(Options(name, 0, 1, 1, 0, ps)); });
          },
          py::arg("process_set") = 0, py::arg("name") = "")
      .def(
          "join",
          [](Client& c, int ps, const std::string& name) {
            return Unlocked([&] { return c.Join(Options(name, 0, 1, 1, 0, ps)); });
          },
          py::arg("process_set") = 0, py::arg("name") = "")
      .def("add_process_set",
           [](Client& c, const std::vector<int>& ranks) {
             py::gil_scoped_release release;
             return Take(c.AddProcessSet(ranks));
           })
      .def("remove_process_set",
           [](Client& c, int id) {
             py::gil_scoped_release release;
             return Take(c.RemoveProcessSet(id));
           })
      .def(
          "start_timeline",
          [](Client& c, const std::string& path, bool mark_cycles) {
            py::gil_scoped_release release;
            Check(c.StartTimeline(path, mark_cycles));
          },
          py::arg("path"), py::arg("mark_cycles") = false)
      .def("stop_timeline",
           [](Client& c) {
             py::gil_scoped_release release;
             Check(c.StopTimeline());
           })
      .def("membership",
           [](Client& c) {
             StatusOr<Client::Membership> m = Client::Membership{};
             {
               py::gil_scoped_release release;
               m = c.GetMembership();
             }
             Check(m.status());
             return py::make_tuple(m->epoch, m->formed_version, m->version, m->update);
           })
      .def(
          "shutdown",
          [](Client& c, const std::string& reason) {
            py::gil_scoped_release release;
            Check(c.Shutdown(reason));
          },
          py::arg("reason") = "");
}

}  // namespace

PYBIND11_MODULE(_client, m) {
  m.doc() = "korovod sidecar client (C++), wrapped for Python";

  BindVocabulary(m);
  BindArenaBlock(m);
  BindHandle(m);
  BindClient(m);
}
