// The per-parameter gradient shapes of torchvision's ResNet-50 and ResNet-101 (Bottleneck blocks,
// expansion 4), named as torchvision names them ("layer4.2.bn3.bias") and listed in backward
// order: the reverse of the order the modules register their parameters, which is the order in
// which autograd hands gradients to Horovod/DDP hooks (fc first, conv1 last).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace korovod::bench {

enum class ResNetModel { kResNet50, kResNet101 };

struct GradTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t elements() const;
};

const char* ResNetName(ResNetModel m);  // "resnet50", "resnet101"
std::optional<ResNetModel> ParseResNet(std::string_view name);

// Backward order (fc.bias first).
std::vector<GradTensor> ResNetGradients(ResNetModel m);

// What torchvision reports: sum(p.numel()) and len(list(model.parameters())).
struct ResNetReference {
  int64_t parameters;
  int tensors;
};
ResNetReference ResNetExpected(ResNetModel m);

// Compares the generated shapes with the reference counts (and checks backward order and unique
// names); returns "" when they match, else a message saying what differs.
std::string CheckResNetShapes(ResNetModel m);

// {"model": "resnet50", "parameters": N, "tensors": [{"name": ..., "shape": [...]}, ...]} on one
// line, backward order: what bench/peers/torch_gradient_exchange.py reads.
std::string ResNetShapesJson(ResNetModel m);

}  // namespace korovod::bench
