// SVG line-chart rendering: scales, "nice" ticks, polylines and a legend, written as plain text.
#include "lab/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace weft::lab {

namespace {

// Okabe & Ito (2008) colour-blind-safe palette, black dropped; cycles when there are more series.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#F0E442", "#000000"};
constexpr int kMarginLeft = 70, kMarginRight = 180, kMarginTop = 44, kMarginBottom = 56;

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// Fixed-point coordinate; callers only pass finite values, the guard keeps the promise anyway.
std::string n2(double v) {
  if (!std::isfinite(v)) v = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

std::string tick_label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

// "Nice" step (1, 2 or 5 times a power of ten) giving about `target` intervals over span
// (Heckbert 1990, "Nice numbers for graph labels", Graphics Gems).
double nice_step(double span, int target) {
  double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  return nice * mag;
}

bool usable(double x, double y, bool log_x) {
  return std::isfinite(x) && std::isfinite(y) && (!log_x || x > 0);
}

}  // namespace

std::string format_count(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a >= 1 << 20 && std::fmod(a, double(1 << 20)) == 0)
    std::snprintf(buf, sizeof buf, "%gM", v / double(1 << 20));
  else if (a >= 1024 && std::fmod(a, 1024.0) == 0)
    std::snprintf(buf, sizeof buf, "%gK", v / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string render_line_chart(const ChartSpec& spec) {
  const double w = std::max(spec.width, kMarginLeft + kMarginRight + 100);
  const double h = std::max(spec.height, kMarginTop + kMarginBottom + 100);
  const double plot_x0 = kMarginLeft, plot_x1 = w - kMarginRight;
  const double plot_y0 = kMarginTop, plot_y1 = h - kMarginBottom;
  const bool log_x = spec.log2_x;

  // Data ranges over usable points; x in log2 units when log_x.
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = 0, y_max = 0;  // y always includes 0
  for (const auto& s : spec.series) {
    size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!usable(s.x[i], s.y[i], log_x)) continue;
      double xv = log_x ? std::log2(s.x[i]) : s.x[i];
      x_min = std::min(x_min, xv);
      x_max = std::max(x_max, xv);
      y_min = std::min(y_min, s.y[i]);
      y_max = std::max(y_max, s.y[i]);
    }
  }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1;
  if (log_x) x_min = std::floor(x_min), x_max = std::ceil(x_max);
  if (x_max - x_min < 1e-12) x_min -= 0.5, x_max += 0.5;
  if (y_max - y_min < 1e-12) y_max = y_min + 1;
  double y_step = nice_step(y_max - y_min, 5);
  y_min = std::floor(y_min / y_step) * y_step;
  y_max = std::ceil(y_max / y_step) * y_step;

  auto px = [&](double xv) { return plot_x0 + (xv - x_min) / (x_max - x_min) * (plot_x1 - plot_x0); };
  auto py = [&](double yv) { return plot_y1 - (yv - y_min) / (y_max - y_min) * (plot_y1 - plot_y0); };

  const double h_all = h + 18.0 * double(spec.notes.size());
  std::string svg;
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + n2(w) + "\" height=\"" + n2(h_all) +
         "\" viewBox=\"0 0 " + n2(w) + " " + n2(h_all) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect x=\"0\" y=\"0\" width=\"" + n2(w) + "\" height=\"" + n2(h_all) + "\" fill=\"white\"/>\n";
  for (size_t i = 0; i < spec.notes.size(); ++i)
    svg += "<text x=\"12\" y=\"" + n2(h + 4 + 18.0 * double(i)) + "\" font-size=\"11\">" +
           escape_xml(spec.notes[i]) + "</text>\n";
  svg += "<text x=\"" + n2(w / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">" +
         escape_xml(spec.title) + "</text>\n";

  // Y ticks and gridlines.
  svg += "<g stroke=\"#dddddd\" stroke-width=\"1\">\n";
  std::string y_labels;
  int n_y = int(std::lround((y_max - y_min) / y_step));
  for (int i = 0; i <= n_y; ++i) {
    double yv = y_min + i * y_step;
    svg += "<line x1=\"" + n2(plot_x0) + "\" y1=\"" + n2(py(yv)) + "\" x2=\"" + n2(plot_x1) +
           "\" y2=\"" + n2(py(yv)) + "\"/>\n";
    y_labels += "<text x=\"" + n2(plot_x0 - 6) + "\" y=\"" + n2(py(yv) + 4) +
                "\" text-anchor=\"end\">" + tick_label(yv) + "</text>\n";
  }
  // X ticks: every power of two on a log axis (thinned to at most ~10), nice steps otherwise.
  std::string x_labels;
  std::vector<double> x_ticks;
  if (log_x) {
    int first = int(x_min), last = int(x_max);
    int stride = std::max(1, (last - first + 9) / 10);
    for (int e = first; e <= last; e += stride) x_ticks.push_back(e);
  } else {
    double step = nice_step(x_max - x_min, 6);
    for (double t = std::ceil(x_min / step) * step; t <= x_max + step * 1e-9; t += step)
      x_ticks.push_back(t);
  }
  for (double t : x_ticks) {
    svg += "<line x1=\"" + n2(px(t)) + "\" y1=\"" + n2(plot_y0) + "\" x2=\"" + n2(px(t)) +
           "\" y2=\"" + n2(plot_y1) + "\"/>\n";
    std::string label = log_x ? format_count(std::exp2(t)) : tick_label(t);
    x_labels += "<text x=\"" + n2(px(t)) + "\" y=\"" + n2(plot_y1 + 18) +
                "\" text-anchor=\"middle\">" + escape_xml(label) + "</text>\n";
  }
  svg += "</g>\n";
  svg += y_labels + x_labels;

  // Axes and axis labels.
  svg += "<rect x=\"" + n2(plot_x0) + "\" y=\"" + n2(plot_y0) + "\" width=\"" +
         n2(plot_x1 - plot_x0) + "\" height=\"" + n2(plot_y1 - plot_y0) +
         "\" fill=\"none\" stroke=\"#333333\"/>\n";
  svg += "<text x=\"" + n2((plot_x0 + plot_x1) / 2) + "\" y=\"" + n2(h - 14) +
         "\" text-anchor=\"middle\">" + escape_xml(spec.x_label) + "</text>\n";
  svg += "<text x=\"18\" y=\"" + n2((plot_y0 + plot_y1) / 2) +
         "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " + n2((plot_y0 + plot_y1) / 2) +
         ")\">" + escape_xml(spec.y_label) + "</text>\n";

  // Series and legend.
  const size_t n_colours = sizeof(kPalette) / sizeof(kPalette[0]);
  for (size_t si = 0; si < spec.series.size(); ++si) {
    const Series& s = spec.series[si];
    std::string colour = kPalette[si % n_colours];
    std::string dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
    std::string points, markers;
    size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; ++i) {
      if (!usable(s.x[i], s.y[i], log_x)) continue;
      double cx = px(log_x ? std::log2(s.x[i]) : s.x[i]), cy = py(s.y[i]);
      points += (points.empty() ? "" : " ") + n2(cx) + "," + n2(cy);
      markers += "<circle cx=\"" + n2(cx) + "\" cy=\"" + n2(cy) + "\" r=\"3\" fill=\"" + colour +
                 "\"/>\n";
    }
    svg += "<g>\n<title>" + escape_xml(s.name) + "</title>\n";
    if (!points.empty())
      svg += "<polyline points=\"" + points + "\" fill=\"none\" stroke=\"" + colour +
             "\" stroke-width=\"2\"" + dash + "/>\n";
    svg += markers + "</g>\n";

    double ly = plot_y0 + 10 + 20 * double(si);
    double lx = plot_x1 + 14;
    svg += "<line x1=\"" + n2(lx) + "\" y1=\"" + n2(ly) + "\" x2=\"" + n2(lx + 24) + "\" y2=\"" +
           n2(ly) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"" + dash + "/>\n";
    svg += "<text x=\"" + n2(lx + 30) + "\" y=\"" + n2(ly + 4) + "\">" + escape_xml(s.name) +
           "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace weft::lab
