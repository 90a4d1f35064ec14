// The terminal progress bar (cli/progress_bar.h): the rendered line, and silence when the stream is
// not a terminal.
#include "cli/progress_bar.h"

#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace strata::cli {
namespace {

TEST(ProgressBar, RendersFractionAmountsAndEta) {
  ProgressEvent e{"load", "bytes", 6'100'000'000, 11'700'000'000, "layer 21", false};
  const std::string s = render_progress(e, 3.2, 120);
  EXPECT_EQ(s.rfind("[load] [", 0), 0u) << s;
  EXPECT_NE(s.find(" 52%"), std::string::npos) << s;
  EXPECT_NE(s.find("6.10 GB / 11.70 GB"), std::string::npos) << s;
  EXPECT_NE(s.find("ETA 2.9 s"), std::string::npos) << s;
  EXPECT_NE(s.find("layer 21"), std::string::npos) << s;

  ProgressEvent t{"prefill", "tokens", 4096, 8192, "", false};
  EXPECT_NE(render_progress(t, 75, 120).find("4096 / 8192 tokens  1:15"), std::string::npos) << render_progress(t, 75, 120);
  ProgressEvent unknown{"probe", "steps", 3, 0, "", false};
  EXPECT_EQ(render_progress(unknown, 1, 80), "[probe] 3 steps  1.0 s");
  // Never wider than the terminal.
  EXPECT_LE(render_progress(e, 3.2, 30).size(), 29u);
  // A narrow terminal drops the drawing before the step's name.
  ProgressEvent step{"probe", "steps", 12, 27, "bf16_anchor x2 threads", false};
  const std::string narrow = render_progress(step, 62, 60);
  EXPECT_NE(narrow.find("bf16_anchor x2 threads"), std::string::npos) << narrow;
  EXPECT_LE(narrow.size(), 59u) << narrow;
}

// On a terminal, a finished operation leaves its bar at 100% on its own line, even when the last
// progress events were throttled away (the load bar used to vanish at 84%).
TEST(ProgressBar, FinishedBarEndsAtFullOnATerminal) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  std::FILE* out = ::fdopen(slave, "w");
  ASSERT_NE(out, nullptr);
  {
    ProgressBar bar(out);
    ASSERT_TRUE(bar.enabled());
    bar.on_event(ProgressEvent{"load", "layers", 0, 50, "", false});
    bar.on_event(ProgressEvent{"load", "layers", 42, 50, "layer 42", false});  // throttled: within 100 ms
    bar.on_event(ProgressEvent{"load", "layers", 42, 50, "", true});           // finished
  }
  std::fflush(out);
  // Everything is written; the pty may hand it over in several reads (one per write): read until
  // nothing more arrives within 200 ms.
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, got.empty() ? 2000 : 200) <= 0) break;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ASSERT_FALSE(got.empty());
  EXPECT_NE(got.find("100%"), std::string::npos) << got;
  EXPECT_NE(got.find("50 / 50 layers"), std::string::npos) << got;
  EXPECT_EQ(got.find(" 84%"), std::string::npos) << got;
  std::fclose(out);
  ::close(master);
}

TEST(ProgressBar, SilentWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar(f);
    EXPECT_FALSE(bar.enabled());
    EXPECT_FALSE(static_cast<bool>(bar.fn())) << "callers skip reporting entirely";
    bar.on_event(ProgressEvent{"load", "layers", 1, 2, "", false});
  }
  EXPECT_EQ(std::ftell(f), 0L) << "nothing written to a non-terminal";
  std::fclose(f);
}

}  // namespace
}  // namespace strata::cli
