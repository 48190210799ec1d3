// A tiny self-contained SVG line-chart writer for bench reports (no plotting library needed).
#pragma once

#include <string>
#include <vector>

namespace weft::lab {

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length; non-finite points (or x <= 0 on a log axis) are skipped
  bool dashed = false;
};

struct ChartSpec {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
  bool log2_x = false;  // x positions by log2(x); ticks at powers of two labelled 4K, 16K, ...
  std::vector<std::string> notes;  // lines of text under the chart (the claims it must not lose)
  int width = 760;
  int height = 440;
};

// Renders a standalone <svg> document: axes, ticks, gridlines, one polyline (with point markers)
// per series, and a legend. The y axis is linear from 0 (or from the minimum when data are
// negative) up to a "nice" bound. Notes add one line each below the height. Every number
// written is finite.
std::string render_line_chart(const ChartSpec& spec);

// Tick label for a count: 4096 -> "4K", 262144 -> "256K", 1048576 -> "1M", 1500 -> "1500".
std::string format_count(double v);

}  // namespace weft::lab
