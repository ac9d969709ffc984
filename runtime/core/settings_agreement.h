// Settings agreement: every rank must run the engine with the same settings, because fusion plans,
// cache bits and cycle timing depend on them; a rank started with other values would run
// different collectives and hang or corrupt data. Checked once, at start.
#pragma once

#include "common/status.h"
#include "runtime/core/engine_config.h"
#include "runtime/world/communicator.h"

namespace korovod {

// Collective over the world. InvalidArgument naming the first differing setting, its value on
// rank 0 and on the rank that differs, on every rank.
Status CheckSettingsAgree(Communicator& comm, const EngineConfig& config);

}  // namespace korovod
