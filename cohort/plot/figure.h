// cohort/plot: line charts written to PNG, without LibTorch (Debian's cairo).
//
//   plot::Figure f;
//   f.title = "Scaling efficiency";
//   f.x = {.label = "GPUs", .log = true};
//   f.y = {.label = "efficiency (%)", .min = 0, .max = 100};
//   f.series.push_back({.label = "ring", .x = {8, 64, 512}, .y = {98, 93, 88}});
//   f.series.push_back({.label = "published", .x = {512}, .y = {90}, .line = false});
//   plot::write_png(f, "scaling.png");
//
// Axes get "nice" ticks (1, 2, 5 x 10^k; powers of ten on a log axis),
// labels and a grid; series get distinct colors (a fixed palette, in order),
// markers at their points, and a legend entry. Points that are not finite
// (or not positive on a log axis) are skipped. Limits left unset come from
// the data, padded; a flat range is widened so it has height.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::plot {

struct Color {
  double r = 0, g = 0, b = 0;  // 0..1
};

struct Axis {
  std::string label;
  bool log = false;
  std::optional<double> min, max;
  std::vector<double> ticks;  // explicit tick positions; empty: automatic
};

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::optional<Color> color;  // unset: the palette's next color
  bool line = true;            // false: markers only (e.g. published reference points)
  bool markers = true;
  bool dashed = false;
};

struct Figure {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
  int width = 900;   // pixels
  int height = 560;
};

// Writes `figure` as a PNG at `path`, atomically (common/atomic_file.h: a
// reader sees the old picture or the new one); ConfigError on an invalid
// figure (mismatched x/y lengths, non-positive size, inverted limits) or
// when the file cannot be written.
void write_png(const Figure& figure, const std::string& path);

// Where the data land in the image, for tests and for callers placing
// annotations: the plot area in pixels and the data-to-pixel mapping the
// renderer uses.
class Layout {
 public:
  explicit Layout(const Figure& figure);
  double px(double x) const;  // pixel column of data x
  double py(double y) const;  // pixel row of data y
  double left() const { return left_; }
  double right() const { return right_; }
  double top() const { return top_; }
  double bottom() const { return bottom_; }
  double x_min() const { return x0_; }
  double x_max() const { return x1_; }
  double y_min() const { return y0_; }
  double y_max() const { return y1_; }
  const std::vector<double>& x_ticks() const { return xt_; }
  const std::vector<double>& y_ticks() const { return yt_; }
  // The color series i is drawn in.
  Color color(size_t i) const;

 private:
  const Figure& f_;
  double left_, right_, top_, bottom_;
  double x0_, x1_, y0_, y1_;
  std::vector<double> xt_, yt_;
};

// Tick positions covering [lo, hi]: multiples of 1, 2 or 5 x 10^k, about
// `target` of them; on a log axis, powers of ten (with 2 and 5 between them
// when there are few decades).
std::vector<double> ticks(double lo, double hi, bool log, int target = 6);

// The i-th color of the palette series take in order when theirs is unset.
Color palette_color(size_t i);

// A tick's text: "0.25", "1e+06", "512".
std::string tick_label(double v);

}  // namespace cohort::plot
