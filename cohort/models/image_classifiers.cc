#include "cohort/models/image_classifiers.h"

#include <torch/torch.h>

#include "cohort/common/check.h"

namespace cohort::models {

namespace nn = torch::nn;

namespace {

nn::Conv2dOptions conv(int64_t in, int64_t out, int64_t stride = 1) {
  return nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false);
}

// ResNet basic block: two 3x3 conv+BN, identity or 1x1-conv shortcut.
struct BasicBlockImpl : nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module("conv1", nn::Conv2d(conv(in, out, stride)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2", nn::Conv2d(conv(out, out)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut = register_module("shortcut",
                                 nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)));
      shortcut_bn = register_module("shortcut_bn", nn::BatchNorm2d(out));
    }
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = torch::relu(bn1(conv1(x)));
    y = bn2(conv2(y));
    return torch::relu(y + (shortcut ? shortcut_bn(shortcut(x)) : x));
  }
  nn::Conv2d conv1{nullptr}, conv2{nullptr}, shortcut{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, shortcut_bn{nullptr};
};
TORCH_MODULE(BasicBlock);

}  // namespace

torch::nn::Sequential synthetic_classifier(const std::string& name, int64_t width, int depth) {
  COHORT_CHECK_AS(ConfigError, width > 0 && depth > 0)
      << "synthetic_classifier: width and depth must be positive, got " << width << " and " << depth;
  if (name == "mlp") {
    nn::Sequential net(nn::Flatten(), nn::Linear(784, width), nn::ReLU());
    for (int d = 1; d < depth; ++d) {
      net->push_back(nn::Linear(width, width));
      net->push_back(nn::ReLU());
    }
    net->push_back(nn::Linear(width, 10));
    return net;
  }
  if (name == "cnn")
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::ReLU(),
                          nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                          nn::Flatten(), nn::Linear(6272, 256), nn::ReLU(), nn::Linear(256, 10));
  if (name == "resnet")
    return nn::Sequential(nn::Conv2d(conv(1, 16)), nn::BatchNorm2d(16), nn::ReLU(), BasicBlock(16, 16, 1),
                          BasicBlock(16, 32, 2), BasicBlock(32, 64, 2), nn::AdaptiveAvgPool2d(1), nn::Flatten(),
                          nn::Linear(64, 10));
  COHORT_THROW(ConfigError) << "unknown model '" << name << "' (expected mlp, cnn or resnet)";
}

torch::nn::Sequential fashion_mnist_classifier(const std::string& kind) {
  if (kind == "mlp") {
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                          nn::Linear(128, 10));
  }
  if (kind == "tanh_cnn") {
    // Papernot et al.'s tempered-sigmoid network, the end-to-end CNN of
    // Tramer & Boneh's DP-SGD results: 28 -> 13 -> 12 -> 5 -> 4 pixels a side.
    return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 8).stride(2).padding(2)), nn::Tanh(),
                          nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(1)),
                          nn::Conv2d(nn::Conv2dOptions(16, 32, 4).stride(2)), nn::Tanh(),
                          nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(1)), nn::Flatten(), nn::Linear(32 * 4 * 4, 32),
                          nn::Tanh(), nn::Linear(32, 10));
  }
  COHORT_CHECK_AS(ConfigError, kind == "cnn") << "unknown model '" << kind << "' (expected mlp, cnn or tanh_cnn)";
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(32 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

}  // namespace cohort::models
