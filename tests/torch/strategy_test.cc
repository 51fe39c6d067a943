// Strategies against a plain LibTorch reference: each strategy's training,
// step by step on uneven global batches, equals one device training on the
// concatenated batch (float64, tight tolerance); fit() sees every sample
// exactly once per epoch at 1-4 ranks with uneven counts; metrics merged
// over ranks equal the single-process metrics; stop decisions are agreed;
// bad specs are one-line errors; one model class of a program's own, with
// cohort::PerSample layers in cohort::ShardedUnit blocks, trains under
// one_device, mirrored, multi_worker and zero stage 3 as plain LibTorch on
// one process, its clones are deep copies, and mirrored says how to make a
// model that is not Cloneable clonable; parameter_server's server is hosted
// by a thread of the test process and ends cleanly. Ranks run as threads
// with their own engines (torch_ranks.h).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "cohort/common/error.h"
#include "cohort/common/plan_file.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/fit/early_stopping.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/parameter_server/server_role.h"
#include "cohort/torch/strategy/make_strategy.h"
#include "cohort/torch/strategy/mirrored.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "cohort/torch/strategy/parameter_server.h"
#include "cohort/torch/strategy/zero.h"
#include "tests/torch/residual_models.h"
#include "tests/torch/torch_ranks.h"

namespace cohort::testing::strategy_test {
namespace {

namespace nn = torch::nn;

constexpr int64_t kIn = 6, kClasses = 3;

// The same initial weights on every call, from any rank's thread (seeded():
// unlocked, another rank's draws shifted rank 0's weights, which the
// strategies broadcast, and 1 case in about 16 trained a model that the
// one-device reference never saw).
nn::Sequential make_net() {
  return seeded(7, [] {
    nn::Sequential net(nn::Linear(kIn, 8), nn::Tanh(), nn::Linear(8, kClasses));
    net->to(torch::kFloat64);
    return net;
  });
}

// Inputs and labels of `n` rows, the same on every call.
std::pair<at::Tensor, at::Tensor> make_data(int64_t n) {
  auto g = at::detail::createCPUGenerator(99);
  at::Tensor x = at::randn({n, kIn}, g, torch::kFloat64);
  at::Tensor y = at::randint(kClasses, {n}, g, torch::kInt64);
  return {x, y};
}

OptimizerFactory optimizer_of(const std::string& kind) {
  if (kind == "adam") return optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(0.01));
  return optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9));
}

// One device, plain LibTorch: `steps` steps over the global batches
// [b*batch, (b+1)*batch) of the data in order (the last one shorter).
at::Tensor reference_parameters(const std::string& optimizer, int64_t rows, int64_t batch, int steps) {
  nn::Sequential net = make_net();
  auto opt = optimizer_of(optimizer)(net->parameters());
  const auto [x, y] = make_data(rows);
  for (int s = 0; s < steps; ++s) {
    const int64_t begin = (s * batch) % rows, n = std::min(batch, rows - begin);
    opt->zero_grad();
    cross_entropy(net->forward(x.narrow(0, begin, n)), y.narrow(0, begin, n)).backward();
    opt->step();
  }
  return flat_parameters(*net);
}

// The same steps through `strategy`: each process takes its rows of every
// global batch, as fit() does.
at::Tensor strategy_parameters(Strategy& strategy, const std::string& optimizer, int64_t rows, int64_t batch,
                               int steps) {
  nn::Sequential net = make_net();
  strategy.prepare(training_model(net, cross_entropy, optimizer_of(optimizer)));
  const auto [x, y] = make_data(rows);
  for (int s = 0; s < steps; ++s) {
    const int64_t begin = (s * batch) % rows, n = std::min(batch, rows - begin);
    const int L = strategy.local_replicas(), R = strategy.replicas_in_sync(), p = strategy.process_index();
    const RowBlock first = reduce_scatter_block(n, R, p * L), last = reduce_scatter_block(n, R, p * L + L - 1);
    const int64_t mine = last.offset + last.rows - first.offset;
    strategy.train_step({x.narrow(0, begin + first.offset, mine), y.narrow(0, begin + first.offset, mine)}, n);
  }
  return flat_parameters(strategy.module());
}

// 23 rows in global batches of 7: steps of 7, 7, 7 and 2 rows, so at 3 and 4
// ranks some ranks get fewer rows than others, and at 4 ranks the last step
// leaves ranks 2 and 3 with none.
constexpr int64_t kRows = 23, kBatch = 7;
constexpr int kSteps = 8;

class MultiWorker : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

TEST_P(MultiWorker, EqualsOneDeviceOnTheConcatenatedBatch) {
  const auto [ranks, style, optimizer] = GetParam();
  const at::Tensor expected = reference_parameters(optimizer, kRows, kBatch, kSteps);
  PerRank<at::Tensor> got(ranks);
  run_torch_ranks(ranks, [&](int rank, int) {
    MultiWorkerStrategy strategy({.style = style == "ddp" ? MultiWorkerOptions::Style::ddp
                                                          : MultiWorkerOptions::Style::horovod,
                                  .engine = &current_engine()});
    got.add(rank, strategy_parameters(strategy, optimizer, kRows, kBatch, kSteps));
  });
  for (int r = 0; r < ranks; ++r)
    EXPECT_LT(max_relative_difference(got.of(r).at(0), expected), 1e-10) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(RanksStylesOptimizers, MultiWorker,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values("ddp", "horovod"),
                                            ::testing::Values("sgd", "adam")));

TEST(Mirrored, EqualsOneDeviceOnTheConcatenatedBatch) {
  torch::set_num_threads(1);
  for (const int replicas : {1, 2, 3, 4})
    for (const std::string name : {"mirrored", "central_storage"}) {
      MirroredStrategy strategy({.replicas = replicas, .name = name});
      const at::Tensor got = strategy_parameters(strategy, "sgd", kRows, kBatch, kSteps);
      EXPECT_LT(max_relative_difference(got, reference_parameters("sgd", kRows, kBatch, kSteps)), 1e-10)
          << name << " replicas " << replicas;
    }
}

// Whether a socket can listen on 127.0.0.1:`port` now (SO_REUSEADDR: a port
// left with connections in TIME_WAIT counts as free, one that another socket
// listens on does not).
bool can_listen_on(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

// What the server rank of ParameterServer.ServesInTheTestProcess saw.
struct ServerRankChecks {
  bool is_server = false;
  std::string prepare_error, model_error, placement_error, all_sum_error, serve_again_error;
  std::string ipc_path;
  int tcp_port = 0;
  bool ipc_before = false, listening_before = false, ipc_after = true, listening_after = true;
  int status = -1;
};

// The parameter_server strategy with its ranks as threads of this process
// (a world of the test's own): 2 workers train the steps of the one-device
// reference (the servers sum, the program's SGD steps) and reach its
// parameters, while the third thread is the server: is_server(), refuses to
// train, and serve() returns 0 once the workers are done, its sockets closed
// (the ipc socket file removed, the tcp port listenable again): the test
// process goes on.
TEST(ParameterServer, ServesInTheTestProcessAndEqualsOneDevice) {
  constexpr int kRanks = 3;
  const at::Tensor expected = reference_parameters("sgd", kRows, kBatch, kSteps);
  PerRank<at::Tensor> got(kRanks);
  PerRank<std::string> worker_errors(kRanks);
  ServerRankChecks server;
  const auto errors = run_world_ranks_collect(kRanks, [&](WorldRank& w) {
    ParameterServerOptions options = parameter_server_options({{"servers", "1"}}, w.size);
    options.world = {.comm = w.world, .store = w.store, .secret = "0123456789abcdef0123456789abcdef"};
    auto strategy = std::make_unique<ParameterServerStrategy>(options);
    if (!strategy->is_server()) {
      worker_errors.add(w.rank, error_of_kind<ConfigError>([&] { strategy->serve(); }));
      got.add(w.rank, strategy_parameters(*strategy, "sgd", kRows, kBatch, kSteps));
      return;  // the strategy's destructor says goodbye to the server
    }
    server.is_server = true;
    server.prepare_error = error_of_kind<ConfigError>(
        [&] { strategy->prepare(training_model(make_net(), cross_entropy, optimizer_of("sgd"))); });
    server.model_error = error_of_kind<ConfigError>(
        [&] { Model model(*strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")}); });
    server.placement_error = error_of_kind<ConfigError>([&] { strategy->process_index(); });
    server.all_sum_error = error_of_kind<ConfigError>([&] { strategy->all_sum(at::zeros({1}, at::kDouble)); });
    const ps::ServerAddress address = *strategy->server_role()->address();
    server.ipc_path = address.ipc.substr(std::string("ipc://").size());
    server.tcp_port = std::stoi(address.tcp.substr(address.tcp.rfind(':') + 1));
    server.ipc_before = std::filesystem::exists(server.ipc_path);
    server.listening_before = !can_listen_on(server.tcp_port);
    server.status = strategy->serve();
    server.ipc_after = std::filesystem::exists(server.ipc_path);
    server.listening_after = !can_listen_on(server.tcp_port);
    server.serve_again_error = error_of_kind<ConfigError>([&] { strategy->serve(); });
  });
  for (int r = 0; r < kRanks; ++r) {
    if (!errors[size_t(r)]) continue;
    try {
      std::rethrow_exception(errors[size_t(r)]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got.of(r).size(), 1u) << "rank " << r;
    EXPECT_LT(max_relative_difference(got.of(r).at(0), expected), 1e-10) << "worker " << r;
    EXPECT_NE(worker_errors.of(r).at(0).find("serve() on a process that trains"), std::string::npos)
        << worker_errors.of(r).at(0);
  }
  ASSERT_TRUE(server.is_server);
  for (const std::string& e : {server.prepare_error, server.model_error})
    EXPECT_NE(e.find("this process is a server, which trains nothing"), std::string::npos) << e;
  for (const std::string& e : {server.placement_error, server.all_sum_error})
    EXPECT_NE(e.find("on server 0, which trains nothing"), std::string::npos) << e;
  EXPECT_NE(server.serve_again_error.find("serves once"), std::string::npos) << server.serve_again_error;
  EXPECT_EQ(server.status, 0);
  EXPECT_TRUE(server.ipc_before && server.listening_before) << "the server did not listen: the checks below prove "
                                                               "nothing";
  EXPECT_FALSE(server.ipc_after) << server.ipc_path << " is still there after serve()";
  EXPECT_FALSE(server.listening_after) << "port " << server.tcp_port << " is still listened on after serve()";
}

TEST(OneDevice, EqualsPlainLibTorch) {
  OneDeviceStrategy strategy;
  const at::Tensor got = strategy_parameters(strategy, "adam", kRows, kBatch, kSteps);
  // The same operations in the same order: bit for bit.
  EXPECT_TRUE(torch::equal(got, reference_parameters("adam", kRows, kBatch, kSteps)));
}

// A dataset that records which rows each rank read.
class RecordingDataset : public Dataset {
 public:
  RecordingDataset(int64_t n, std::vector<int64_t>* seen) : data_(make_data(n)), seen_(seen) {}
  int64_t size() const override { return data_.first.size(0); }
  Batch get(const at::Tensor& indices) const override {
    for (int64_t i = 0; i < indices.numel(); ++i) seen_->push_back(indices[i].item<int64_t>());
    return {data_.first.index_select(0, indices), data_.second.index_select(0, indices)};
  }

 private:
  std::pair<at::Tensor, at::Tensor> data_;
  std::vector<int64_t>* seen_;
};

TEST(Fit, EverySampleExactlyOncePerEpochAtOneToFourRanks) {
  for (const int ranks : {1, 2, 3, 4})
    for (const int64_t n : {int64_t(1), int64_t(5), int64_t(29), int64_t(64)}) {
      std::vector<std::vector<int64_t>> seen(static_cast<size_t>(ranks));
      PerRank<int64_t> epochs(ranks);
      run_torch_ranks(ranks, [&](int rank, int) {
        MultiWorkerStrategy strategy({.engine = &current_engine()});
        Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")});
        RecordingDataset data(n, &seen[size_t(rank)]);
        const History h = model.fit(data, {.epochs = 2, .batch_size = 6, .seed = 3, .catch_preemption = false});
        epochs.add(rank, int64_t(h.epochs().size()));
      });
      // Each epoch's rows, over all ranks: each index once.
      std::vector<std::map<int64_t, int>> per_epoch(2);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(epochs.of(r).at(0), 2);
        const auto& rows = seen[size_t(r)];
        // Every rank reads its rows of epoch 0 before those of epoch 1; split
        // the rank's list by counting its share of epoch 0.
        int64_t first_epoch_rows = 0;
        for (int64_t b = 0; b * 6 < n; ++b) {
          const int64_t batch = std::min<int64_t>(6, n - b * 6);
          first_epoch_rows += reduce_scatter_block(batch, ranks, r).rows;
        }
        ASSERT_EQ(int64_t(rows.size()), 2 * first_epoch_rows) << "rank " << r << " n " << n;
        for (size_t i = 0; i < rows.size(); ++i) ++per_epoch[i < size_t(first_epoch_rows) ? 0 : 1][rows[i]];
      }
      for (int e = 0; e < 2; ++e) {
        EXPECT_EQ(int64_t(per_epoch[size_t(e)].size()), n) << "ranks " << ranks << " n " << n << " epoch " << e;
        for (const auto& [index, count] : per_epoch[size_t(e)]) EXPECT_EQ(count, 1) << "index " << index;
      }
    }
}

TEST(Fit, MergedMetricsEqualTheSingleProcessMetrics) {
  const auto [x, y] = make_data(37);
  // One process: the reference.
  Logs reference;
  {
    OneDeviceStrategy strategy;
    Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd"),
                                       .metrics = {accuracy(), top_k_accuracy(2)}});
    reference = model.evaluate(TensorDataset(x, y), {.batch_size = 5});
  }
  for (const int ranks : {2, 3, 4}) {
    PerRank<Logs> got(ranks);
    run_torch_ranks(ranks, [&](int rank, int) {
      MultiWorkerStrategy strategy({.engine = &current_engine()});
      Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd"),
                                         .metrics = {accuracy(), top_k_accuracy(2)}});
      got.add(rank, model.evaluate(TensorDataset(x, y), {.batch_size = 5}));
    });
    for (int r = 0; r < ranks; ++r) {
      const Logs& logs = got.of(r).at(0);
      // Counts are exact; the loss is a sum in another order.
      EXPECT_EQ(logs.at("accuracy"), reference.at("accuracy")) << ranks << " ranks, rank " << r;
      EXPECT_EQ(logs.at("top2_accuracy"), reference.at("top2_accuracy"));
      EXPECT_NEAR(logs.at("loss"), reference.at("loss"), 1e-12);
    }
  }
}

TEST(Fit, PredictReturnsEveryRowInOrderOnEveryRank) {
  const auto [x, y] = make_data(11);
  nn::Sequential net = make_net();
  torch::NoGradGuard no_grad;
  const at::Tensor expected = make_net()->forward(x);
  for (const int ranks : {1, 3, 4}) {
    PerRank<at::Tensor> got(ranks);
    run_torch_ranks(ranks, [&](int rank, int) {
      MultiWorkerStrategy strategy({.engine = &current_engine()});
      Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")});
      got.add(rank, model.predict(TensorDataset(x, y), 2));
    });
    for (int r = 0; r < ranks; ++r) EXPECT_TRUE(torch::allclose(got.of(r).at(0), expected, 0, 1e-12));
  }
}

// Tells a test metric which epoch is running.
struct EpochTracker : Callback {
  explicit EpochTracker(int64_t* epoch) : epoch(epoch) {}
  std::string name() const override { return "epoch_tracker"; }
  void on_epoch_begin(Model&, int64_t e, const Logs&) override { *epoch = e; }
  int64_t* epoch;
};

// A metric whose value is rank-dependent (a local view that disagrees):
// rank r's value improves for epochs 0..r+1 and then stops improving, so
// each rank's EarlyStopping (patience 0) alone would stop after epoch r + 2.
// Every rank must stop with rank 0, after its epoch 2 (3 epochs run).
TEST(Fit, EarlyStoppingWithDisagreeingRanksStopsEveryRankAtTheSameEpoch) {
  const int ranks = 3;
  PerRank<int64_t> epochs_run(ranks);
  const auto [x, y] = make_data(24);
  run_torch_ranks(ranks, [&](int rank, int) {
    MultiWorkerStrategy strategy({.engine = &current_engine()});
    int64_t epoch = 0;
    auto local = make_metric(
        "local", 1, [](at::Tensor&, const at::Tensor&, const at::Tensor&) {},
        [&epoch, rank](const at::Tensor&) { return epoch <= rank + 1 ? -double(epoch) : 0.0; });
    Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd"), .metrics = {local}});
    const History h = model.fit(TensorDataset(x, y),
                                {.epochs = 10, .batch_size = 8, .catch_preemption = false,
                                 .callbacks = {std::make_shared<EpochTracker>(&epoch),
                                               early_stopping({.monitor = "local", .mode = Monitor::Mode::min})}});
    epochs_run.add(rank, int64_t(h.epochs().size()));
  });
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(epochs_run.of(r).at(0), 3) << "rank " << r;
}

// Asks for a stop from one rank's batch callback at a chosen batch.
struct StopAtBatch : Callback {
  explicit StopAtBatch(int64_t batch) : batch(batch) {}
  std::string name() const override { return "stop_at_batch"; }
  void on_train_batch_end(Model& model, int64_t b, const Logs&) override {
    if (b == batch) model.stop_training();
  }
  int64_t batch;
};

// One rank asks to stop after batch 3 of a 12-step epoch; every rank must end
// at the same step: with a vote every step, after step 5 (the request rides
// with step 4's vote); with votes an hour apart (after the first two
// steps, which vote while the step time is unknown), at the epoch's end.
TEST(Fit, AStopRequestedOnOneRankEndsEveryRankAtTheSameStep) {
  const int ranks = 3;
  const auto [x, y] = make_data(48);
  for (const auto& [interval_s, steps] : {std::pair{0.0, 5}, std::pair{3600.0, 12}}) {
    PerRank<int64_t> steps_run(ranks);
    run_torch_ranks(ranks, [&, interval_s = interval_s](int rank, int) {
      MultiWorkerStrategy strategy({.engine = &current_engine()});
      Model model(strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")});
      std::vector<std::shared_ptr<Callback>> callbacks;
      if (rank == 1) callbacks.push_back(std::make_shared<StopAtBatch>(3));
      const History h = model.fit(TensorDataset(x, y), {.epochs = 4, .batch_size = 4, .catch_preemption = false,
                                                        .vote_interval_s = interval_s, .callbacks = callbacks});
      steps_run.add(rank, model.position().step);
      EXPECT_EQ(h.epochs().size(), 1u) << "rank " << rank;
    });
    for (int r = 0; r < ranks; ++r)
      EXPECT_EQ(steps_run.of(r).at(0), steps) << "rank " << r << ", votes " << interval_s << " s apart";
  }
}

TEST(Fit, UnevenTailStepsEndWithoutAHangAndMatchOneDevice) {
  // 10 rows, batch 4: steps of 4, 4, 2; at 4 ranks the last leaves two ranks
  // empty. fit() must end every epoch on every rank, with the parameters of
  // one device.
  const auto [x, y] = make_data(10);
  OneDeviceStrategy reference_strategy;
  Model reference(reference_strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")});
  reference.fit(TensorDataset(x, y), {.epochs = 3, .batch_size = 4, .seed = 5, .catch_preemption = false});
  const at::Tensor expected = flat_parameters(reference.module());
  // The data-parallel strategies: multi_worker's two styles and ZeRO's stages.
  for (const std::string style : {"ddp", "horovod", "zero1", "zero2", "zero3"}) {
    PerRank<at::Tensor> got(4);
    run_torch_ranks(4, [&](int rank, int) {
      std::unique_ptr<Strategy> strategy;
      if (style.starts_with("zero"))
        strategy = std::make_unique<ZeroStrategy>(
            ZeroStrategyOptions{.stage = style.back() - '0', .bucket_bytes = 256, .unit_bytes = 64,
                                .engine = &current_engine()});
      else
        strategy = std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{
            .style = style == "ddp" ? MultiWorkerOptions::Style::ddp : MultiWorkerOptions::Style::horovod,
            .engine = &current_engine()});
      Model model(*strategy, make_net(), {.loss = cross_entropy, .optimizer = optimizer_of("sgd")});
      model.fit(TensorDataset(x, y), {.epochs = 3, .batch_size = 4, .seed = 5, .catch_preemption = false});
      if (auto* zero = dynamic_cast<ZeroStrategy*>(strategy.get())) zero->gather_parameters();
      got.add(rank, flat_parameters(model.module()));
    });
    for (int r = 0; r < 4; ++r) EXPECT_LT(max_relative_difference(got.of(r).at(0), expected), 1e-10) << style;
  }
}

// make_strategy(spec) fails with a one-line ConfigError holding `want`.
void expect_strategy_error(const std::string& spec, const std::string& want) {
  try {
    make_strategy(spec);
    ADD_FAILURE() << "no error for '" << spec << "'";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(want), std::string::npos) << spec << ": " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line: " << what;
  }
}

TEST(MakeStrategy, BadSpecsAreOneLineErrorsNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty spec"},
      // The registered names, sorted (this binary registers test_* strategies too), wrappers last.
      {"mirored",
       "unknown strategy 'mirored' (valid: auto, central_storage, mirrored, multi_worker, one_device, "
       "parameter_server, "},
      {"mirrored:replica=2", "unknown key 'replica' (valid keys: replicas, threads_per_replica)"},
      {"mirrored:replicas=two", "replicas must be an integer >= 1, got 'two'"},
      {"mirrored:replicas=0", "replicas must be an integer >= 1, got '0'"},
      {"multi_worker:style=ring", "style must be one of ddp, horovod, got 'ring'"},
      {"one_device:replicas=2", "unknown key 'replicas' (it takes no keys)"},
      {"multi_worker:style", "'style' is not key=value"},
      {"mirrored:replicas=2,replicas=3", "replicas is set twice"},
  };
  for (const auto& [spec, want] : cases) expect_strategy_error(spec, want);
  // The help lists every strategy and key.
  const std::string help = strategy_help();
  for (const std::string word : {"one_device", "mirrored", "central_storage", "multi_worker", "replicas=2",
                                 "style=ddp", "compression=none", "parameter_server"})
    EXPECT_NE(help.find(word), std::string::npos) << word << " missing from\n" << help;
}

TEST(MakeStrategy, SpecsRoundTrip) {
  auto s = make_strategy("mirrored:replicas=3");
  EXPECT_EQ(s->spec(), "mirrored:replicas=3,threads_per_replica=1");
  EXPECT_EQ(s->replicas_in_sync(), 3);
  EXPECT_EQ(make_strategy("one_device")->spec(), "one_device");
  EXPECT_EQ(make_strategy("auto")->spec(), "one_device");  // not launched on several ranks
}

// "plan:FILE" runs the plan's strategy (cohort-plan --out), the same as its
// spec given directly; a bad plan is a one-line error naming the file.
TEST(MakeStrategy, APlanFileRunsItsStrategy) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/cohort_plan_strategy.json";
  PlanFile plan;
  plan.strategy = "mirrored:replicas=2";
  plan.command = "cohortrun -np 1 ./train --strategy plan:" + path;
  { std::ofstream(path) << plan_file_text(plan); }
  EXPECT_EQ(make_strategy("plan:" + path)->spec(), make_strategy("mirrored:replicas=2")->spec());
  { std::ofstream(path) << R"({"version": 1, "strategy": "mirored"})"; }
  expect_strategy_error("plan:" + path, "unknown strategy 'mirored'");
  { std::ofstream(path) << R"({"version": 1})"; }
  expect_strategy_error("plan:" + path, path + ":1:1: a plan file needs 'version' and 'strategy'");
  { std::ofstream(path) << R"({"version": 1, "strategy": "one_device", "np": 2.5})"; }
  expect_strategy_error("plan:" + path, path + ":1:48: plan field 'np' must be a whole number of at least 1, got 2.5");
  expect_strategy_error("plan:" + dir + "/absent.json", "absent.json");
  expect_strategy_error("plan:", "strategy 'plan:' needs a file");
}

}  // namespace
}  // namespace cohort::testing::strategy_test

namespace cohort::testing::strategy_test {
namespace {

// A strategy loaded from another's saved state trains on in lock step (the
// state every resume goes through).
TEST(MultiWorkerState, LoadedStateTrainsInLockStepAndAsTheOriginal) {
  const auto [x, y] = make_data(12);
  for (const std::string style : {"ddp", "horovod"}) {
    PerRank<at::Tensor> original(2), resumed(2);
    run_torch_ranks(2, [&](int rank, int) {
      const auto st = style == "ddp" ? MultiWorkerOptions::Style::ddp : MultiWorkerOptions::Style::horovod;
      const Batch mine{x.narrow(0, rank * 6, 6), y.narrow(0, rank * 6, 6)};
      MultiWorkerStrategy a({.style = st, .engine = &current_engine()});
      a.prepare(training_model(make_net(), cross_entropy, optimizer_of("adam")));
      a.train_step(mine, 12);
      torch::serialize::OutputArchive saved;
      a.save(saved);
      std::stringstream bytes;
      saved.save_to(bytes);
      a.train_step(mine, 12);
      original.add(rank, flat_parameters(a.module()));

      MultiWorkerStrategy b({.style = st, .engine = &current_engine()});
      b.prepare(training_model(make_net(), cross_entropy, optimizer_of("adam")));
      torch::serialize::InputArchive in;
      in.load_from(bytes);
      b.load(in);
      b.train_step(mine, 12);
      resumed.add(rank, flat_parameters(b.module()));
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_TRUE(torch::equal(resumed.of(r).at(0), original.of(r).at(0))) << style << " rank " << r;
  }
}

// ---- one model class under every strategy (residual_models.h) ----

// `steps` SGD steps of `net` on consecutive global batches of `batch` rows
// of (x, y): through `strategy`, each process its rows as fit() splits
// them, or, without one, plain LibTorch on one process.
template <typename Net>
at::Tensor trained(Strategy* strategy, Net net, const at::Tensor& x, const at::Tensor& y, int64_t batch, int steps) {
  const OptimizerFactory optimizer = optimizer_of("sgd");
  if (strategy == nullptr) {
    auto opt = optimizer(net->parameters());
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      cross_entropy(net->forward(x.narrow(0, s * batch, batch)), y.narrow(0, s * batch, batch)).backward();
      opt->step();
    }
    return flat_parameters(*net);
  }
  strategy->prepare(training_model(net, cross_entropy, optimizer));
  const int L = strategy->local_replicas(), R = strategy->replicas_in_sync(), p = strategy->process_index();
  const RowBlock first = reduce_scatter_block(batch, R, p * L), last = reduce_scatter_block(batch, R, p * L + L - 1);
  const int64_t mine = last.offset + last.rows - first.offset;
  for (int s = 0; s < steps; ++s) {
    const int64_t begin = s * batch + first.offset;
    strategy->train_step({x.narrow(0, begin, mine), y.narrow(0, begin, mine)}, batch);
  }
  if (auto* zero = dynamic_cast<ZeroStrategy*>(strategy)) zero->gather_parameters();
  return flat_parameters(strategy->module());
}

// `make(true)` (PerSample layers, ShardedUnit blocks) under one_device,
// mirrored (2 replicas: clones), multi_worker and zero stage 3 (2 ranks)
// against plain LibTorch on `make(false)` (no wrapper, the same initial
// parameters).
template <typename Net>
void expect_every_strategy_equals_one_process(const std::function<Net(bool wrapped)>& make, const at::Tensor& x,
                                              const at::Tensor& y) {
  torch::set_num_threads(1);
  const int64_t batch = 6;
  const int steps = 3;
  const at::Tensor expected = trained<Net>(nullptr, make(false), x, y, batch, steps);
  OneDeviceStrategy one;
  EXPECT_LT(max_relative_difference(trained(&one, make(true), x, y, batch, steps), expected), 1e-10) << "one_device";
  MirroredStrategy mirrored({.replicas = 2});
  EXPECT_LT(max_relative_difference(trained(&mirrored, make(true), x, y, batch, steps), expected), 1e-10) << "mirrored";
  for (const std::string name : {"multi_worker", "zero"}) {
    PerRank<at::Tensor> got(2);
    run_torch_ranks(2, [&](int rank, int) {
      std::unique_ptr<Strategy> strategy;
      if (name == "zero")
        strategy = std::make_unique<ZeroStrategy>(ZeroStrategyOptions{.stage = 3, .engine = &current_engine()});
      else strategy = std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{.engine = &current_engine()});
      got.add(rank, trained(strategy.get(), make(true), x, y, batch, steps));
    });
    for (int r = 0; r < 2; ++r)
      EXPECT_LT(max_relative_difference(got.of(r).at(0), expected), 1e-10) << name << " rank " << r;
  }
}

TEST(EveryStrategy, TrainsAResidualCnnWithPerSampleLayersInShardedUnitsAsOneProcess) {
  auto g = at::detail::createCPUGenerator(3);
  const at::Tensor x = at::randn({18, 1, 6, 6}, g, torch::kFloat64), y = at::randint(3, {18}, g, torch::kInt64);
  expect_every_strategy_equals_one_process<ResidualCnn>(
      [](bool wrapped) {
        return seeded(11, [&] {
          return ResidualCnn(ResidualCnnOptions{.wrapping = {.per_sample = wrapped, .sharded = wrapped}});
        });
      },
      x, y);
}

TEST(EveryStrategy, TrainsATransformerWithPerSampleLayersInShardedUnitsAsOneProcess) {
  const TinyTransformerOptions shape;
  auto g = at::detail::createCPUGenerator(4);
  const at::Tensor x = at::randint(shape.vocab, {18, shape.positions}, g, torch::kInt64);
  const at::Tensor y = at::randint(shape.classes, {18}, g, torch::kInt64);
  expect_every_strategy_equals_one_process<TinyTransformer>(
      [](bool wrapped) {
        return seeded(12, [&] {
          return TinyTransformer(TinyTransformerOptions{.wrapping = {.per_sample = wrapped, .sharded = wrapped}});
        });
      },
      x, y);
}

// clone() of a model holding ShardedUnit and PerSample gives new
// parameters of the same values, and the clone's forward runs them: a
// change to the clone's weights changes its output, not the original's.
TEST(EveryStrategy, ClonesOfWrappedModelsAreDeepCopiesThatRunThemselves) {
  ResidualCnn net =
      seeded(11, [] { return ResidualCnn(ResidualCnnOptions{.wrapping = {.per_sample = true, .sharded = true}}); });
  const auto copy = std::dynamic_pointer_cast<ResidualCnnImpl>(net->clone());
  ASSERT_NE(copy, nullptr);
  const auto original = net->named_parameters(), cloned = copy->named_parameters();
  ASSERT_EQ(original.keys(), cloned.keys());
  for (const auto& name : original.keys()) {
    EXPECT_NE(original[name].data_ptr(), cloned[name].data_ptr()) << name << " is shared";
    EXPECT_TRUE(torch::equal(original[name], cloned[name])) << name;
  }
  auto g = at::detail::createCPUGenerator(5);
  const at::Tensor x = at::randn({2, 1, 6, 6}, g, torch::kFloat64);
  torch::NoGradGuard no_grad;
  const at::Tensor before = net->forward(x);
  EXPECT_TRUE(torch::equal(copy->forward(x), before));
  cloned["block1.module.conv2.module.weight"].add_(1.0);
  EXPECT_TRUE(torch::equal(net->forward(x), before)) << "the original ran the clone's weights";
  EXPECT_FALSE(torch::equal(copy->forward(x), before)) << "the clone ran the original's weights";
}

// A model of one's own that is a plain torch::nn::Module cannot be cloned.
struct NotCloneableImpl : nn::Module {
  NotCloneableImpl() : fc(register_module("fc", nn::Linear(kIn, kClasses))) { fc->to(torch::kFloat64); }
  at::Tensor forward(const at::Tensor& x) { return fc(x); }
  nn::Linear fc;
};

// A Cloneable model whose PerSample wraps that one (a wrapper deep-copies
// what it wraps): the message names the block.
struct WrapsNotCloneableImpl : nn::Cloneable<WrapsNotCloneableImpl> {
  WrapsNotCloneableImpl() { reset(); }
  void reset() override { block = register_module("block", PerSample(nn::ModuleHolder<NotCloneableImpl>())); }
  at::Tensor forward(const at::Tensor& x) { return block->forward(x); }
  PerSample block{nullptr};
};

TEST(Mirrored, SaysHowToMakeAModelOfOnesOwnCloneable) {
  torch::set_num_threads(1);
  const auto refusal = [](auto net) {
    return error_of_kind<ConfigError>([&] {
      MirroredStrategy mirrored({.replicas = 2});
      mirrored.prepare(training_model(net, cross_entropy, optimizer_of("sgd")));
    });
  };
  for (const std::string& e :
       {refusal(nn::ModuleHolder<NotCloneableImpl>()), refusal(nn::ModuleHolder<WrapsNotCloneableImpl>())}) {
    EXPECT_NE(e.find("mirrored: the replicas are copies of the model made with clone()"), std::string::npos) << e;
    EXPECT_NE(e.find("Derive NotCloneableImpl from torch::nn::Cloneable<NotCloneableImpl>"), std::string::npos) << e;
    EXPECT_NE(e.find("in its reset()"), std::string::npos) << e;
    EXPECT_NE(e.find("one_device, multi_worker, zero and private train it as it is"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace cohort::testing::strategy_test
