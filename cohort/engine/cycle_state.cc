#include "cohort/engine/cycle_state.h"

#include <algorithm>
#include <bit>
#include <sstream>

#include "cohort/common/check.h"

namespace cohort::engine {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // FNV-1a over the bytes of v: cheap and good enough to tell shapes apart.
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

OrderedSignature OrderedSignature::of(const OpMeta& m) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = mix(h, m.row_elements);
  h = mix(h, std::bit_cast<uint64_t>(m.prescale));
  h = mix(h, std::bit_cast<uint64_t>(m.postscale));
  h = mix(h, m.shape.size());
  // An allgather's dim 0 differs per rank legitimately.
  for (size_t i = m.kind == OpKind::allgather ? 1 : 0; i < m.shape.size(); ++i)
    h = mix(h, static_cast<uint64_t>(m.shape[i]));
  OrderedSignature s;
  s.a = uint64_t(m.kind) | uint64_t(m.dtype) << 8 | uint64_t(m.op) << 16 |
        (uint64_t(m.root + 1) & 0xffff) << 24 | (h & 0xffffff) << 40;
  s.b = m.count;
  return s;
}

OpMeta OrderedSignature::meta() const {
  OpMeta m;
  m.kind = kind();
  m.dtype = dtype();
  m.op = op();
  m.root = root();
  m.count = count();
  return m;
}

std::string OrderedSignature::describe() const {
  OpMeta m = meta();
  std::ostringstream os;
  os << m.describe();
  os << " [attributes hash " << std::hex << (a >> 40) << ']';
  return os.str();
}

CycleStateWriter::CycleStateWriter(std::span<uint64_t> words, size_t cache_words) : w_(words) {
  COHORT_CHECK_EQ(words.size(), cycle_state_words(cache_words));
  std::fill(w_.begin(), w_.end(), 0);
  w_[3 + 2 * kOrderedWindow] = cache_words;
}

bool CycleStateWriter::offer_ordered(const OrderedSignature& s) {
  const size_t i = static_cast<size_t>(w_[2]);
  if (i >= kOrderedWindow) return false;
  w_[3 + 2 * i] = s.a;
  w_[4 + 2 * i] = s.b;
  w_[2] = i + 1;
  return true;
}

}  // namespace cohort::engine
