// YAML -> JSON for the tests (samples and the CRD are YAML; the API speaks JSON). Plain scalars
// resolve by the YAML 1.2 core schema (null, bool, int, float, else string); quoted ones stay
// strings.
#pragma once

#include <yaml-cpp/yaml.h>

#include <nlohmann/json.hpp>
#include <string>

namespace korovod::k8s_operator::testing {

nlohmann::json YamlToJson(const YAML::Node& node);
nlohmann::json LoadYamlFileAsJson(const std::string& path);

}  // namespace korovod::k8s_operator::testing
