// "Did you mean" for mistyped flags (cli/flag_suggest.h, issue #19).
#include "cli/flag_suggest.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace strata::cli {
namespace {

TEST(FlagSuggest, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("--temprature", "--temperature"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

TEST(FlagSuggest, ClosestFlag) {
  const std::vector<std::string> known = {"--temp", "--temperature", "--top-p", "--stats", "--stats-json", "--model"};
  EXPECT_EQ(closest_flag("--temprature", known), "--temperature") << "fewest edits wins over a shared prefix";
  EXPECT_EQ(closest_flag("--tmp", known), "--temp");
  EXPECT_EQ(closest_flag("--stat", known), "--stats") << "an abbreviation";
  EXPECT_EQ(closest_flag("--top_p", known), "--top-p");
  EXPECT_EQ(closest_flag("--frobnicate", known), "") << "nothing close: no guess";
}

TEST(FlagSuggest, MessageNamesTheSubcommandAndOnlyFlagsTheErrorNames) {
  CLI::App app{"t"};
  CLI::App* run = app.add_subcommand("run", "r");
  float temp = 0;
  std::string prompt;
  run->add_option("--temp,--temperature", temp, "t");
  run->add_option("-p,--prompt", prompt, "p");
  std::vector<std::string> args = {"strata", "run", "-p", "--tempx", "--temprature", "0.5"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  const int argc = static_cast<int>(argv.size());
  EXPECT_EQ(unknown_flag_message(app, argc, argv.data(), "not expected: 0.5 --temprature"),
            "unknown flag --temprature for `strata run`; did you mean --temperature? (strata run --help)")
      << "--tempx is -p's value: the error does not name it";
  EXPECT_EQ(unknown_flag_message(app, argc, argv.data(), "something else"), "");
}

}  // namespace
}  // namespace strata::cli
