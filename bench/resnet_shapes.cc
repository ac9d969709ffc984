#include "bench/resnet_shapes.h"

#include <algorithm>
#include <set>

#include "common/json_escape.h"

namespace korovod::bench {
namespace {

constexpr int kExpansion = 4;
constexpr int kClasses = 1000;

void Conv(std::vector<GradTensor>& out, const std::string& name, int64_t out_c, int64_t in_c,
          int64_t k) {
  out.push_back({name + ".weight", {out_c, in_c, k, k}});
}

// BatchNorm2d's affine parameters (running stats are buffers, not parameters).
void BatchNorm(std::vector<GradTensor>& out, const std::string& name, int64_t c) {
  out.push_back({name + ".weight", {c}});
  out.push_back({name + ".bias", {c}});
}

// torchvision Bottleneck.__init__ registers conv1, bn1, conv2, bn2, conv3, bn3, downsample.
void Bottleneck(std::vector<GradTensor>& out, const std::string& prefix, int64_t inplanes,
                int64_t width, bool downsample) {
  const int64_t planes_out = width * kExpansion;
  Conv(out, prefix + ".conv1", width, inplanes, 1);
  BatchNorm(out, prefix + ".bn1", width);
  Conv(out, prefix + ".conv2", width, width, 3);
  BatchNorm(out, prefix + ".bn2", width);
  Conv(out, prefix + ".conv3", planes_out, width, 1);
  BatchNorm(out, prefix + ".bn3", planes_out);
  if (downsample) {
    Conv(out, prefix + ".downsample.0", planes_out, inplanes, 1);
    BatchNorm(out, prefix + ".downsample.1", planes_out);
  }
}

// Forward registration order, as model.named_parameters() lists it.
std::vector<GradTensor> ForwardOrder(ResNetModel m) {
  const int blocks[4] = {3, 4, m == ResNetModel::kResNet50 ? 6 : 23, 3};
  const int64_t widths[4] = {64, 128, 256, 512};
  std::vector<GradTensor> out;
  Conv(out, "conv1", 64, 3, 7);
  BatchNorm(out, "bn1", 64);
  int64_t inplanes = 64;
  for (int layer = 0; layer < 4; ++layer) {
    for (int b = 0; b < blocks[layer]; ++b) {
      // The first block of every layer changes the channel count (layer1: 64 -> 256) or the
      // stride, so it has the projection shortcut.
      Bottleneck(out, "layer" + std::to_string(layer + 1) + "." + std::to_string(b), inplanes,
                 widths[layer], b == 0);
      inplanes = widths[layer] * kExpansion;
    }
  }
  out.push_back({"fc.weight", {kClasses, inplanes}});
  out.push_back({"fc.bias", {kClasses}});
  return out;
}

}  // namespace

int64_t GradTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const char* ResNetName(ResNetModel m) {
  return m == ResNetModel::kResNet50 ? "resnet50" : "resnet101";
}

std::optional<ResNetModel> ParseResNet(std::string_view name) {
  if (name == "resnet50" || name == "resnet-50" || name == "50") return ResNetModel::kResNet50;
  if (name == "resnet101" || name == "resnet-101" || name == "101") return ResNetModel::kResNet101;
  return std::nullopt;
}

std::vector<GradTensor> ResNetGradients(ResNetModel m) {
  std::vector<GradTensor> v = ForwardOrder(m);
  std::reverse(v.begin(), v.end());
  return v;
}

ResNetReference ResNetExpected(ResNetModel m) {
  // torchvision.models.resnet50() / resnet101(): sum(p.numel() for p in model.parameters()).
  return m == ResNetModel::kResNet50 ? ResNetReference{25557032, 161}
                                     : ResNetReference{44549160, 314};
}

std::string CheckResNetShapes(ResNetModel m) {
  const std::vector<GradTensor> g = ResNetGradients(m);
  const ResNetReference want = ResNetExpected(m);
  int64_t params = 0;
  std::set<std::string> names;
  for (const GradTensor& t : g) {
    params += t.elements();
    if (!names.insert(t.name).second) return std::string("duplicate tensor name ") + t.name;
  }
  std::string error;
  if (params != want.parameters) {
    error += std::string(ResNetName(m)) + ": " + std::to_string(params) +
             " parameters, torchvision has " + std::to_string(want.parameters) + "; ";
  }
  if (static_cast<int>(g.size()) != want.tensors) {
    error += std::string(ResNetName(m)) + ": " + std::to_string(g.size()) +
             " tensors, torchvision has " + std::to_string(want.tensors) + "; ";
  }
  if (g.empty() || g.front().name != "fc.bias" || g.back().name != "conv1.weight") {
    error += std::string(ResNetName(m)) + ": not in backward order (fc.bias first, conv1.weight " +
             "last); ";
  }
  if (!error.empty()) error.resize(error.size() - 2);
  return error;
}

std::string ResNetShapesJson(ResNetModel m) {
  const std::vector<GradTensor> g = ResNetGradients(m);
  int64_t params = 0;
  for (const GradTensor& t : g) params += t.elements();
  std::string js = "{\"model\": " + JsonQuoted(ResNetName(m)) +
                   ", \"parameters\": " + std::to_string(params) + ", \"tensors\": [";
  bool first = true;
  for (const GradTensor& t : g) {
    js += first ? "" : ", ";
    first = false;
    js += "{\"name\": " + JsonQuoted(t.name) + ", \"shape\": [";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      js += (i ? ", " : "") + std::to_string(t.shape[i]);
    }
    js += "]}";
  }
  js += "]}";
  return js;
}

}  // namespace korovod::bench
