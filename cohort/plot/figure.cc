#include "cohort/plot/figure.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>

#include "cohort/common/atomic_file.h"
#include "cohort/common/check.h"

namespace cohort::plot {
namespace {

constexpr Color kPalette[] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17}, {0.84, 0.15, 0.16},
                              {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29}, {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50},
                              {0.74, 0.74, 0.13}, {0.09, 0.75, 0.81}};
constexpr double kFontSize = 12;
constexpr double kTitleSize = 15;
constexpr const char* kFont = "DejaVu Sans";

bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// Legend width from the longest label (an estimate: the layout is computed
// without a cairo context, so tests can use it).
double legend_width(const Figure& f) {
  size_t longest = 0;
  for (const Series& s : f.series) longest = std::max(longest, s.label.size());
  return longest == 0 ? 0 : 48 + 7.2 * double(longest);
}

// The axis range: the user's limits, else the data's, padded, and widened to
// whole ticks.
void axis_range(const Axis& a, std::vector<double> values, double& lo, double& hi, std::vector<double>& t) {
  std::erase_if(values, [&](double v) { return !usable(v, a.log); });
  double dlo = values.empty() ? (a.log ? 1 : 0) : *std::min_element(values.begin(), values.end());
  double dhi = values.empty() ? (a.log ? 10 : 1) : *std::max_element(values.begin(), values.end());
  if (a.min) dlo = *a.min;
  if (a.max) dhi = *a.max;
  if (dhi <= dlo) {
    // A flat range gets height around its value.
    const double mid = dlo;
    dlo = a.log ? mid / 2 : mid - std::max(1.0, std::fabs(mid) * 0.1);
    dhi = a.log ? mid * 2 : mid + std::max(1.0, std::fabs(mid) * 0.1);
  }
  // Padding, so that markers at the ends are not cut in half.
  if (!a.log) {
    const double pad = 0.04 * (dhi - dlo);
    if (!a.min) dlo -= pad;
    if (!a.max) dhi += pad;
  } else {
    const double pad = std::pow(dhi / dlo, 0.03);
    if (!a.min) dlo /= pad;
    if (!a.max) dhi *= pad;
  }
  t = a.ticks.empty() ? ticks(dlo, dhi, a.log) : a.ticks;
  if (a.ticks.empty() && !a.min && !t.empty() && !a.log) dlo = std::min(dlo, t.front());
  if (a.ticks.empty() && !a.max && !t.empty() && !a.log) dhi = std::max(dhi, t.back());
  std::erase_if(t, [&](double v) { return v < dlo - 1e-9 * std::fabs(dhi - dlo) || v > dhi + 1e-9 * std::fabs(dhi - dlo); });
  lo = dlo;
  hi = dhi;
}

void set_color(cairo_t* cr, const Color& c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

void text_at(cairo_t* cr, const std::string& s, double x, double y, double align_x, double align_y) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - e.x_bearing - align_x * e.width, y - e.y_bearing - align_y * e.height);
  cairo_show_text(cr, s.c_str());
}

void validate(const Figure& f) {
  COHORT_CHECK_AS(ConfigError, f.width >= 200 && f.height >= 150 && f.width <= 16384 && f.height <= 16384)
      << "plot: figure size " << f.width << "x" << f.height << " outside 200x150 .. 16384x16384";
  for (const Axis* a : {&f.x, &f.y}) {
    if (a->min && a->max) {
      COHORT_CHECK_AS(ConfigError, *a->min < *a->max) << "plot: axis '" << a->label << "' has min " << *a->min
                                                      << " not below max " << *a->max;
    }
    if (a->log) {
      COHORT_CHECK_AS(ConfigError, !a->min || *a->min > 0) << "plot: log axis '" << a->label << "' needs a positive min";
      for (double t : a->ticks)
        COHORT_CHECK_AS(ConfigError, t > 0) << "plot: log axis '" << a->label << "' has tick " << t;
    }
  }
  for (const Series& s : f.series)
    COHORT_CHECK_AS(ConfigError, s.x.size() == s.y.size())
        << "plot: series '" << s.label << "' has " << s.x.size() << " x values and " << s.y.size() << " y values";
}

}  // namespace

std::vector<double> ticks(double lo, double hi, bool log, int target) {
  std::vector<double> out;
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (log) {
    if (lo <= 0) return out;
    const int d0 = int(std::floor(std::log10(lo))), d1 = int(std::ceil(std::log10(hi)));
    const bool fine = std::log10(hi / lo) <= 2.5;  // few decades: 1, 2, 5 in each
    for (int d = d0; d <= d1; ++d)
      for (double m : fine ? std::vector<double>{1, 2, 5} : std::vector<double>{1}) {
        const double v = m * std::pow(10.0, d);
        if (v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12)) out.push_back(v);
      }
    return out;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const int e = int(std::floor(std::log10(raw)));
  const double mag = std::pow(10.0, e);
  double m = 10;
  for (double c : {1.0, 2.0, 5.0, 10.0})
    if (c * mag >= raw) {
      m = c;
      break;
    }
  // Tick k is k * m * 10^e, computed as an integer scaled once, so that 0.6
  // is the double nearest 0.6 rather than 3 * 0.2.
  const auto value = [&](double k) { return e >= 0 ? k * m * std::pow(10.0, e) : k * m / std::pow(10.0, -e); };
  const double step = m * mag;
  for (double k = std::ceil(lo / step - 1e-9); value(k) <= hi + step * 1e-9; ++k) out.push_back(value(k) + 0.0);
  return out;
}

Color palette_color(size_t i) { return kPalette[i % std::size(kPalette)]; }

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

Layout::Layout(const Figure& f) : f_(f) {
  validate(f);
  left_ = 78;
  top_ = f.title.empty() ? 20 : 44;
  bottom_ = f.height - (f.x.label.empty() ? 34 : 56);
  right_ = f.width - 20 - legend_width(f);
  COHORT_CHECK_AS(ConfigError, right_ - left_ >= 60 && bottom_ - top_ >= 60)
      << "plot: figure " << f.width << "x" << f.height << " leaves no room for the plot (long legend labels?)";
  std::vector<double> xs, ys;
  for (const Series& s : f.series) {
    for (size_t i = 0; i < s.x.size(); ++i)
      if (usable(s.x[i], f.x.log) && usable(s.y[i], f.y.log)) {
        xs.push_back(s.x[i]);
        ys.push_back(s.y[i]);
      }
  }
  axis_range(f.x, xs, x0_, x1_, xt_);
  axis_range(f.y, ys, y0_, y1_, yt_);
}

double Layout::px(double x) const {
  const double t = f_.x.log ? (std::log(x) - std::log(x0_)) / (std::log(x1_) - std::log(x0_)) : (x - x0_) / (x1_ - x0_);
  return left_ + t * (right_ - left_);
}

double Layout::py(double y) const {
  const double t = f_.y.log ? (std::log(y) - std::log(y0_)) / (std::log(y1_) - std::log(y0_)) : (y - y0_) / (y1_ - y0_);
  return bottom_ - t * (bottom_ - top_);
}

Color Layout::color(size_t i) const {
  if (i < f_.series.size() && f_.series[i].color) return *f_.series[i].color;
  size_t automatic = 0;
  for (size_t j = 0; j < i && j < f_.series.size(); ++j)
    if (!f_.series[j].color) ++automatic;
  return palette_color(automatic);
}

void write_png(const Figure& f, const std::string& path) {
  const Layout L(f);
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, f.width, f.height), cairo_surface_destroy);
  COHORT_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS)
      << "plot: cannot create a " << f.width << "x" << f.height << " image: "
      << cairo_status_to_string(cairo_surface_status(surface.get()));
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> ctx(cairo_create(surface.get()), cairo_destroy);
  cairo_t* cr = ctx.get();

  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, kFontSize);

  // Grid and tick labels.
  cairo_set_line_width(cr, 1);
  for (double t : L.x_ticks()) {
    const double x = std::round(L.px(t)) + 0.5;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, x, L.top());
    cairo_line_to(cr, x, L.bottom());
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    text_at(cr, tick_label(t), x, L.bottom() + 6, 0.5, 0);
  }
  for (double t : L.y_ticks()) {
    const double y = std::round(L.py(t)) + 0.5;
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, L.left(), y);
    cairo_line_to(cr, L.right(), y);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    text_at(cr, tick_label(t), L.left() - 6, y, 1, 0.5);
  }
  cairo_set_source_rgb(cr, 0, 0, 0);
  cairo_rectangle(cr, std::round(L.left()) + 0.5, std::round(L.top()) + 0.5, std::round(L.right() - L.left()),
                  std::round(L.bottom() - L.top()));
  cairo_stroke(cr);

  // Labels and title.
  if (!f.x.label.empty()) text_at(cr, f.x.label, (L.left() + L.right()) / 2, f.height - 8, 0.5, 1);
  if (!f.y.label.empty()) {
    cairo_save(cr);
    cairo_translate(cr, 16, (L.top() + L.bottom()) / 2);
    cairo_rotate(cr, -std::numbers::pi / 2);
    text_at(cr, f.y.label, 0, 0, 0.5, 0.5);
    cairo_restore(cr);
  }
  if (!f.title.empty()) {
    cairo_save(cr);
    cairo_select_font_face(cr, kFont, CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
    cairo_set_font_size(cr, kTitleSize);
    text_at(cr, f.title, f.width / 2.0, 12, 0.5, 0);
    cairo_restore(cr);
  }

  // Series, clipped to the plot area.
  cairo_save(cr);
  cairo_rectangle(cr, L.left(), L.top(), L.right() - L.left(), L.bottom() - L.top());
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  for (size_t i = 0; i < f.series.size(); ++i) {
    const Series& s = f.series[i];
    set_color(cr, L.color(i));
    cairo_set_line_width(cr, 2);
    const double dash[] = {7, 4};
    cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
    if (s.line) {
      bool pen = false;
      for (size_t j = 0; j < s.x.size(); ++j) {
        if (!usable(s.x[j], f.x.log) || !usable(s.y[j], f.y.log)) {
          pen = false;  // a gap in the line
          continue;
        }
        if (pen)
          cairo_line_to(cr, L.px(s.x[j]), L.py(s.y[j]));
        else
          cairo_move_to(cr, L.px(s.x[j]), L.py(s.y[j]));
        pen = true;
      }
      cairo_stroke(cr);
    }
    cairo_set_dash(cr, dash, 0, 0);
    if (s.markers || !s.line)
      for (size_t j = 0; j < s.x.size(); ++j) {
        if (!usable(s.x[j], f.x.log) || !usable(s.y[j], f.y.log)) continue;
        cairo_new_sub_path(cr);
        cairo_arc(cr, L.px(s.x[j]), L.py(s.y[j]), s.line ? 3.5 : 5, 0, 2 * std::numbers::pi);
        cairo_fill(cr);
      }
  }
  cairo_restore(cr);

  // Legend, right of the plot area.
  double ly = L.top() + 8;
  for (size_t i = 0; i < f.series.size(); ++i) {
    const Series& s = f.series[i];
    if (s.label.empty()) continue;
    const double lx = L.right() + 12;
    set_color(cr, L.color(i));
    if (s.line) {
      cairo_set_line_width(cr, 2);
      const double dash[] = {7, 4};
      cairo_set_dash(cr, dash, s.dashed ? 2 : 0, 0);
      cairo_move_to(cr, lx, ly + 7);
      cairo_line_to(cr, lx + 26, ly + 7);
      cairo_stroke(cr);
      cairo_set_dash(cr, dash, 0, 0);
    }
    if (s.markers || !s.line) {
      cairo_arc(cr, lx + 13, ly + 7, s.line ? 3.5 : 5, 0, 2 * std::numbers::pi);
      cairo_fill(cr);
    }
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, s.label, lx + 34, ly + 7, 0, 0.5);
    ly += 20;
  }

  cairo_surface_flush(surface.get());
  // Encoded in memory (a chart is some 100 KB), then written atomically so
  // that a reader never sees half a picture. Not synced: a chart is drawn
  // again from data its caller keeps.
  std::string png;
  const cairo_status_t st = cairo_surface_write_to_png_stream(
      surface.get(),
      [](void* out, const unsigned char* data, unsigned int n) {
        static_cast<std::string*>(out)->append(reinterpret_cast<const char*>(data), n);
        return CAIRO_STATUS_SUCCESS;
      },
      &png);
  COHORT_CHECK(st == CAIRO_STATUS_SUCCESS) << "plot: cannot encode '" << path << "': " << cairo_status_to_string(st);
  write_file_atomically(path, png, {.durability = Durability::none});
}

}  // namespace cohort::plot
