// The fashion_mnist example's flags: both forms, every flag reaching its
// field, bad values and retired flags rejected with their names.
#include <gtest/gtest.h>

#include "cohort/common/error.h"
#include "examples/fashion_mnist/options.h"

namespace cohort::testing::fashion_mnist_options_test {
namespace {

namespace ex = cohort::examples;

TEST(FashionMnistOptions, ParsesBothFlagForms) {
  const auto o = ex::parse_options({"--strategy", "mirrored:replicas=2", "--epochs", "3", "--batch-size=32", "--lr",
                                    "0.5", "--model", "mlp", "--backup", "/tmp/b", "--checkpoint", "/tmp/ck",
                                    "--metrics=/tmp/m", "--csv", "/tmp/h.csv", "--plot", "/tmp/h", "--threads", "2", "--optimizer=adam"});
  EXPECT_EQ(o.strategy, "mirrored:replicas=2");
  EXPECT_EQ(o.epochs, 3);
  EXPECT_EQ(o.batch_size, 32);
  EXPECT_EQ(o.lr, 0.5);
  EXPECT_EQ(o.model, "mlp");
  EXPECT_EQ(o.backup, "/tmp/b");
  EXPECT_EQ(o.checkpoint, "/tmp/ck");
  EXPECT_EQ(o.metrics, "/tmp/m");
  EXPECT_EQ(o.csv, "/tmp/h.csv");
  EXPECT_EQ(o.plot, "/tmp/h");
  EXPECT_EQ(ex::parse_options({"--tensorboard", "/tmp/tb"}).tensorboard, "/tmp/tb");
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.optimizer, "adam");
  EXPECT_FALSE(o.help);
  EXPECT_TRUE(ex::parse_options({"--help"}).help);
  EXPECT_NE(ex::usage().find("multi_worker"), std::string::npos) << "usage lists the strategies";
}

TEST(FashionMnistOptions, ParsesThePrivacyFlags) {
  EXPECT_FALSE(ex::parse_options({}).dp());
  const auto o = ex::parse_options({"--dp-epsilon", "3", "--dp-delta=1e-6", "--dp-max-grad-norm", "0.5",
                                    "--dp-accountant", "prv", "--dp-clipping", "per_layer", "--dp-secure-noise"});
  EXPECT_TRUE(o.dp());
  EXPECT_EQ(o.dp_epsilon, 3);
  EXPECT_EQ(o.dp_delta, 1e-6);
  EXPECT_EQ(o.dp_max_grad_norm, 0.5);
  EXPECT_EQ(o.dp_accountant, "prv");
  EXPECT_EQ(o.dp_clipping, "per_layer");
  EXPECT_TRUE(o.dp_secure_noise);
  EXPECT_TRUE(ex::parse_options({"--dp-noise-multiplier", "1.1"}).dp());
}

TEST(FashionMnistOptions, RejectsBadFlagsWithTheirNames) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--epochs", "x"}, "--epochs expects a number, got 'x'"},
      {{"--epochs", "0"}, "--epochs must be at least 1"},
      {{"--model", "resnet"}, "--model expects one of mlp, cnn, tanh_cnn, got 'resnet'"},
      {{"--frobnicate"}, "unknown flag '--frobnicate'"},
      {{"--lr"}, "--lr needs a value"},
      {{"--lr", "-1"}, "--lr must be positive"},
      {{"--resume"}, "--resume is gone: --backup DIR resumes by itself"},
      {{"--compression", "fp16"}, "--compression is gone: use --strategy multi_worker:compression=fp16"},
      {{"--batch-size", "12abc"}, "--batch-size expects a number, got '12abc'"},
      {{"--target-accuracy", "101"}, "--target-accuracy is a percentage"},
      {{"--dp-epsilon", "3", "--dp-noise-multiplier", "1"}, "give --dp-epsilon or --dp-noise-multiplier, not both"},
      {{"--dp-epsilon", "3", "--dp-delta", "1"}, "--dp-delta must be in (0, 1)"},
      {{"--dp-max-grad-norm", "0"}, "--dp-max-grad-norm must be positive"},
      {{"--dp-noise-multiplier", "-1"}, "--dp-noise-multiplier must not be negative"},
      {{"--dp-accountant", "gdp"}, "--dp-accountant expects one of rdp, prv, got 'gdp'"},
  };
  for (const auto& [args, want] : cases) {
    try {
      ex::parse_options(args);
      ADD_FAILURE() << "no error for " << args[0];
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cohort::testing::fashion_mnist_options_test
