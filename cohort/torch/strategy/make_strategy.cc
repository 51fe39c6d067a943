#include "cohort/torch/strategy/make_strategy.h"

#include "cohort/rendezvous/discovery.h"
#include "cohort/torch/strategy/mirrored.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "cohort/torch/strategy/parameter_server.h"
#include "cohort/torch/strategy/zero.h"

namespace cohort {
namespace {

using Kind = SpecKey::Kind;

std::vector<SpecKey> replica_keys() {
  return {{.name = "replicas", .kind = Kind::integer, .default_value = "2",
           .description = "replicas (threads) in this process", .min = 1},
          {.name = "threads_per_replica", .kind = Kind::integer, .default_value = "1",
           .description = "intra-op threads of each replica", .min = 1}};
}

MirroredOptions mirrored_options(const Spec& spec) {
  return {.replicas = int(spec.integer("replicas")),
          .threads_per_replica = int(spec.integer("threads_per_replica")),
          .name = spec.name};
}

}  // namespace

const std::vector<SpecSchema>& strategy_schemas() {
  static const std::vector<SpecSchema> schemas = {
      {.name = "auto", .description = "multi_worker when launched on several ranks, else one_device"},
      {.name = "one_device", .description = "one process, one replica, no communication (the reference)"},
      {.name = "mirrored",
       .description = "one process, several replicas on threads (DataParallel)",
       .keys = replica_keys()},
      {.name = "central_storage",
       .description = "as mirrored: variables on the CPU, compute replicated (identical on CPU-only hosts)",
       .keys = replica_keys()},
      {.name = "multi_worker",
       .description = "one replica per rank, across processes and hosts (cohortrun, mpirun, srun)",
       .keys = {{.name = "style", .kind = Kind::word, .default_value = "ddp",
                 .description = "gradient exchange: DDP buckets or Horovod's per-parameter allreduces",
                 .words = {"ddp", "horovod"}},
                {.name = "compression", .kind = Kind::word, .default_value = "none",
                 .description = "gradients on the wire", .words = {"none", "fp16", "bf16"}},
                {.name = "bucket_mb", .kind = Kind::integer, .default_value = "25",
                 .description = "style=ddp: bucket size in MiB", .min = 1},
                {.name = "bucket_view", .kind = Kind::boolean, .default_value = "true",
                 .description = "style=ddp: gradients are views of the buckets (no copies)"}}},
      {.name = "parameter_server",
       .description = "the last S ranks hold the variables (sharded), the others train; sync to async",
       .keys = parameter_server_spec_keys()},
      {.name = "zero",
       .description = "one replica per rank; optimizer state (1), gradients (2), parameters (3) split over the ranks",
       .keys = {{.name = "stage", .kind = Kind::word, .default_value = "1",
                 .description = "1: optimizer state sharded; 2: and gradients; 3: and parameters (FSDP)",
                 .words = {"1", "2", "3"}},
                {.name = "bucket_mb", .kind = Kind::integer, .default_value = "25",
                 .description = "stages 1, 2: flat gradient buckets reduce-scattered during backward, in MiB "
                                "(stage 2 keeps two packing buffers of this size)",
                 .min = 1},
                {.name = "unit_mb", .kind = Kind::integer, .default_value = "1",
                 .description = "stage 3: layers gathered together, closed at this many MiB of parameters",
                 .min = 1},
                {.name = "shard_group", .kind = Kind::integer, .default_value = "0",
                 .description = "shard within groups of N consecutive ranks (a host's), replicate across (0: all)",
                 .min = 0}}},
  };
  return schemas;
}

std::string strategy_help() { return format_spec_schemas(strategy_schemas()); }

std::unique_ptr<Strategy> make_strategy(const std::string& text) {
  const Spec spec = parse_and_validate_spec(text, strategy_schemas(), "strategy");
  if (spec.name == "auto")
    return rendezvous::discover().size > 1 ? make_strategy("multi_worker") : make_strategy("one_device");
  if (spec.name == "one_device") return std::make_unique<OneDeviceStrategy>();
  if (spec.name == "mirrored" || spec.name == "central_storage")
    return std::make_unique<MirroredStrategy>(mirrored_options(spec));
  if (spec.name == "parameter_server") {
    // The job's size decides the roles; init() is the strategy's.
    return std::make_unique<ParameterServerStrategy>(
        parameter_server_options(spec.values, rendezvous::discover().size));
  }
  if (spec.name == "zero")
    return std::make_unique<ZeroStrategy>(
        ZeroStrategyOptions{.stage = std::stoi(spec.word("stage")),
                            .bucket_bytes = spec.integer("bucket_mb") << 20,
                            .unit_bytes = spec.integer("unit_mb") << 20,
                            .shard_group = int(spec.integer("shard_group"))});
  // multi_worker: the schemas admit nothing else.
  return std::make_unique<MultiWorkerStrategy>(MultiWorkerOptions{
      .style = spec.word("style") == "horovod" ? MultiWorkerOptions::Style::horovod : MultiWorkerOptions::Style::ddp,
      .compression = parse_compression(spec.word("compression")),
      .bucket_bytes = spec.integer("bucket_mb") << 20,
      .bucket_view = spec.boolean("bucket_view")});
}

}  // namespace cohort
