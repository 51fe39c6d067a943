#include "cohort/torch/model_parallel/mesh.h"

#include "cohort/common/check.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/torch/core/runtime.h"

namespace cohort {

const char* axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::dp: return "dp";
    case MeshAxis::pp: return "pp";
    case MeshAxis::tp: return "tp";
  }
  return "?";
}

void Mesh::check_shape(const MeshShape& s, int world_size) {
  COHORT_CHECK_AS(ConfigError, s.dp >= 1 && s.pp >= 1 && s.tp >= 1)
      << "mesh sizes must be at least 1, got dp=" << s.dp << " pp=" << s.pp << " tp=" << s.tp;
  COHORT_CHECK_AS(ConfigError, int64_t(s.dp) * s.pp * s.tp == world_size)
      << "mesh dp=" << s.dp << " x pp=" << s.pp << " x tp=" << s.tp << " = " << int64_t(s.dp) * s.pp * s.tp
      << " ranks, but the world has " << world_size;
}

int Mesh::world_rank_of(const MeshShape& s, MeshCoordinates c) {
  COHORT_CHECK_AS(ConfigError, c.dp >= 0 && c.dp < s.dp && c.pp >= 0 && c.pp < s.pp && c.tp >= 0 && c.tp < s.tp)
      << "mesh coordinates (dp=" << c.dp << ", pp=" << c.pp << ", tp=" << c.tp << ") outside dp=" << s.dp
      << " pp=" << s.pp << " tp=" << s.tp;
  return (c.dp * s.pp + c.pp) * s.tp + c.tp;
}

MeshCoordinates Mesh::coordinates_of(const MeshShape& s, int world_rank) {
  check_shape(s, s.dp * s.pp * s.tp);
  COHORT_CHECK_AS(ConfigError, world_rank >= 0 && world_rank < s.dp * s.pp * s.tp)
      << "world rank " << world_rank << " outside a mesh of " << s.dp * s.pp * s.tp << " ranks";
  return {world_rank / (s.pp * s.tp), world_rank / s.tp % s.pp, world_rank % s.tp};
}

Mesh::Mesh(MeshShape shape, std::shared_ptr<comm::Communicator> world, std::shared_ptr<rendezvous::Store> store,
           MeshOptions options)
    : shape_(shape), options_(std::move(options)) {
  build(std::move(world), std::move(store));
}

Mesh::Mesh(MeshShape shape, MeshOptions options) : shape_(shape), options_(std::move(options)) {
  // The world engine's communicator belongs to the engine's thread; the
  // mesh splits its own copy of the world.
  auto store = world_store();
  // Each rank counts the meshes it built (all ranks build them in the same
  // order), so successive meshes rendezvous under distinct names.
  const int64_t copy = store->add(options_.label + "/world_copies/" + std::to_string(cohort::rank()), 1);
  build(create_world_communicator(options_.label + "/world." + std::to_string(copy)), store);
}

void Mesh::build(std::shared_ptr<comm::Communicator> world, std::shared_ptr<rendezvous::Store> store) {
  COHORT_CHECK_AS(ConfigError, world != nullptr && store != nullptr) << "Mesh needs a world communicator and a store";
  check_shape(shape_, world->size());
  world_ = std::move(world);
  world_rank_ = world_->rank();
  coords_ = coordinates_of(shape_, world_rank_);

  // A per-store instance number keeps the engines of successive meshes apart.
  int64_t instance = 0;
  if (world_rank_ == 0) instance = store->add(options_.label + "/instances", 1);
  world_->broadcast(BufferView{&instance, 1, DType::i64}, 0);
  const std::string ns = options_.label + "/" + std::to_string(instance);

  const MeshShape& s = shape_;
  const MeshCoordinates& c = coords_;
  // Colour: the two other coordinates; key: the coordinate along the axis.
  comms_[size_t(MeshAxis::dp)] = world_->split(c.pp * s.tp + c.tp, c.dp);
  comms_[size_t(MeshAxis::pp)] = world_->split(c.dp * s.tp + c.tp, c.pp);
  comms_[size_t(MeshAxis::tp)] = world_->split(c.dp * s.pp + c.pp, c.tp);
  for (MeshAxis a : {MeshAxis::dp, MeshAxis::pp, MeshAxis::tp}) {
    COHORT_CHECK(comms_[size_t(a)] && comms_[size_t(a)]->rank() == rank(a) && comms_[size_t(a)]->size() == size(a))
        << "mesh " << axis_name(a) << " group came out of split with the wrong rank or size";
  }
  if (!options_.engines) return;
  for (MeshAxis a : {MeshAxis::dp, MeshAxis::tp}) {
    // One namespace per group: the colour names it.
    const int color = a == MeshAxis::dp ? c.pp * s.tp + c.tp : c.dp * s.pp + c.pp;
    engine::EngineOptions eo = options_.engine;
    eo.label = options_.label + "/" + axis_name(a);
    engines_[size_t(a)] = std::make_unique<engine::Engine>(
        comms_[size_t(a)],
        std::make_shared<rendezvous::PrefixStore>(ns + "/engine/" + axis_name(a) + "." + std::to_string(color), store),
        eo);
  }
}

Mesh::~Mesh() {
  // Engines use their communicators until they stop.
  for (auto& e : engines_) e.reset();
  for (auto& c : comms_) c.reset();
  world_.reset();
}

int Mesh::rank(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::dp: return coords_.dp;
    case MeshAxis::pp: return coords_.pp;
    case MeshAxis::tp: return coords_.tp;
  }
  COHORT_THROW(ConfigError) << "unknown mesh axis";
}

int Mesh::size(MeshAxis axis) const {
  switch (axis) {
    case MeshAxis::dp: return shape_.dp;
    case MeshAxis::pp: return shape_.pp;
    case MeshAxis::tp: return shape_.tp;
  }
  COHORT_THROW(ConfigError) << "unknown mesh axis";
}

const std::shared_ptr<comm::Communicator>& Mesh::comm(MeshAxis axis) const { return comms_[size_t(axis)]; }

engine::Engine& Mesh::engine(MeshAxis axis) const {
  COHORT_CHECK_AS(ConfigError, axis != MeshAxis::pp)
      << "the mesh has no pp engine: the pp communicator is the pipeline's (pass mesh.comm(MeshAxis::pp) to Pipeline)";
  COHORT_CHECK_AS(ConfigError, engines_[size_t(axis)] != nullptr)
      << "the mesh was built with MeshOptions::engines = false: no " << axis_name(axis) << " engine";
  return *engines_[size_t(axis)];
}

}  // namespace cohort
