// Private to the train layer: a model's configuration as JSON, every key nested as in YAML
// (model.siamese.depth_scale -> {"siamese": {"depth_scale": ...}}), values typed. Written into
// the config.json of normlab's export and of the Hugging Face export.
#pragma once

#include <nlohmann/json.hpp>

#include "normlab/nn/model_config.h"

namespace normlab {

nlohmann::json model_keys_json(const ModelConfig& model);

}  // namespace normlab
