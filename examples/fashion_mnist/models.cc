#include "examples/fashion_mnist/models.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort::examples {

namespace nn = ::torch::nn;

::torch::nn::Sequential make_model(const std::string& kind) {
  if (kind == "mlp") {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                          nn::Linear(128, 10));
  }
  COHORT_CHECK_AS(ConfigError, kind == "cnn") << "unknown model '" << kind << "' (expected mlp or cnn)";
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(32 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

}  // namespace cohort::examples
