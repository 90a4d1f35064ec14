// The files a subcommand writes, checked before any work: a bad output path used to fail only after
// the model loaded and the whole run ran (exit 1, and for some paths a message that did not name the
// flag), and an output could silently replace an input or another output.
//
// Every option naming a file a subcommand writes is declared with add_output_option; before it
// loads anything the subcommand passes all of its outputs, and the files it reads, to
// check_output_files. That is the one place these rules live:
//   - a given output is never empty (refused at parse time: "--stats-json: empty path");
//   - each output can be written where it is named (check_output_file);
//   - no output names the same file (same_file) as another output or as an input.
// Errors are usage errors (kInvalidArgument, exit 2 through fail_usage) that name the flag, the path
// as given and what is wrong. Thread safety: none needed (called once, before any work).
#pragma once

#include <initializer_list>
#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace strata::cli {

// A file named by a flag: `flag` as CLI11 names it ("--stats-json", "--file"), `path` as given
// ("" = the flag was not given).
struct FlagPath {
  std::string flag;
  std::string path;
  // The writer creates the missing directories above the file (strata probe --cache): the nearest
  // existing one must be writable, instead of the file's own directory existing.
  bool creates_dir = false;
  // An input that is a model (-m, --draft-model): a GGUF file, every file of the gguf-split set a
  // split's name belongs to (the loader opens the whole set from any one), or a checkpoint
  // directory. No output may be it or lie inside it (the loader reads files there by pattern).
  bool model = false;
  // An output its writer never replaces (strata quantize --out): an existing file is refused here,
  // naming the flag, instead of by the writer after the work.
  bool fresh = false;
  // An output that is a directory its writer fills (strata logits --dump), creating it and its
  // missing parents: it is checked as check_output_dir(creates_dir = true) instead of as a file.
  bool dir = false;
};

// Adds an option `name` whose value is a file the subcommand writes: CLI11 refuses an empty value
// ("--stats-json: empty path (give a file name)", a usage error) where it would otherwise read as
// "not given" and write nothing, and so does "-" (stdout is not supported: it would write a file
// named "-").
CLI::Option* add_output_option(CLI::App& app, const std::string& name, std::string* path, const std::string& help);

// Checks one output file: `path` is not empty or "-", its directory exists (with `creates_dir`: its
// nearest existing ancestor), is a directory and is writable and searchable (creating the temp file
// and renaming it need both, io::AtomicFile), and `path` itself may be written
// (io::check_replaceable: its name fits the file system, and it is absent or a regular file, never
// /dev/null or a directory). kInvalidArgument naming `flag`, `path` as given and what is wrong, e.g.
// "--stats-json out/s.json: directory out does not exist".
[[nodiscard]] Status check_output_file(const std::string& flag, const std::string& path, bool creates_dir = false);

// Checks a directory a subcommand creates files in (strata probe --dir: the disk test's file):
// it exists, is a directory, and is writable and searchable, as an output file's directory. With
// `creates_dir` (the writer creates it and its missing parents: logits --dump) a missing `dir` is
// allowed when its nearest existing ancestor is such a directory; an existing one must still be one.
[[nodiscard]] Status check_output_dir(const std::string& flag, const std::string& dir, bool creates_dir = false);

// True when `a` and `b` name the same file: the same path once resolved (realpath(3) of the path,
// or for a file not yet created of its directory plus its name: symbolic links, "..", "." and a
// relative path against the working directory), or, where both exist, the same inode (a hard link).
bool same_file(const std::string& a, const std::string& b);

// The check of a subcommand's files before any work (see the file comment). `outputs` and `inputs`
// with an empty path were not given and are skipped; an input "-" is a file named "-" (stdin is
// not read). Each output passes check_output_file, a `fresh` one does not exist, and none is the
// same file as an earlier output ("--out and --stats-json name the same file F") or as an input
// ("--out F is the input --tokens"), nor is or lies inside a `model` input ("--stats-json q.gguf is
// the model --model q.gguf", "... is inside the model directory --model ck", "--stats-json
// s-00002-of-00004.gguf is split 2 of 4 of the model --model s-00001-of-00004.gguf"). A `dir`
// output passes check_output_dir instead of check_output_file. When the checks pass, warns
// once on stderr for each output directory that cannot be read (mode 333): the file is written
// there, but its directory entry cannot be fsynced (io::Env::sync_dir says why that is not an error);
// not for a `dir` output, whose files are not fsynced.
[[nodiscard]] Status check_output_files(std::initializer_list<FlagPath> outputs,
                                        std::initializer_list<FlagPath> inputs = {});

}  // namespace strata::cli
