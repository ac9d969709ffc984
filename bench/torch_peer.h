// Runs bench/peers/torch_gradient_exchange.py (torch.distributed, gloo backend over loopback TCP)
// on the same ResNet gradient shapes and step counts as the korovod runs, one process per rank,
// forked by the same launcher. The shapes come from resnet_shapes (written as JSON for the
// script), so both sides exchange exactly the same tensors in the same order.
#pragma once

#include <string>

#include "bench/launcher.h"
#include "bench/resnet_shapes.h"
#include "bench/result_file.h"

namespace korovod::bench {

struct TorchPeerRun {
  ResNetModel model = ResNetModel::kResNet50;
  double gap_us = 0;
  int ranks = 4;
  int warmup = 3;
  int steps = 10;
  double bucket_mib = 25;
  double first_bucket_mib = 1;
  std::string python = "/usr/bin/python3";
  std::string script;
};

// Rank r gets RANK, WORLD_SIZE, INIT_FILE (fresh, for init_method=file://) and
// GLOO_SOCKET_IFNAME=lo; rank 0's stdout (the JSON rows, per-tensor and bucketed) goes to
// `results`, the other ranks' stdout to stderr.
LaunchOutcome RunTorchPeer(const TorchPeerRun& run, double timeout_s, const ResultFile& results);

}  // namespace korovod::bench
