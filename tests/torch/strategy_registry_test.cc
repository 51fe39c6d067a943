// The strategy registry (core/strategy_registry.h): a strategy and a
// wrapper defined here, in a test file, register themselves at static
// initialisation and are reachable by name through make_strategy() and
// fit(), without any library file knowing of them; the built-ins are there
// too; bad specs and registrations are one-line ConfigErrors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/common/error.h"
#include "cohort/torch/core/strategy_registry.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/strategy/one_device.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::strategy_registry_test {
namespace {

// one_device that counts its steps and says so in its logs: enough to tell
// that fit() ran this strategy, by name, and trained as one device does.
class CountingStrategy final : public OneDeviceStrategy {
 public:
  explicit CountingStrategy(std::string label) : label_(std::move(label)) {}
  int64_t steps() const { return steps_; }

 protected:
  std::string do_spec() const override { return "test_counting:label=" + label_; }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override {
    ++steps_;
    return OneDeviceStrategy::do_train_step(mine, global_rows);
  }
  std::map<std::string, double> do_logs() override { return {{"counted_steps", double(steps_)}}; }

 private:
  std::string label_;
  int64_t steps_ = 0;
};

// A wrapper that forwards everything to the strategy it wraps and adds a
// log: what a wrapper registered as '+name' must do to compose.
class TaggingWrapper final : public Strategy {
 public:
  TaggingWrapper(std::unique_ptr<Strategy> inner, double tag) : inner_(std::move(inner)), tag_(tag) {}

 protected:
  std::string do_spec() const override { return inner_->spec() + "+test_tag:tag=" + std::to_string(int(tag_)); }
  ReplicaPlacement do_placement() const override { return inner_->placement(); }
  void do_prepare() override { inner_->prepare(model()); }
  torch::nn::Module& do_module() override { return inner_->module(); }
  torch::optim::Optimizer& do_optimizer() override { return inner_->optimizer(); }
  StepResult do_train_step(const Batch& mine, int64_t global_rows) override {
    return inner_->train_step(mine, global_rows);
  }
  at::Tensor do_predict(const at::Tensor& input) override { return inner_->predict(input); }
  at::Tensor do_all_sum(const at::Tensor& values) override { return inner_->all_sum(values); }
  at::Tensor do_all_gather(const at::Tensor& rows) override { return inner_->all_gather(rows); }
  std::map<std::string, double> do_logs() override {
    auto logs = inner_->logs();
    logs["tag"] = tag_;
    return logs;
  }

 private:
  std::unique_ptr<Strategy> inner_;
  double tag_;
};

COHORT_REGISTER_STRATEGY(
    test_counting,
    {.name = "test_counting",
     .description = "one_device, counting its steps (defined in a test)",
     .keys = {{.name = "label", .kind = SpecKey::Kind::word, .default_value = "none", .description = "a word"}},
     .make = [](const Spec& spec) -> std::unique_ptr<Strategy> {
       return std::make_unique<CountingStrategy>(spec.word("label"));
     }});

COHORT_REGISTER_STRATEGY(
    test_tag,
    {.name = "test_tag",
     .description = "tags the wrapped strategy's logs (defined in a test)",
     .keys = {{.name = "tag", .kind = SpecKey::Kind::integer, .default_value = "7", .description = "the tag"}},
     .wrap = [](std::unique_ptr<Strategy> inner, const Spec& spec) -> std::unique_ptr<Strategy> {
       return std::make_unique<TaggingWrapper>(std::move(inner), double(spec.integer("tag")));
     }});

// fit() of a fixed small problem under `strategy`; returns the parameters.
std::vector<at::Tensor> fit_with(Strategy& strategy, History* history = nullptr) {
  torch::manual_seed(5);
  torch::nn::Sequential net(torch::nn::Linear(6, 3));
  net->to(torch::kFloat64);
  Model model(strategy, net, {.loss = cross_entropy, .optimizer = torch::optim::SGDOptions(0.2)});
  torch::manual_seed(6);
  const at::Tensor x = torch::randn({40, 6}, torch::kFloat64);
  const History h = model.fit(TensorDataset(x, x.argmax(1) % 3),
                              {.epochs = 2, .batch_size = 8, .catch_preemption = false, .verbose = false});
  if (history) *history = h;
  std::vector<at::Tensor> parameters;
  for (const at::Tensor& p : model.module().parameters()) parameters.push_back(p.detach().clone());
  return parameters;
}

TEST(StrategyRegistry, AStrategyDefinedInATestIsMadeByNameAndTrainsUnderFit) {
  torch::set_num_threads(1);
  std::unique_ptr<Strategy> made = make_strategy("test_counting:label=here");
  ASSERT_NE(dynamic_cast<CountingStrategy*>(made.get()), nullptr);
  EXPECT_EQ(made->spec(), "test_counting:label=here");
  History history;
  const std::vector<at::Tensor> counted = fit_with(*made, &history);
  EXPECT_EQ(dynamic_cast<CountingStrategy&>(*made).steps(), 10);  // 2 epochs of 5 batches
  EXPECT_EQ(history.values("counted_steps"), (std::vector<double>{5, 10}));
  OneDeviceStrategy reference;
  const std::vector<at::Tensor> expected = fit_with(reference);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(torch::equal(counted[i], expected[i])) << i;
}

TEST(StrategyRegistry, AWrapperComposesWithPlus) {
  torch::set_num_threads(1);
  std::unique_ptr<Strategy> made = make_strategy("test_counting+test_tag:tag=3");
  EXPECT_EQ(made->spec(), "test_counting:label=none+test_tag:tag=3");
  History history;
  fit_with(*made, &history);
  EXPECT_EQ(history.values("tag"), (std::vector<double>{3, 3}));
  EXPECT_EQ(history.values("counted_steps"), (std::vector<double>{5, 10}));
  // A '+' inside a number is the number's.
  const std::string dp = make_strategy("one_device+privacy:noise_multiplier=1e+0,sample_rate=0.5")->spec();
  EXPECT_NE(dp.find("one_device+privacy:"), std::string::npos) << dp;
  EXPECT_NE(dp.find(",noise_multiplier=1,"), std::string::npos) << dp;
}

TEST(StrategyRegistry, TheBuiltInsAndTheTestsAreListed) {
  std::vector<std::string> names;
  for (const StrategyRegistration& r : registered_strategies()) names.push_back(r.name);
  for (const char* name : {"auto", "one_device", "mirrored", "central_storage", "multi_worker", "zero",
                           "parameter_server", "privacy", "test_counting", "test_tag"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  // Strategies first, wrappers after.
  EXPECT_EQ(names.back() == "privacy" || names.back() == "test_tag", true);
  const std::string help = strategy_help();
  EXPECT_NE(help.find("test_counting"), std::string::npos) << help;
  EXPECT_NE(help.find("(the model: a torch::nn::Cloneable"), std::string::npos) << help;
  EXPECT_NE(help.find("joined by '+'"), std::string::npos) << help;
  const std::string elastic = strategies_that_follow_membership();
  EXPECT_NE(elastic.find("multi_worker (always)"), std::string::npos) << elastic;
  EXPECT_NE(elastic.find("zero (without shard_group)"), std::string::npos) << elastic;
}

TEST(StrategyRegistry, BadSpecsAndRegistrationsAreOneLineErrors) {
  const std::string unknown = error_of_kind<ConfigError>([] { make_strategy("multiworker"); });
  EXPECT_NE(unknown.find("multiworker"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("test_counting"), std::string::npos) << "the valid names, the test's included: " << unknown;
  EXPECT_NE(error_of_kind<ConfigError>([] { make_strategy("test_tag"); }).find("wraps another strategy"),
            std::string::npos);
  EXPECT_NE(error_of_kind<ConfigError>([] {
              make_strategy("one_device+test_counting");
            }).find("does not wrap another strategy"),
            std::string::npos);
  EXPECT_NE(error_of_kind<ConfigError>([] { make_strategy("test_counting:colour=red"); }).find("colour"),
            std::string::npos);
  EXPECT_NE(
      error_of_kind<ConfigError>([] {
        register_strategy({.name = "test_counting", .make = [](const Spec&) { return std::unique_ptr<Strategy>(); }});
      }).find("is registered already"),
      std::string::npos);
  EXPECT_NE(error_of_kind<ConfigError>([] { register_strategy({.name = "no_factory"}); }).find("neither"),
            std::string::npos);
}

}  // namespace
}  // namespace cohort::testing::strategy_registry_test
