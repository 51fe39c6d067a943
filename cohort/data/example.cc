#include "cohort/data/example.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <algorithm>

#include "cohort/data/example.pb.h"

namespace cohort::data {

bool parse_example(std::span<const uint8_t> record, Features& out, std::string* error) {
  // An arena makes the map's nodes and lists one allocation block, freed at
  // once; the strings are then moved out.
  google::protobuf::Arena arena;
  auto* example = google::protobuf::Arena::CreateMessage<proto::Example>(&arena);
  if (record.size() > size_t(INT32_MAX) || !example->ParseFromArray(record.data(), int(record.size()))) {
    if (error) *error = "not a valid tf.train.Example (protobuf parse failed, " + std::to_string(record.size()) + " bytes)";
    return false;
  }
  out = Features();
  // Name order: the map's own order is unspecified and must not leak into
  // the sample.
  std::vector<const std::string*> names;
  names.reserve(example->features().feature().size());
  for (const auto& [name, feature] : example->features().feature()) names.push_back(&name);
  std::sort(names.begin(), names.end(), [](auto* a, auto* b) { return *a < *b; });
  auto& map = *example->mutable_features()->mutable_feature();
  for (const std::string* name : names) {
    proto::Feature& f = map.at(*name);
    switch (f.kind_case()) {
      case proto::Feature::kBytesList: {
        std::vector<std::string> values(size_t(f.bytes_list().value_size()));
        for (int i = 0; i < f.bytes_list().value_size(); ++i) values[size_t(i)] = f.bytes_list().value(i);
        out.set(*name, Feature::bytes(std::move(values)));
        break;
      }
      case proto::Feature::kFloatList: {
        const auto& v = f.float_list().value();
        out.set(*name, Feature::of(std::span<const float>(v.data(), size_t(v.size()))));
        break;
      }
      case proto::Feature::kInt64List: {
        const auto& v = f.int64_list().value();
        out.set(*name, Feature::of(std::span<const int64_t>(v.data(), size_t(v.size()))));
        break;
      }
      case proto::Feature::KIND_NOT_SET:
        out.set(*name, Feature::bytes({}));
        break;
    }
  }
  return true;
}

std::string build_example(const Features& features) {
  proto::Example example;
  auto& map = *example.mutable_features()->mutable_feature();
  for (const auto& [name, feature] : features) {
    proto::Feature& f = map[name];
    if (feature.is_bytes()) {
      auto* list = f.mutable_bytes_list();
      for (const std::string& s : feature.strings()) list->add_value(s);
      continue;
    }
    switch (feature.dtype()) {
      case DType::f32: {
        const auto v = feature.values<float>();
        f.mutable_float_list()->mutable_value()->Add(v.begin(), v.end());
        break;
      }
      case DType::i64: {
        const auto v = feature.values<int64_t>();
        f.mutable_int64_list()->mutable_value()->Add(v.begin(), v.end());
        break;
      }
      case DType::u8: {
        const auto v = feature.raw();
        f.mutable_bytes_list()->add_value(std::string(reinterpret_cast<const char*>(v.data()), v.size()));
        break;
      }
      default:
        COHORT_THROW(ConfigError) << "feature \"" << name << "\" is " << feature.describe()
                                  << ": a tf.train.Example holds only bytes, f32, i64 (and u8 as bytes)";
    }
  }
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // map entries sorted by key
    example.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace cohort::data
