// The one include of cohort.
//
//   #include <cohort/cohort.h>
//
// gives the core API (communicators, the engine, stores, errors, tunables,
// records and the input pipeline with its transforms, privacy accountants)
// to every program, and the LibTorch API (runtime, tensor collectives, data
// and model parallelism, checkpoints, samplers) to programs that link
// cohort::torch, which defines COHORT_HAVE_TORCH. The networks of
// cohort::models are not included: include cohort/models/<name>.h.
//
// Namespaces: everything a user calls is in `cohort` (cohort::init(),
// cohort::DistributedOptimizer, cohort::allreduce(tensor)), so
// `using namespace cohort;` next to LibTorch code leaves `torch::` meaning
// LibTorch. The layers below keep their own namespaces: cohort::comm,
// cohort::engine, cohort::rendezvous.
#pragma once

// Core.
#include "cohort/comm/communicator.h"
#include "cohort/comm/create.h"
#include "cohort/common/buffer_view.h"
#include "cohort/common/check.h"
#include "cohort/common/dtype.h"
#include "cohort/common/error.h"
#include "cohort/common/logging.h"
#include "cohort/common/reduce_op.h"
#include "cohort/common/tunables.h"
#include "cohort/data/image_ops.h"
#include "cohort/data/mean_variance.h"
#include "cohort/data/min_max.h"
#include "cohort/data/pipeline.h"
#include "cohort/data/record_source.h"
#include "cohort/data/record_writer.h"
#include "cohort/data/transform.h"
#include "cohort/engine/engine.h"
#include "cohort/privacy/accountant.h"
#include "cohort/rendezvous/discovery.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/memory_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/store.h"
#include "cohort/rendezvous/tcp_store.h"

#if defined(COHORT_HAVE_TORCH)
// torch/core: runtime, collectives, views, handles, threads, state broadcast.
#include "cohort/torch/core/broadcast_state.h"
#include "cohort/torch/core/collectives.h"
#include "cohort/torch/core/runtime.h"
#include "cohort/torch/core/tensor_handle.h"
#include "cohort/torch/core/tensor_view.h"
#include "cohort/torch/core/threads.h"
#include "cohort/torch/core/zero_grad.h"
// torch/data_parallel: Horovod and PyTorch style data parallelism.
#include "cohort/torch/data_parallel/comm_hooks.h"
#include "cohort/torch/data_parallel/data_parallel.h"
#include "cohort/torch/data_parallel/distributed_data_parallel.h"
#include "cohort/torch/data_parallel/distributed_optimizer.h"
#include "cohort/torch/data_parallel/powersgd_hook.h"
#include "cohort/torch/data_parallel/sync_batch_norm.h"
#include "cohort/torch/data_parallel/sharded_unit.h"
#include "cohort/torch/data_parallel/zero_optimizer.h"
// torch/model_parallel: mesh, pipeline, tensor parallelism.
#include "cohort/torch/model_parallel/mesh.h"
#include "cohort/torch/model_parallel/parallel_cross_entropy.h"
#include "cohort/torch/model_parallel/parallel_linear.h"
#include "cohort/torch/model_parallel/pipeline.h"
#include "cohort/torch/model_parallel/tensor_parallel_module.h"
#include "cohort/torch/model_parallel/vocab_parallel_embedding.h"
// torch/checkpoint and torch/data.
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/data/dataset.h"
#include "cohort/torch/data/dataset_stream.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/data/pipeline_input.h"
// torch/strategy: one training program from one device to many machines.
#include "cohort/torch/core/elastic_state.h"
#include "cohort/torch/core/strategy.h"
#include "cohort/torch/strategy/make_strategy.h"
#include "cohort/torch/strategy/mirrored.h"
#include "cohort/torch/strategy/multi_worker.h"
#include "cohort/torch/strategy/one_device.h"
#include "cohort/torch/strategy/parameter_server.h"
#include "cohort/torch/strategy/zero.h"
// torch/fit: Keras's fit(), metrics and callbacks.
#include "cohort/torch/fit/backup_and_restore.h"
#include "cohort/torch/fit/csv_logger.h"
#include "cohort/torch/fit/early_stopping.h"
#include "cohort/torch/fit/history_plot.h"
#include "cohort/torch/fit/json_lines_logger.h"
#include "cohort/torch/fit/learning_rate_scheduler.h"
#include "cohort/torch/fit/model.h"
#include "cohort/torch/fit/model_checkpoint.h"
#include "cohort/torch/fit/progress_bar.h"
#include "cohort/torch/fit/reduce_lr_on_plateau.h"
#include "cohort/torch/fit/tensorboard.h"
#include "cohort/torch/fit/terminate_on_nan.h"
// torch/privacy: DP-SGD and DP-Adam over any one-replica-per-process strategy,
// PerSample (a layer given per-sample kernels wherever it sits in a model).
#include "cohort/torch/privacy/per_sample_module.h"
#include "cohort/torch/privacy/private_strategy.h"
// torch/parameter_server: tables and modules on parameter servers.
#include "cohort/torch/parameter_server/ps_embedding.h"
#include "cohort/torch/parameter_server/sharded_training.h"
#endif
