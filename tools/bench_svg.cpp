// SVG plot of a bench report (see bench_svg.h).
#include "tools/bench_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace strata::tools {

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string tokens_label(int64_t t) {
  if (t >= 1024 && t % 1024 == 0) return std::to_string(t / 1024) + "K";
  return std::to_string(t);
}

// A "nice" axis maximum and step for data up to `v`.
void nice_axis(double v, double* top, double* step) {
  if (!(v > 0)) v = 1;
  const double raw = v * 1.15 / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  *step = (f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10) * mag;
  *top = std::ceil(v * 1.05 / *step) * *step;
}

struct Panel {
  double x0, y0, w, h;  // plot area
  double xmin, xmax;    // log2 of context
  double ymax, ystep;
  double px(double ctx) const {
    const double l = std::log2(std::max(ctx, 1.0));
    return xmax > xmin ? x0 + (l - xmin) / (xmax - xmin) * w : x0 + w / 2;
  }
  double py(double v) const { return y0 + h - v / ymax * h; }
};

const char* const kWarm = "#1f6fb2";
const char* const kCold = "#d9822b";
const char* const kPred = "#7a7a7a";

}  // namespace

std::string bench_svg(const BenchReport& r, const std::vector<PredictedSpeed>& predicted) {
  const int W = 980, H = 460;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::string title = "strata bench — " + r.checkpoint.dir + " (" + num(static_cast<double>(r.checkpoint.tensor_bytes) / 1e9) +
                      " GB, id " + r.checkpoint.hash + ")";
  std::string sub = r.hostname + ", " + r.cpu_model + ", " + std::to_string(r.threads) + " threads, load mode " +
                    r.options.load_mode + ", commit " + (r.git_commit.empty() ? "unknown" : r.git_commit) + ", " + r.date;
  s << "<text x=\"" << W / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << esc(title)
    << "</text>\n";
  s << "<text x=\"" << W / 2 << "\" y=\"40\" text-anchor=\"middle\" fill=\"#444\">" << esc(sub) << "</text>\n";

  std::vector<int64_t> xs;
  for (const BenchPoint& p : r.points) xs.push_back(p.prompt);
  for (const PredictedSpeed& p : predicted) xs.push_back(p.prompt);
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  if (xs.empty()) xs.push_back(1);
  const double lmin = std::log2(static_cast<double>(xs.front())), lmax = std::log2(static_cast<double>(xs.back()));
  const double pad = lmax > lmin ? 0.08 * (lmax - lmin) : 1;

  for (int panel = 0; panel < 2; ++panel) {
    const bool prefill = panel == 0;
    auto value = [&](const Spread& pf, const Spread& dc) { return prefill ? pf : dc; };
    double vmax = 0;
    for (const BenchPoint& p : r.points) vmax = std::max(vmax, value(p.prefill_tok_s, p.decode_tok_s).max);
    for (const PredictedSpeed& p : predicted) vmax = std::max(vmax, prefill ? p.prefill_tok_s : p.decode_tok_s);
    Panel pl{70.0 + panel * 480.0, 70, 380, 300, lmin - pad, lmax + pad, 0, 0};
    nice_axis(vmax, &pl.ymax, &pl.ystep);
    // Frame, grid, ticks.
    s << "<g>\n<text x=\"" << pl.x0 + pl.w / 2 << "\" y=\"" << pl.y0 - 12 << "\" text-anchor=\"middle\" font-size=\"13\" "
      << "font-weight=\"bold\">" << (prefill ? "prefill tok/s" : "decode tok/s") << "</text>\n";
    for (double v = 0; v <= pl.ymax + 1e-9; v += pl.ystep) {
      const double y = pl.py(v);
      s << "<line x1=\"" << num(pl.x0) << "\" y1=\"" << num(y) << "\" x2=\"" << num(pl.x0 + pl.w) << "\" y2=\"" << num(y)
        << "\" stroke=\"#e4e4e4\"/>\n";
      char lab[32];
      std::snprintf(lab, sizeof lab, pl.ystep < 1 ? "%.2f" : pl.ystep < 10 ? "%.1f" : "%.0f", v);
      s << "<text x=\"" << num(pl.x0 - 6) << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << lab << "</text>\n";
    }
    for (int64_t x : xs) {
      const double px = pl.px(static_cast<double>(x));
      s << "<line x1=\"" << num(px) << "\" y1=\"" << num(pl.y0) << "\" x2=\"" << num(px) << "\" y2=\"" << num(pl.y0 + pl.h)
        << "\" stroke=\"#f0f0f0\"/>\n";
      s << "<text x=\"" << num(px) << "\" y=\"" << num(pl.y0 + pl.h + 16) << "\" text-anchor=\"middle\">" << tokens_label(x)
        << "</text>\n";
    }
    s << "<rect x=\"" << num(pl.x0) << "\" y=\"" << num(pl.y0) << "\" width=\"" << num(pl.w) << "\" height=\"" << num(pl.h)
      << "\" fill=\"none\" stroke=\"#888\"/>\n";
    s << "<text x=\"" << num(pl.x0 + pl.w / 2) << "\" y=\"" << num(pl.y0 + pl.h + 34) << "\" text-anchor=\"middle\">"
      << (prefill ? "prompt length (tokens)" : "prompt length (tokens); decode runs after it") << "</text>\n";
    // Predicted: dashed grey.
    if (!predicted.empty()) {
      s << "<polyline fill=\"none\" stroke=\"" << kPred << "\" stroke-width=\"2\" stroke-dasharray=\"6,4\" points=\"";
      for (const PredictedSpeed& p : predicted)
        s << num(pl.px(static_cast<double>(p.prompt))) << "," << num(pl.py(prefill ? p.prefill_tok_s : p.decode_tok_s)) << " ";
      s << "\"/>\n";
      for (const PredictedSpeed& p : predicted)
        s << "<rect x=\"" << num(pl.px(static_cast<double>(p.prompt)) - 3.5) << "\" y=\""
          << num(pl.py(prefill ? p.prefill_tok_s : p.decode_tok_s) - 3.5) << "\" width=\"7\" height=\"7\" fill=\"" << kPred
          << "\"/>\n";
    }
    // Warm: solid line, min-max bars, value labels.
    std::string warm_pts;
    for (const BenchPoint& p : r.points) {
      if (p.cold) continue;
      const Spread v = value(p.prefill_tok_s, p.decode_tok_s);
      const double px = pl.px(static_cast<double>(p.prompt));
      warm_pts += num(px) + "," + num(pl.py(v.median)) + " ";
      s << "<line x1=\"" << num(px) << "\" y1=\"" << num(pl.py(v.min)) << "\" x2=\"" << num(px) << "\" y2=\""
        << num(pl.py(v.max)) << "\" stroke=\"" << kWarm << "\" stroke-width=\"1.5\"/>\n";
      for (double e : {v.min, v.max})
        s << "<line x1=\"" << num(px - 5) << "\" y1=\"" << num(pl.py(e)) << "\" x2=\"" << num(px + 5) << "\" y2=\""
          << num(pl.py(e)) << "\" stroke=\"" << kWarm << "\" stroke-width=\"1.5\"/>\n";
      s << "<circle cx=\"" << num(px) << "\" cy=\"" << num(pl.py(v.median)) << "\" r=\"4\" fill=\"" << kWarm << "\"/>\n";
      char lab[32];
      std::snprintf(lab, sizeof lab, v.median >= 100 ? "%.0f" : "%.1f", v.median);
      // Near the right edge the label goes left of the point, so it stays inside the image.
      const bool right_edge = px > pl.x0 + pl.w - 40;
      s << "<text x=\"" << num(right_edge ? px - 7 : px + 7) << "\" y=\"" << num(pl.py(v.median) - 7) << "\" fill=\""
        << kWarm << "\"" << (right_edge ? " text-anchor=\"end\"" : "") << ">" << lab << "</text>\n";
    }
    if (!warm_pts.empty())
      s << "<polyline fill=\"none\" stroke=\"" << kWarm << "\" stroke-width=\"2\" points=\"" << warm_pts << "\"/>\n";
    // Cold: hollow markers.
    for (const BenchPoint& p : r.points) {
      if (!p.cold) continue;
      const Spread v = value(p.prefill_tok_s, p.decode_tok_s);
      s << "<circle cx=\"" << num(pl.px(static_cast<double>(p.prompt))) << "\" cy=\"" << num(pl.py(v.median))
        << "\" r=\"5\" fill=\"white\" stroke=\"" << kCold << "\" stroke-width=\"2\"/>\n";
    }
    s << "</g>\n";
  }
  // Legend.
  const double ly = H - 28;
  s << "<circle cx=\"80\" cy=\"" << ly << "\" r=\"4\" fill=\"" << kWarm << "\"/><text x=\"90\" y=\"" << ly + 4
    << "\">warm: median of " << r.options.reps << " (bars: min-max)</text>\n";
  s << "<circle cx=\"330\" cy=\"" << ly << "\" r=\"5\" fill=\"white\" stroke=\"" << kCold
    << "\" stroke-width=\"2\"/><text x=\"340\" y=\"" << ly + 4 << "\">cold (" << esc(r.cold_method) << ")</text>\n";
  if (!predicted.empty())
    s << "<line x1=\"520\" y1=\"" << ly << "\" x2=\"550\" y2=\"" << ly << "\" stroke=\"" << kPred
      << "\" stroke-width=\"2\" stroke-dasharray=\"6,4\"/><text x=\"556\" y=\"" << ly + 4
      << "\">predicted by strata plan</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace strata::tools
