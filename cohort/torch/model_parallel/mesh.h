// Mesh: the job's ranks arranged as dp × pp × tp, with a communicator (and,
// for dp and tp, an engine) per axis.
//
//   cohort::init();
//   cohort::Mesh mesh({.dp = 2, .pp = 2, .tp = 1});
//   Pipeline pipe(stage, mesh.comm(MeshAxis::pp), {...});
//   ...
//   synchronize_gradients(params, mesh.engine(MeshAxis::dp));
//
// Layout: tp innermost (consecutive ranks), then pp, then dp:
//   world rank = (dp_i * pp + pp_i) * tp + tp_i.
// A rank's group along an axis is the ranks that share its other two
// coordinates; its rank in that group is its coordinate on the axis.
//
// Contracts:
// - Construction is collective over the world's ranks (every rank passes the
//   same shape). dp * pp * tp must equal the world size, every size >= 1;
//   otherwise every rank throws the same ConfigError.
// - Communicators are split from the world once, in the constructor (three
//   splits, in the order dp, pp, tp), so the world communicator passed in
//   must not be in use by another thread meanwhile. The convenience
//   constructor splits a fresh copy of init()'s world, never the world
//   engine's own communicator.
// - Engines: dp and tp each get an Engine over their communicator, built in
//   the constructor (collective), for every group including size-1 ones, so
//   code runs unchanged whatever the shape. While an axis's engine lives its
//   communicator belongs to the engine's thread: use the engine, not comm().
//   MeshOptions::engines = false builds none (then engine() throws). pp has
//   no engine: its communicator is the pipeline's, used from the training
//   thread (pipeline.h).
// - Store keys live under "<label>/<n>/", n counting the meshes built on the
//   store (the convenience constructor's world copy under "<label>/world.<k>"),
//   so several meshes can coexist on one job; meshes with the same label must
//   be built in the same order on every rank.
// - Destruction: the engines first (collective, as any Engine), then the
//   communicators.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "cohort/comm/communicator.h"
#include "cohort/engine/engine.h"
#include "cohort/engine/options.h"
#include "cohort/rendezvous/store.h"

namespace cohort {

struct MeshShape {
  int dp = 1;
  int pp = 1;
  int tp = 1;
};

enum class MeshAxis { dp = 0, pp = 1, tp = 2 };

const char* axis_name(MeshAxis axis);

struct MeshCoordinates {
  int dp = 0;
  int pp = 0;
  int tp = 0;
  bool operator==(const MeshCoordinates&) const = default;
};

struct MeshOptions {
  bool engines = true;              // build the dp and tp engines
  engine::EngineOptions engine;     // for both; label becomes "<label>/dp" and "<label>/tp"
  std::string label = "mesh";       // store namespace and engine labels
};

class Mesh {
 public:
  // Over `world` (this rank's communicator of the whole job) and the job's
  // `store`. Collective.
  Mesh(MeshShape shape, std::shared_ptr<comm::Communicator> world, std::shared_ptr<rendezvous::Store> store,
       MeshOptions options = {});
  // Over the world of cohort::init() (ConfigError if not initialized).
  explicit Mesh(MeshShape shape, MeshOptions options = {});
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.dp * shape_.pp * shape_.tp; }
  const MeshCoordinates& coordinates() const { return coords_; }

  // This rank's coordinate on / the size of `axis`.
  int rank(MeshAxis axis) const;
  int size(MeshAxis axis) const;
  // The communicator of this rank's group along `axis`: rank(axis) within it,
  // size(axis) ranks.
  const std::shared_ptr<comm::Communicator>& comm(MeshAxis axis) const;
  // The engine over comm(axis), for dp and tp; ConfigError for pp or when
  // built without engines.
  engine::Engine& engine(MeshAxis axis) const;

  // Pure layout arithmetic (no communication).
  static int world_rank_of(const MeshShape& shape, MeshCoordinates c);
  static MeshCoordinates coordinates_of(const MeshShape& shape, int world_rank);
  // ConfigError unless every size is >= 1 and the product is world_size.
  static void check_shape(const MeshShape& shape, int world_size);

 private:
  void build(std::shared_ptr<comm::Communicator> world, std::shared_ptr<rendezvous::Store> store);

  MeshShape shape_;
  MeshOptions options_;
  int world_rank_ = 0;
  MeshCoordinates coords_;
  std::shared_ptr<comm::Communicator> world_;
  std::array<std::shared_ptr<comm::Communicator>, 3> comms_;
  std::array<std::unique_ptr<engine::Engine>, 3> engines_;
};

}  // namespace cohort
