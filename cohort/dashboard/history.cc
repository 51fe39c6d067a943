#include "cohort/dashboard/history.h"

#include <algorithm>

#include "cohort/common/check.h"

namespace cohort::dashboard {

Series::Series(size_t capacity) : capacity_(capacity) {
  COHORT_CHECK(capacity_ >= 2 && capacity_ % 2 == 0)
      << "a series keeps an even number of points, at least 2, got " << capacity_;
  kept_.reserve(capacity_);
}

void Series::append(double x, double y) {
  ++appended_;
  sum_x_ += x;
  sum_y_ += y;
  if (++group_ < stride_) return;
  kept_.push_back({sum_x_ / double(group_), sum_y_ / double(group_)});
  sum_x_ = sum_y_ = 0;
  group_ = 0;
  if (kept_.size() == capacity_) halve();
}

void Series::halve() {
  // Every kept point covers stride_ appends; pairs merge into points of
  // 2 * stride_, which is what later groups accumulate to.
  for (size_t i = 0; i < kept_.size() / 2; ++i)
    kept_[i] = {(kept_[2 * i].x + kept_[2 * i + 1].x) / 2, (kept_[2 * i].y + kept_[2 * i + 1].y) / 2};
  kept_.resize(kept_.size() / 2);
  stride_ *= 2;
}

std::vector<Point> Series::points() const {
  std::vector<Point> out(kept_);
  if (group_ > 0) out.push_back({sum_x_ / double(group_), sum_y_ / double(group_)});
  return out;
}

}  // namespace cohort::dashboard
