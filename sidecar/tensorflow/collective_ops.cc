// The korovod TensorFlow ops: their signatures and shape functions (the kernels are in
// collective_kernels.cc). The name every rank gives an op: in a graph (use_node_name) the node's
// own name, which TensorFlow makes unique in the graph (less its name scope with
// ignore_name_scope), as Horovod's kernels do; eagerly tensor_name, or, empty, the client names
// the op by its order.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace korovod::tf {
namespace {

using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

#define KOROVOD_TYPES \
  "{uint8, int8, uint16, int16, int32, int64, half, bfloat16, float, double, bool}"
// How every rank names the op, and its process set (collective_kernels.cc reads them).
#define KOROVOD_NAMING_ATTRS                   \
  .Attr("tensor_name: string = ''")            \
      .Attr("use_node_name: bool = false")     \
      .Attr("ignore_name_scope: bool = false") \
      .Attr("process_set_id: int = 0")

// The first dimension is known only once every rank's has been seen.
absl::Status UnknownFirstDim(InferenceContext* c) {
  ShapeHandle out;
  TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
  c->set_output(0, out);
  return absl::OkStatus();
}

absl::Status UnknownFirstDimOfVector(InferenceContext* c) {
  ShapeHandle in;
  TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
  return UnknownFirstDim(c);
}

// The attribute macro is one link of each builder chain: laid out by hand.
// clang-format off
REGISTER_OP("KorovodAllreduce")
    .Attr("T: " KOROVOD_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    KOROVOD_NAMING_ATTRS
    .Input("tensor: T")
    .Output("sum: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("KorovodGroupedAllreduce")
    .Attr("T: " KOROVOD_TYPES)
    .Attr("num_tensors: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float")
    .Attr("postscale_factor: float")
    KOROVOD_NAMING_ATTRS
    .Input("tensors: num_tensors * T")
    .Output("sum: num_tensors * T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_inputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    });

REGISTER_OP("KorovodAllgather")
    .Attr("T: " KOROVOD_TYPES)
    KOROVOD_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(UnknownFirstDimOfVector);

REGISTER_OP("KorovodBroadcast")
    .Attr("T: " KOROVOD_TYPES)
    .Attr("root_rank: int")
    KOROVOD_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape);

REGISTER_OP("KorovodAlltoall")
    .Attr("T: " KOROVOD_TYPES)
    KOROVOD_NAMING_ATTRS
    .Input("tensor: T")
    .Input("splits: int32")
    .Output("output: T")
    .Output("received_splits: int32")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(UnknownFirstDimOfVector(c));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    });

REGISTER_OP("KorovodReducescatter")
    .Attr("T: " KOROVOD_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    KOROVOD_NAMING_ATTRS
    .Input("tensor: T")
    .Output("output: T")
    .SetShapeFn(UnknownFirstDimOfVector);

// clang-format on

REGISTER_OP("KorovodBarrier")
    .Attr("process_set_id: int = 0")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::NoOutputs);

REGISTER_OP("KorovodJoin")
    .Output("last_joined_rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

// The session's rank and size when the op runs (not when the graph was traced): an elastic
// job's world changes between epochs.
REGISTER_OP("KorovodRank")
    .Output("rank: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

REGISTER_OP("KorovodSize")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape);

}  // namespace
}  // namespace korovod::tf
