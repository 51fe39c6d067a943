// cohort/plot: ticks, layout, and PNGs read back with cairo: the image has
// the figure's size, each series' color lies where its points map to, the
// background elsewhere, the legend shows every labelled series.
#include "cohort/plot/figure.h"

#include <cairo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>

#include "cohort/common/error.h"

namespace cohort::plot {
namespace {

TEST(Ticks, LinearAreNiceAndCover) {
  EXPECT_EQ(ticks(0, 100, false, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(ticks(0.1, 0.9, false, 4), (std::vector<double>{0.2, 0.4, 0.6, 0.8}));
  const auto t = ticks(-3, 7, false, 6);
  EXPECT_EQ(t.front(), -2);
  EXPECT_EQ(t.back(), 6);
  EXPECT_TRUE(ticks(1, 1, false).empty());
}

TEST(Ticks, LogArePowersOfTen) {
  EXPECT_EQ(ticks(1, 1e4, true), (std::vector<double>{1, 10, 100, 1000, 10000}));
  EXPECT_EQ(ticks(8, 512, true), (std::vector<double>{10, 20, 50, 100, 200, 500}));
  EXPECT_TRUE(ticks(-1, 10, true).empty());
  EXPECT_EQ(tick_label(512), "512");
  EXPECT_EQ(tick_label(0.25), "0.25");
  EXPECT_EQ(tick_label(1e7), "1e+07");
}

TEST(Layout, MapsDataIntoThePlotArea) {
  Figure f;
  f.x = {.label = "x", .min = 0, .max = 10};
  f.y = {.label = "y", .min = 0, .max = 100};
  f.series.push_back({.label = "s", .x = {0, 10}, .y = {0, 100}});
  const Layout l(f);
  EXPECT_DOUBLE_EQ(l.px(0), l.left());
  EXPECT_DOUBLE_EQ(l.px(10), l.right());
  EXPECT_DOUBLE_EQ(l.py(0), l.bottom());
  EXPECT_DOUBLE_EQ(l.py(100), l.top());
  EXPECT_DOUBLE_EQ(l.px(5), (l.left() + l.right()) / 2);
  Figure g = f;
  g.x = {.log = true, .min = 1, .max = 100};
  const Layout lg(g);
  EXPECT_NEAR(lg.px(10), (lg.left() + lg.right()) / 2, 1e-9);
}

TEST(Layout, RejectsInvalidFigures) {
  Figure f;
  f.series.push_back({.label = "s", .x = {1, 2}, .y = {1}});
  EXPECT_THROW(Layout{f}, ConfigError);
  Figure g;
  g.x = {.min = 5, .max = 1};
  EXPECT_THROW(Layout{g}, ConfigError);
  Figure h;
  h.width = 10;
  EXPECT_THROW(Layout{h}, ConfigError);
  Figure k;
  k.x = {.log = true, .min = 0};
  EXPECT_THROW(Layout{k}, ConfigError);
}

struct Image {
  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface{nullptr, cairo_surface_destroy};
  int width = 0, height = 0;

  explicit Image(const std::string& path) {
    surface.reset(cairo_image_surface_create_from_png(path.c_str()));
    if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) return;
    width = cairo_image_surface_get_width(surface.get());
    height = cairo_image_surface_get_height(surface.get());
  }
  Color at(int x, int y) const {
    const unsigned char* data = cairo_image_surface_get_data(surface.get());
    const int stride = cairo_image_surface_get_stride(surface.get());
    const uint32_t px = *reinterpret_cast<const uint32_t*>(data + y * stride + x * 4);
    return {((px >> 16) & 0xff) / 255.0, ((px >> 8) & 0xff) / 255.0, (px & 0xff) / 255.0};
  }
  // Whether a pixel within `radius` of (x, y) is close to `c`.
  bool near(double x, double y, const Color& c, int radius = 2, double tolerance = 0.12) const {
    for (int dy = -radius; dy <= radius; ++dy)
      for (int dx = -radius; dx <= radius; ++dx) {
        const int px = int(std::lround(x)) + dx, py = int(std::lround(y)) + dy;
        if (px < 0 || py < 0 || px >= width || py >= height) continue;
        const Color p = at(px, py);
        if (std::fabs(p.r - c.r) < tolerance && std::fabs(p.g - c.g) < tolerance && std::fabs(p.b - c.b) < tolerance)
          return true;
      }
    return false;
  }
};

TEST(WritePng, SeriesAppearWhereTheirPointsMap) {
  const std::string path = ::testing::TempDir() + "plot_test_" + std::to_string(::getpid()) + ".png";
  Figure f;
  f.title = "efficiency";
  f.width = 640;
  f.height = 400;
  f.x = {.label = "ranks", .log = true, .ticks = {8, 64, 512}};
  f.y = {.label = "%", .min = 0, .max = 100};
  f.series.push_back({.label = "model", .x = {8, 64, 512}, .y = {95, 90, 80}});
  f.series.push_back({.label = "published", .x = {512}, .y = {40}, .color = Color{1, 0, 0}, .line = false});
  write_png(f, path);
  const Image img(path);
  std::remove(path.c_str());
  ASSERT_EQ(img.width, 640);
  ASSERT_EQ(img.height, 400);
  const Layout l(f);
  const Color blue = l.color(0);
  EXPECT_EQ(l.color(1).r, 1);
  // On the line: the points and the midpoint of a segment.
  for (double x : {8.0, 64.0, 512.0}) {
    const double y = x == 8 ? 95 : x == 64 ? 90 : 80;
    EXPECT_TRUE(img.near(l.px(x), l.py(y), blue)) << x;
  }
  EXPECT_TRUE(img.near((l.px(8) + l.px(64)) / 2, (l.py(95) + l.py(90)) / 2, blue));
  EXPECT_TRUE(img.near(l.px(512), l.py(40), Color{1, 0, 0}));
  // Off the line: background (white), not the series.
  EXPECT_FALSE(img.near(l.px(64), l.py(30), blue, 3));
  EXPECT_TRUE(img.near(l.px(64), l.py(30), Color{1, 1, 1}, 0));
  // The legend, right of the plot area, shows both colors.
  bool blue_in_legend = false, red_in_legend = false;
  for (int y = int(l.top()); y < int(l.top()) + 60; ++y) {
    blue_in_legend = blue_in_legend || img.near(l.right() + 25, y, blue, 1);
    red_in_legend = red_in_legend || img.near(l.right() + 25, y, Color{1, 0, 0}, 1);
  }
  EXPECT_TRUE(blue_in_legend);
  EXPECT_TRUE(red_in_legend);
}

TEST(WritePng, UnwritablePathIsAnError) {
  Figure f;
  f.series.push_back({.label = "s", .x = {1, 2}, .y = {1, 2}});
  EXPECT_THROW(write_png(f, "/nonexistent-dir/x.png"), Error);
}

}  // namespace
}  // namespace cohort::plot
