#include "cli/progress_bar.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace strata::cli {

namespace {

std::string amount(double v, std::string_view unit) {
  char buf[64];
  if (unit == "bytes") {
    if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", v / 1e9);
    else std::snprintf(buf, sizeof buf, "%.1f MB", v / 1e6);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else std::snprintf(buf, sizeof buf, "%d:%02d", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return buf;
}

}  // namespace

std::string render_progress(const ProgressEvent& e, double elapsed_s, int width) {
  const std::string head = "[" + std::string(e.task) + "] ";
  const std::string detail = e.detail.empty() ? "" : "  " + std::string(e.detail);
  std::string bar, pct, amounts, eta;
  const std::string time = "  " + seconds(elapsed_s);
  if (e.total > 0) {
    const double frac = std::clamp(static_cast<double>(e.done) / static_cast<double>(e.total), 0.0, 1.0);
    const int cells = std::clamp(width / 4, 10, 30);
    const int full = static_cast<int>(std::floor(frac * cells));
    bar =
        "[" + std::string(static_cast<size_t>(full), '#') + std::string(static_cast<size_t>(cells - full), '.') + "] ";
    char buf[16];
    std::snprintf(buf, sizeof buf, "%3.0f%%  ", 100 * frac);
    pct = buf;
    amounts = amount(static_cast<double>(e.done), e.unit) + " / " + amount(static_cast<double>(e.total), e.unit);
    if (e.unit != "bytes") amounts += " " + std::string(e.unit);
    if (frac > 0.02 && frac < 1 && elapsed_s > 0.5) eta = "  ETA " + seconds(elapsed_s * (1 - frac) / frac);
  } else {
    amounts = amount(static_cast<double>(e.done), e.unit) + " " + std::string(e.unit);
  }
  // On a narrow terminal the step's name matters more than the drawing: drop the bar, then the ETA,
  // then the amounts before cutting the detail (a probe step read "bf16_an" when it was cut first).
  const auto fits = [&](const std::string& s) { return width <= 0 || static_cast<int>(s.size()) <= width - 1; };
  std::string s = head + bar + pct + amounts + time + eta + detail;
  if (!fits(s)) s = head + pct + amounts + time + eta + detail;
  if (!fits(s)) s = head + pct + amounts + time + detail;
  if (!fits(s)) s = head + pct + time + detail;
  if (!fits(s)) s.resize(static_cast<size_t>(std::max(0, width - 1)));
  return s;
}

ProgressBar::ProgressBar(std::FILE* out) : out_(out) { tty_ = out_ && ::isatty(::fileno(out_)) != 0; }

ProgressBar::~ProgressBar() { clear(); }

ProgressFn ProgressBar::fn() {
  if (!tty_) return {};
  return [this](const ProgressEvent& e) { on_event(e); };
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fputs("\r\033[K", out_);
  std::fflush(out_);
  drawn_ = false;
}

int ProgressBar::terminal_width() const {
  winsize ws{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

void ProgressBar::on_event(const ProgressEvent& e) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (task_ != e.task || (!drawn_ && e.done == 0)) {
    task_ = std::string(e.task);
    start_ = now;
    last_draw_ = {};
  }
  if (e.finished) {
    // Leave the finished bar at 100% with its time, on its own line: clearing it (or a throttled
    // last frame) left the last visible state at 84% of a load that had completed.
    if (drawn_ || e.total > 0) {
      ProgressEvent done = e;
      if (done.total > 0) done.done = done.total;
      const double el = std::chrono::duration<double>(now - start_).count();
      std::fputs(("\r\033[K" + render_progress(done, el, terminal_width()) + "\n").c_str(), out_);
      std::fflush(out_);
      drawn_ = false;
    }
    task_.clear();
    return;
  }
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const double el = std::chrono::duration<double>(now - start_).count();
  std::fputs(("\r\033[K" + render_progress(e, el, terminal_width())).c_str(), out_);
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace strata::cli
