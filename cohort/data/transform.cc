#include "cohort/data/transform.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <unordered_map>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"
#include "cohort/data/feature_values.h"
#include "cohort/data/random_access_file.h"
#include "cohort/data/transform.pb.h"

namespace cohort::data {
namespace {

constexpr const char* kFormat = "cohort-transform v1";

int64_t product(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string op_name(const proto::Step& step) {
  switch (step.op_case()) {
    case proto::Step::kDecodeRaw: return "decode_raw";
    case proto::Step::kZScore: return "z_score";
    case proto::Step::kScaleMinMax: return "scale_min_max";
    case proto::Step::kBucketize: return "bucketize";
    case proto::Step::kVocabulary: return "vocabulary";
    case proto::Step::kReshape: return "reshape";
    case proto::Step::OP_NOT_SET: break;
  }
  return "(no op)";
}

// An f32 feature of `input`'s shape with out[i] = fn(input[i], i).
template <typename Fn>
Feature map_to_f32(const Feature& input, Fn&& fn) {
  Feature out = Feature::zeros(DType::f32, input.shape());
  float* o = out.values<float>().data();
  size_t i = 0;
  for_each_value(input, 1, [&](double x, size_t) {
    o[i] = float(fn(x, i));
    ++i;
  });
  return out;
}

}  // namespace

struct Transform::Impl {
  proto::Transform message;
  // Per step: the vocabulary's token -> id (empty for other steps).
  std::vector<std::unordered_map<std::string, int64_t>> lookups;

  void index_step(const proto::Step& step) {
    auto& lookup = lookups.emplace_back();
    if (step.op_case() != proto::Step::kVocabulary) return;
    for (int i = 0; i < step.vocabulary().tokens_size(); ++i) lookup.emplace(step.vocabulary().tokens(i), i);
  }

  proto::Step& add(std::string input, std::string output) {
    proto::Step* step = message.add_steps();
    step->set_input(std::move(input));
    step->set_output(std::move(output));
    return *step;
  }
};

Transform::Transform() : impl_(std::make_unique<Impl>()) { impl_->message.set_format(kFormat); }
Transform::~Transform() = default;
Transform::Transform(const Transform& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Transform& Transform::operator=(const Transform& other) {
  impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Transform::Transform(Transform&&) noexcept = default;
Transform& Transform::operator=(Transform&&) noexcept = default;

Transform& Transform::decode_raw(std::string input, std::string output, DType dtype, std::vector<int64_t> shape) {
  proto::Step& step = impl_->add(std::move(input), std::move(output));
  step.mutable_decode_raw()->set_dtype(uint32_t(dtype));
  for (int64_t d : shape) step.mutable_decode_raw()->add_shape(d);
  impl_->index_step(step);
  return *this;
}

Transform& Transform::z_score(std::string input, std::string output, const MeanVariance& stats) {
  proto::Step& step = impl_->add(std::move(input), std::move(output));
  for (size_t c = 0; c < stats.columns(); ++c) {
    step.mutable_z_score()->add_mean(stats.mean(c));
    step.mutable_z_score()->add_stddev(stats.stddev(c));
  }
  impl_->index_step(step);
  return *this;
}

Transform& Transform::scale_min_max(std::string input, std::string output, const MinMax& range) {
  proto::Step& step = impl_->add(std::move(input), std::move(output));
  for (size_t c = 0; c < range.columns(); ++c) {
    step.mutable_scale_min_max()->add_min(range.min(c));
    step.mutable_scale_min_max()->add_max(range.max(c));
  }
  impl_->index_step(step);
  return *this;
}

Transform& Transform::bucketize(std::string input, std::string output, std::vector<double> boundaries) {
  COHORT_CHECK_AS(ConfigError, std::is_sorted(boundaries.begin(), boundaries.end()))
      << "bucketize: boundaries must be sorted";
  proto::Step& step = impl_->add(std::move(input), std::move(output));
  for (double b : boundaries) step.mutable_bucketize()->add_boundaries(b);
  impl_->index_step(step);
  return *this;
}

Transform& Transform::vocabulary(std::string input, std::string output, std::vector<std::string> tokens,
                                 int64_t oov_id) {
  proto::Step& step = impl_->add(std::move(input), std::move(output));
  step.mutable_vocabulary()->set_oov_id(oov_id < 0 ? int64_t(tokens.size()) : oov_id);
  for (std::string& t : tokens) step.mutable_vocabulary()->add_tokens(std::move(t));
  impl_->index_step(step);
  return *this;
}

Transform& Transform::reshape(std::string feature, std::vector<int64_t> shape) {
  proto::Step& step = impl_->add(feature, feature);
  auto* reshape = step.mutable_reshape();  // set even for shape [] (a scalar), which has no dims to add
  for (int64_t d : shape) reshape->add_shape(d);
  impl_->index_step(step);
  return *this;
}

void Transform::apply(Sample& sample) const {
  for (int s = 0; s < impl_->message.steps_size(); ++s) {
    const proto::Step& step = impl_->message.steps(s);
    const Feature* in = sample.features.find(step.input());
    COHORT_CHECK_AS(ConfigError, in != nullptr)
        << "transform step " << s << " (" << op_name(step) << "): sample has no feature \"" << step.input()
        << "\" (it has: " << sample.features.names() << ")";
    auto where = [&] { return "transform step " + std::to_string(s) + " (" + op_name(step) + " " + step.input() + ")"; };
    Feature out;
    switch (step.op_case()) {
      case proto::Step::kDecodeRaw: {
        const auto& d = step.decode_raw();
        const DType dtype = DType(d.dtype());
        COHORT_CHECK_AS(ConfigError, in->is_bytes() && in->strings().size() == 1)
            << where() << ": expected one bytes value, got " << in->describe();
        const std::string& raw = in->strings()[0];
        const size_t want = size_t(product(d.shape())) * dtype_size(dtype);
        COHORT_CHECK_AS(ConfigError, raw.size() == want)
            << where() << ": " << raw.size() << " bytes, the shape needs " << want;
        out = Feature::zeros(dtype, {d.shape().begin(), d.shape().end()});
        std::copy(raw.begin(), raw.end(), reinterpret_cast<char*>(out.raw().data()));
        break;
      }
      case proto::Step::kZScore: {
        const auto& z = step.z_score();
        const size_t columns = size_t(z.mean_size());
        COHORT_CHECK_AS(ConfigError, columns == 1 || size_t(in->numel()) == columns)
            << where() << ": " << in->describe() << " against " << columns << " columns";
        out = map_to_f32(*in, [&](double x, size_t i) {
          const size_t c = columns == 1 ? 0 : i;
          const double sd = z.stddev(int(c));
          return (x - z.mean(int(c))) / (sd > 0 ? sd : 1.0);
        });
        break;
      }
      case proto::Step::kScaleMinMax: {
        const auto& m = step.scale_min_max();
        const size_t columns = size_t(m.min_size());
        COHORT_CHECK_AS(ConfigError, columns == 1 || size_t(in->numel()) == columns)
            << where() << ": " << in->describe() << " against " << columns << " columns";
        out = map_to_f32(*in, [&](double x, size_t i) {
          const size_t c = columns == 1 ? 0 : i;
          const double lo = m.min(int(c)), hi = m.max(int(c));
          return hi > lo ? (x - lo) / (hi - lo) : 0.0;
        });
        break;
      }
      case proto::Step::kBucketize: {
        const auto& b = step.bucketize().boundaries();
        out = Feature::zeros(DType::i64, in->shape());
        int64_t* o = out.values<int64_t>().data();
        size_t i = 0;
        for_each_value(*in, 1, [&](double x, size_t) { o[i++] = std::upper_bound(b.begin(), b.end(), x) - b.begin(); });
        break;
      }
      case proto::Step::kVocabulary: {
        COHORT_CHECK_AS(ConfigError, in->is_bytes()) << where() << ": expected strings, got " << in->describe();
        const auto& lookup = impl_->lookups[size_t(s)];
        std::vector<int64_t> ids;
        for (const std::string& t : in->strings()) {
          const auto it = lookup.find(t);
          ids.push_back(it == lookup.end() ? step.vocabulary().oov_id() : it->second);
        }
        out = Feature::of(ids);
        break;
      }
      case proto::Step::kReshape:
        out = *in;
        out.reshape({step.reshape().shape().begin(), step.reshape().shape().end()});
        break;
      case proto::Step::OP_NOT_SET:
        COHORT_THROW(ConfigError) << where() << ": no operation";
    }
    sample.features.set(step.output(), std::move(out));
  }
}

MapFn Transform::as_map() const {
  auto shared = std::make_shared<const Transform>(*this);
  return [shared](Sample& s, SampleRng&) { shared->apply(s); };
}

void Transform::save(const std::string& path) const {
  std::string bytes;
  COHORT_CHECK(impl_->message.SerializeToString(&bytes)) << "cannot serialise the transform";
  // Synced: the artifact costs a full pass over the data to make again, and
  // serving loads it long after training wrote it.
  write_file_atomically(path, bytes, {.durability = Durability::fsync_file_and_dir});
}

Transform Transform::load(const std::string& path) {
  const std::vector<uint8_t> bytes = read_whole_file(path);
  Transform t;
  proto::Transform& m = t.impl_->message;
  COHORT_CHECK_AS(ConfigError, bytes.size() <= size_t(INT32_MAX) && m.ParseFromArray(bytes.data(), int(bytes.size())) &&
                                   m.format() == kFormat)
      << path << " is not a cohort transform (expected a \"" << kFormat << "\" artifact)";
  for (int s = 0; s < m.steps_size(); ++s) {
    const proto::Step& step = m.steps(s);
    bool valid = step.op_case() != proto::Step::OP_NOT_SET;
    if (step.has_decode_raw()) valid = step.decode_raw().dtype() <= uint32_t(DType::i64);
    if (step.has_z_score()) valid = step.z_score().mean_size() >= 1 && step.z_score().mean_size() == step.z_score().stddev_size();
    if (step.has_scale_min_max())
      valid = step.scale_min_max().min_size() >= 1 && step.scale_min_max().min_size() == step.scale_min_max().max_size();
    for (int64_t d : step.has_decode_raw() ? step.decode_raw().shape() : step.reshape().shape()) valid &= d >= 0;
    COHORT_CHECK_AS(ConfigError, valid) << path << ": transform step " << s << " (" << op_name(step) << ") is malformed";
    t.impl_->index_step(step);
  }
  return t;
}

size_t Transform::steps() const { return size_t(impl_->message.steps_size()); }

Transform Transform::slice(size_t begin, size_t end) const {
  COHORT_CHECK_AS(ConfigError, begin <= end && end <= steps())
      << "Transform::slice(" << begin << ", " << end << ") of a transform of " << steps() << " steps";
  Transform t;
  for (size_t s = begin; s < end; ++s) {
    *t.impl_->message.add_steps() = impl_->message.steps(int(s));
    t.impl_->index_step(impl_->message.steps(int(s)));
  }
  return t;
}

std::string Transform::describe() const {
  std::ostringstream os;
  for (const proto::Step& step : impl_->message.steps()) {
    os << op_name(step) << ' ' << step.input() << " -> " << step.output();
    if (step.has_z_score()) os << " (" << step.z_score().mean_size() << " column" << (step.z_score().mean_size() > 1 ? "s" : "") << ")";
    if (step.has_bucketize()) os << " (" << step.bucketize().boundaries_size() + 1 << " buckets)";
    if (step.has_vocabulary()) os << " (" << step.vocabulary().tokens_size() << " tokens)";
    os << '\n';
  }
  return os.str();
}

}  // namespace cohort::data
