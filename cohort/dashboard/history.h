// Series: a bounded, downsampled history of (x, y) points, for the
// dashboard's charts (step time per rank against the step, a metric against
// the epoch) whatever the length of the run.
//
// Points are appended in order of x. The series keeps at most `capacity`
// points: when it is full, every two neighbouring points merge into one (the
// mean of their x and of their y, so a point stands for the steps it covers)
// and the stride (how many appended points one kept point stands for)
// doubles; points then accumulate `stride` at a time. So memory is
// O(capacity) for any number of appends, the kept points are evenly spaced
// over the run, and each is a mean, not a sample (a spike is flattened, not
// dropped at random). The last point appended is always visible: a partial
// group shows as its mean so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort::dashboard {

struct Point {
  double x = 0;
  double y = 0;
};

class Series {
 public:
  // `capacity`: most points kept (even, at least 2).
  explicit Series(size_t capacity = 240);

  void append(double x, double y);
  // The kept points, with the partial group last (at most capacity + 1).
  std::vector<Point> points() const;
  // Points appended since construction.
  int64_t appended() const { return appended_; }
  size_t capacity() const { return capacity_; }
  int64_t stride() const { return stride_; }
  bool empty() const { return appended_ == 0; }

 private:
  void halve();

  size_t capacity_;
  int64_t stride_ = 1;
  std::vector<Point> kept_;
  // The group being accumulated (fewer than stride_ points).
  double sum_x_ = 0, sum_y_ = 0;
  int64_t group_ = 0;
  int64_t appended_ = 0;
};

}  // namespace cohort::dashboard
