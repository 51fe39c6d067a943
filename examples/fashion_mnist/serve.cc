// fashion_mnist_serve: the serving side of the transform artifact. Loads a
// model checkpoint and the transform a training job saved (fashion_mnist
// --data-format tfrecord --checkpoint C --transform T), applies the
// transform to raw tf.train.Example records exactly as training did (the
// same steps, the same analyzer constants, the same code), and classifies
// them.
//
//   fashion_mnist_serve --checkpoint run.ck --transform run.transform --data shards/ [--split test]
//
// Prints one "record <i>: <class> (<name>)" line per record (--quiet: none)
// and the accuracy when the records carry labels; --predictions FILE writes
// the classes, one per line, as fashion_mnist --predictions does.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cohort/common/flags.h"
#include "cohort/data/transform.h"
#include "cohort/models/image_classifiers.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "examples/fashion_mnist/dataset.h"
#include "examples/fashion_mnist/records.h"

namespace ex = cohort::examples;
using namespace cohort::flags;

namespace {

struct ServeOptions {
  std::string checkpoint, transform, data;
  std::string split = "test";
  std::string model = "cnn";
  std::string optimizer = "sgd";
  int64_t limit = 0;
  std::string predictions;
  bool quiet = false;
  bool help = false;
};

const char* kUsage = R"(usage: fashion_mnist_serve --checkpoint FILE --transform FILE --data DIR [flags]
Classifies raw Fashion-MNIST tf.train.Example records with a trained model:
the records go through the transform artifact the training job saved.

  --checkpoint FILE     the model (fashion_mnist --checkpoint; a directory: a sharded one, from zero)
  --transform FILE      the transform artifact (fashion_mnist --transform)
  --data DIR            TFRecord shards (DIR/<split>*.tfrecord)
  --split NAME          which shards (test)
  --model mlp|cnn|tanh_cnn  the network the checkpoint holds (cnn)
  --optimizer sgd|adam  the optimizer it was trained with (sgd)
  --limit N             the first N records only (all)
  --predictions FILE    write the predicted classes, one per line
  --quiet               no per-record lines
  --help                this text
)";

ServeOptions parse(const std::vector<std::string>& args) {
  ServeOptions o;
  parse_flags(args,
              {{"--checkpoint", [&](auto&, auto& v) { o.checkpoint = v; }},
               {"--transform", [&](auto&, auto& v) { o.transform = v; }},
               {"--data", [&](auto&, auto& v) { o.data = v; }},
               {"--split", [&](auto&, auto& v) { o.split = v; }},
               {"--model", [&](auto& f, auto& v) { o.model = one_of(f, v, {"mlp", "cnn", "tanh_cnn"}); }},
               {"--optimizer", [&](auto& f, auto& v) { o.optimizer = one_of(f, v, {"sgd", "adam"}); }},
               {"--limit", [&](auto& f, auto& v) { o.limit = parse_number<int64_t>(f, v, 0); }},
               {"--predictions", [&](auto&, auto& v) { o.predictions = v; }}},
              {{"--quiet", [&] { o.quiet = true; }}, {"--help", [&] { o.help = true; }}, {"-h", [&] { o.help = true; }}});
  if (!o.help) {
    for (const auto& [flag, value] : {std::pair{"--checkpoint", o.checkpoint}, {"--transform", o.transform},
                                      {"--data", o.data}}) {
      COHORT_CHECK_AS(ConfigError, !value.empty()) << flag << " is required";
    }
  }
  return o;
}

int serve(const ServeOptions& o) {
  torch::nn::Sequential net = cohort::models::fashion_mnist_classifier(o.model);
  // load_checkpoint restores the optimizer's state too; one of the kind
  // the job trained with takes it.
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (o.optimizer == "adam")
    optimizer = std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(1e-3));
  else
    optimizer = std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  // A directory is a sharded checkpoint (the zero strategy's), read whole.
  if (std::filesystem::is_directory(o.checkpoint))
    cohort::load_sharded_checkpoint(o.checkpoint, *net, *optimizer);
  else
    cohort::load_checkpoint(o.checkpoint, *net, *optimizer);
  net->eval();

  const cohort::data::Transform transform = cohort::data::Transform::load(o.transform);
  const auto [input, labels] = ex::transformed_tensors(ex::fashion_mnist_records(o.data, o.split, o.limit), transform);
  torch::NoGradGuard no_grad;
  const at::Tensor classes = net->forward(input).argmax(1);

  std::ofstream out;
  if (!o.predictions.empty()) out.open(o.predictions);
  int64_t correct = 0;
  for (int64_t i = 0; i < classes.size(0); ++i) {
    const int64_t c = classes[i].item<int64_t>();
    correct += c == labels[i].item<int64_t>();
    if (!o.quiet) std::printf("record %lld: %lld (%s)\n", (long long)i, (long long)c, ex::kFashionMnistClasses[size_t(c)]);
    if (out.is_open()) out << c << '\n';
  }
  COHORT_CHECK_AS(ConfigError, o.predictions.empty() || out.good()) << "cannot write " << o.predictions;
  std::printf("fashion_mnist_serve: %lld records, accuracy %.2f%% (transform: %zu steps)\n",
              (long long)classes.size(0), classes.size(0) ? 100.0 * double(correct) / double(classes.size(0)) : 0.0,
              transform.steps());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ServeOptions o;
  try {
    o = parse(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cohort::ConfigError& e) {
    std::fprintf(stderr, "fashion_mnist_serve: error: %s\n\n%s", one_line_message(e).c_str(), kUsage);
    return 2;
  }
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return serve(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist_serve: error: %s\n", one_line_message(e).c_str());
    return dynamic_cast<const cohort::ConfigError*>(&e) ? 2 : 1;
  }
}
