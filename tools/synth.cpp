#include "tools/synth.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "core/thread_pool.h"
#include "io/file.h"
#include "io/reclaim.h"
#include "io/temp_file.h"
#include "tools/synth_skew.h"
#include "model/engram_hash.h"
#include "tokenizer/compressed_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/v41_tokenizer.h"
#include "tools/synth_fill.h"
#include "tools/synth_plan.h"

namespace strata::tools {

namespace fs = std::filesystem;

namespace {

// Generation unit: a run of rows of one tensor, at most kPieceBytes (or one row).
constexpr uint64_t kPieceBytes = 4ull << 20;
// Bytes generated in parallel before they are handed to the writer thread (two such batches live).
constexpr uint64_t kBatchBytes = 64ull << 20;

struct Piece {
  size_t tensor = 0;
  int64_t row_begin = 0, row_end = 0;
  uint64_t offset = 0;  // in the batch buffer
  uint64_t bytes = 0;
};

// Walks the plan's tensors in file order, cutting them into batches of pieces.
class BatchCursor {
 public:
  explicit BatchCursor(const std::vector<SynthTensor>& t) : t_(t) {}

  // Fills `out` with the next batch (empty at the end); returns its total bytes.
  uint64_t next(std::vector<Piece>* out) {
    out->clear();
    uint64_t total = 0;
    while (tensor_ < t_.size() && total < kBatchBytes) {
      const SynthTensor& t = t_[tensor_];
      const int64_t rows = fill_n_rows(t);
      const uint64_t row_bytes = fill_row_bytes(t);
      if (rows == 0 || row_bytes == 0) {
        ++tensor_;
        row_ = 0;
        continue;
      }
      const int64_t per_piece = std::max<int64_t>(1, static_cast<int64_t>(kPieceBytes / row_bytes));
      const int64_t end = std::min(rows, row_ + per_piece);
      Piece p{tensor_, row_, end, total, static_cast<uint64_t>(end - row_) * row_bytes};
      total += p.bytes;
      out->push_back(p);
      row_ = end;
      if (row_ == rows) {
        ++tensor_;
        row_ = 0;
      }
    }
    return total;
  }

 private:
  const std::vector<SynthTensor>& t_;
  size_t tensor_ = 0;
  int64_t row_ = 0;
};

std::string fmt_gb(uint64_t bytes) {
  char b[48];
  std::snprintf(b, sizeof(b), "%.3f GB", static_cast<double>(bytes) / 1e9);
  return b;
}

std::string pct(uint64_t part, uint64_t total) {
  char b[16];
  std::snprintf(b, sizeof(b), "%.0f%%", total ? 100.0 * static_cast<double>(part) / static_cast<double>(total) : 0.0);
  return b;
}

template <typename T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::vector<std::string> describe(const model::ModelConfig& c, const SizeBreakdown& s) {
  std::vector<std::string> out;
  int n_win = 0, n_enc = 0, n_dec = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const int r = c.compress_ratio(l);
    (r == 0 ? n_win : r == 2 ? n_enc : n_dec)++;
  }
  out.push_back("layers: " + std::to_string(c.n_layers) + " (" + std::to_string(n_win) + " window-only, " +
                std::to_string(n_enc) + " ratio-2 encoder, " + std::to_string(n_dec) + " ratio-1 decoder) + " +
                std::to_string(c.n_mtp_layers) + " DSpark stages; kv sources " + list(c.kv_source_layers) +
                ", index sources " + list(c.index_source_layers) + ", candidate source " +
                std::to_string(c.candidate_source_layer) + ", Engram layers " + list(c.engram_layer_ids));
  out.push_back("shape: dim " + std::to_string(c.dim) + ", attention " + std::to_string(c.n_heads) + " x " +
                std::to_string(c.head_dim) + " (rope " + std::to_string(c.rope_head_dim) + "), q_lora " +
                std::to_string(c.q_lora_rank) + ", o " + std::to_string(c.o_groups) + " x " +
                std::to_string(c.o_lora_rank) + ", window " + std::to_string(c.window_size) + ", indexer " +
                std::to_string(c.index_n_heads) + " x " + std::to_string(c.index_head_dim) + " top-" +
                std::to_string(c.index_topk) + ", candidates " + std::to_string(c.candidate_topk_blocks) + " x " +
                std::to_string(c.candidate_block_size));
  out.push_back("MoE: " + std::to_string(c.n_routed_experts) + " routed experts top-" +
                std::to_string(c.n_activated_experts) + " + 1 shared, moe_inter " + std::to_string(c.moe_inter_dim) +
                "; DSpark " + std::to_string(c.dspark_n_routed_experts) + " experts top-" +
                std::to_string(c.dspark_n_activated_experts) + ", markov rank " + std::to_string(c.dspark_markov_rank) +
                ", targets " + list(c.dspark_target_layer_ids));
  out.push_back("Engram: " + std::to_string(c.engram_n_heads) + " heads x " + std::to_string(c.engram_head_dim) +
                ", orders 2.." + std::to_string(c.engram_max_ngram_size) + ", engram_vocab_size " +
                std::to_string(c.engram_vocab_size) + ", rows " + list(c.engram_num_embeddings) +
                ", compressed vocab " + std::to_string(c.engram_compressed_vocab_size));
  const uint64_t other = s.total - s.expert_bytes - s.engram_table_bytes - s.embed_head_bytes;
  out.push_back("size: " + fmt_gb(s.total) + " = routed experts " + fmt_gb(s.expert_bytes) + " (" +
                pct(s.expert_bytes, s.total) + ") + Engram tables " + fmt_gb(s.engram_table_bytes) + " (" +
                pct(s.engram_table_bytes, s.total) + ") + embed/head " + fmt_gb(s.embed_head_bytes) + " (" +
                pct(s.embed_head_bytes, s.total) + ") + other " + fmt_gb(other) + " (" + pct(other, s.total) + ")");
  return out;
}

// The tokenizer_config.json written beside the V4.1 tokenizer. The V4.1 chat format is rendered by
// chat/ (encoding.py's rules), so no Jinja chat_template is shipped.
std::string tokenizer_config_json() {
  nlohmann::ordered_json j;
  j["add_bos_token"] = true;
  j["add_eos_token"] = false;
  j["bos_token"] =
      "<\xef\xbd\x9c"
      "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
  j["eos_token"] =
      "<\xef\xbd\x9c"
      "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
  j["pad_token"] = "<\xef\xbd\x9c\xe2\x96\x81pad\xe2\x96\x81\xef\xbd\x9c>";
  j["unk_token"] = nullptr;
  j["clean_up_tokenization_spaces"] = false;
  j["legacy"] = true;
  j["model_max_length"] = 1048576;
  j["tokenizer_class"] = "LlamaTokenizerFast";
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Status write_text(const std::string& dir, const std::string& name, const std::string& text, io::Env* env) {
  return io::write_file_atomic((fs::path(dir) / name).string(), text.data(), text.size(), env);
}

// The names of the files a synth run writes (their temp files are NAME.tmp.<pid>).
bool is_synth_output(std::string_view name) {
  return name.ends_with(".safetensors") || name == "model.safetensors.index.json" || name == "config.json" ||
         name == "inference_config.json" || name == "tokenizer.json" || name == "tokenizer_config.json";
}

// What an earlier run left that a Checkpoint would pick up, in the order it is removed: its
// config files first, then (when this run writes them) the tokenizer files, then shards and the
// index. The configs go first because a directory with
// config.json reads as a complete checkpoint (synth_checkpoint writes it last): a run stopped after
// the removal (a signal, a full disk) leaves a directory that says it holds none, not the old
// config.json over missing or new weights. Other files are left alone.
Result<std::vector<fs::path>> previous_output(const std::string& dir, bool tokenizer) {
  std::error_code ec;
  std::vector<fs::path> old;
  for (const char* name : {"config.json", "inference_config.json"})
    if (fs::exists(fs::path(dir) / name, ec)) old.push_back(fs::path(dir) / name);
  // The tokenizer files the run writes over go with the rest: replacing one that cannot be
  // replaced (bind-mounted, immutable) failed at the end, after the weights were gone.
  if (tokenizer)
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      if (fs::exists(fs::symlink_status(fs::path(dir) / name, ec))) old.push_back(fs::path(dir) / name);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    const bool shard = e.path().extension() == ".safetensors";
    const bool index = n == "model.safetensors.index.json";
    // Files and links only: a directory named like a shard is not one synth wrote.
    std::error_code dec;
    if ((shard || index) && !e.is_directory(dec)) old.push_back(e.path());
  }
  if (ec) return IOError(dir + ": list directory: " + ec.message());
  return old;
}

// Makes room for the new checkpoint: the temp files of interrupted runs whose process is gone (a
// live run's are left alone), then, where the file system can hold `need_bytes` in `need_files`
// new files once the earlier output is gone, that output; returns how many files it removed.
// Where it cannot, kResourceExhausted (bytes or inodes) before anything is removed, and kIOError
// where a file of the earlier output cannot be removed (a sticky directory, no write permission):
// `synth --force` refused must not have deleted any of the checkpoint it would have replaced.
// Only what a removal frees counts (io/reclaim.h): not a hard link's or a symbolic link's bytes,
// not a sparse file's holes, not a file a server holds open, not a file on overlayfs, nor one whose
// holders cannot be seen; a refusal says which files counted for nothing, and why.
Result<size_t> clear_previous_output(const std::string& dir, uint64_t need_bytes, uint64_t need_files, bool tokenizer,
                                     io::Env* env) {
  STRATA_RETURN_IF_ERROR(sweep_stale_synth_temps(dir, env).status());
  STRATA_ASSIGN_OR_RETURN(std::vector<fs::path> old, previous_output(dir, tokenizer));
  uint64_t freed = 0, freed_files = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> kept;  // why -> the files it names
  for (const fs::path& p : old) {
    const io::Reclaim r = io::bytes_freed_by_removing(p.string());
    if (!r.removable)
      return IOError(p.string() + ": cannot be removed (" + r.why + "); nothing of the earlier output was removed");
    freed += r.bytes;
    freed_files += r.frees ? 1 : 0;
    if (r.why.empty()) continue;
    auto it = std::find_if(kept.begin(), kept.end(), [&](const auto& k) { return k.first == r.why; });
    if (it == kept.end()) it = kept.insert(kept.end(), {r.why, {}});
    it->second.push_back(p.filename().string());
  }
  auto refused = [&](const Status& s) {
    std::string m = s.message();
    for (const auto& [why, files] : kept) {
      const size_t more = files.size() - 1;
      m += "; removing " + files.front() +
           (more > 0 ? " and " + std::to_string(more) + (more > 1 ? " more files" : " more file") : std::string()) +
           " of the earlier output frees nothing: " + why;
    }
    return ResourceExhausted(m + "; nothing was removed");
  };
  const std::string what = freed > 0 ? "the checkpoint (beyond the " + std::to_string(freed) +
                                           " bytes removing the earlier output frees)"
                                     : std::string("the checkpoint");
  if (need_bytes > freed) {
    const Status room = io::check_free_space(dir + "/", need_bytes - freed, what);
    if (!room.ok()) return refused(room);
  }
  const std::optional<uint64_t> inodes = io::free_inodes(dir);
  if (inodes && need_files > *inodes + freed_files) {
    const std::string also =
        freed_files > 0 ? " (and removing the earlier output frees " + std::to_string(freed_files) + ")" : "";
    return refused(ResourceExhausted(dir + ": the checkpoint needs " + std::to_string(need_files) + " files but " +
                                     dir + " has " + std::to_string(*inodes) + " free inodes" + also));
  }
  // Each file is first renamed aside (to the temp name a writer of it would use, which a later run
  // sweeps once this process is gone), and removed only once all were: a rename fails where an
  // unlink would (a bind-mounted, immutable or append-only file: EBUSY, EPERM), and is undone, so
  // such a file refuses the run with the earlier checkpoint whole. Removing each file straight away
  // had taken the configs and then failed at the shard.
  std::vector<std::string> aside;
  for (const fs::path& p : old) {
    const std::string to = io::temp_path_for(p.string());
    if (::rename(p.c_str(), to.c_str()) == 0) {
      aside.push_back(to);
      continue;
    }
    const std::string why = std::strerror(errno);
    std::string undo;
    for (size_t i = aside.size(); i-- > 0;)
      if (::rename(aside[i].c_str(), old[i].c_str()) != 0)
        undo += "; could not move " + aside[i] + " back: " + std::strerror(errno);
    return IOError(p.string() + ": cannot be removed (" + why + ")" +
                   (undo.empty() ? "; nothing of the earlier output was removed" : undo));
  }
  for (size_t i = 0; i < aside.size(); ++i)
    if (::unlink(aside[i].c_str()) != 0)
      return IOError(aside[i] + ": remove: " + std::strerror(errno) +
                     " (the earlier output's files were moved aside to their .tmp.<pid> names; " + std::to_string(i) +
                     " of them were removed)");
  return old.size();
}

}  // namespace

Result<io::SweepReport> sweep_stale_synth_temps(const std::string& dir, io::Env* env) {
  STRATA_ASSIGN_OR_RETURN(io::SweepReport rep, io::sweep_stale_temps(dir, is_synth_output, env));
  // A file with a name too long for NAME.tmp.<pid> was moved aside under a short name
  // (clear_previous_output), whose target is known only as a hash.
  STRATA_ASSIGN_OR_RETURN(io::SweepReport other, io::sweep_stale_short_temps(dir, env));
  rep.removed += other.removed;
  rep.kept_live += other.kept_live;
  rep.kept_other += other.kept_other;
  return rep;
}

Status SynthOptions::validate() const {
  if (preset != "tiny" && preset != "demo" && preset != "probe" && preset != "full" && preset != "scaled")
    return InvalidArgument("unknown preset '" + preset + "' (expected tiny, demo, probe, scaled or full)");
  if (!(target_gb >= 0) || !std::isfinite(target_gb) || target_gb > 100000)
    return InvalidArgument("target_gb " + std::to_string(target_gb) + " must be a size in GB in (0, 100000]");
  if (preset == "scaled" && target_gb <= 0) return InvalidArgument("preset 'scaled' needs --target-gb (size in GB)");
  if (n_threads < 0) return InvalidArgument("n_threads must be >= 0");
  if (!(routing_skew <= 8)) return InvalidArgument("routing skew must be at most 8");
  return Status();
}

Result<SynthPlan> plan_synth(const SynthOptions& o, int64_t compressed_vocab) {
  STRATA_RETURN_IF_ERROR(o.validate());
  SynthPlan plan;
  plan.preset = o.preset;
  plan.seed = o.seed;
  STRATA_ASSIGN_OR_RETURN(model::ModelConfig c, preset_config(o.preset, compressed_vocab));
  std::vector<std::string> notes;
  if (o.target_gb > 0) {
    STRATA_ASSIGN_OR_RETURN(c, scale_to_target(c, o.target_gb, &notes));
  }
  // The written config.json must read back as this config (and pass ModelConfig::validate).
  const std::string text = config_json(c, "");
  auto parsed = model::ModelConfig::parse(text, "synth config.json");
  if (!parsed.ok()) return Internal("synth produced an invalid config: " + parsed.error().to_string());
  plan.config = std::move(parsed).value();
  plan.tensors = synth_tensors(plan.config, o.seed);
  if (o.routing_skew >= 0) {
    apply_routing_skew(plan.config, o.seed, o.routing_skew, &plan.tensors);
    notes.push_back("routing skew " + std::to_string(o.routing_skew).substr(0, 4) +
                    (o.routing_skew > 0 ? ": Zipf expert popularity + topic routing (tools/synth_skew.h)"
                                        : ": unbiased routers, about uniform expert use (tools/synth_skew.h)"));
  }
  const SizeBreakdown s = size_of(plan.tensors);
  plan.total_bytes = s.total;
  plan.expert_bytes = s.expert_bytes;
  plan.engram_table_bytes = s.engram_table_bytes;
  plan.embed_head_bytes = s.embed_head_bytes;
  plan.summary = notes;
  for (std::string& line : describe(plan.config, s)) plan.summary.push_back(std::move(line));
  plan.summary.push_back("tensors: " + std::to_string(plan.tensors.size()));
  return plan;
}

namespace {

// synth_checkpoint's work; *removed_earlier counts the earlier output's files it removed.
Result<SynthReport> write_synth_checkpoint(const SynthOptions& o, const SynthProgressFn& progress,
                                           size_t* removed_earlier) {
  const auto t0 = std::chrono::steady_clock::now();
  STRATA_RETURN_IF_ERROR(o.validate());
  if (o.out_dir.empty()) return InvalidArgument("synth: no output directory given");
  auto report_progress = [&](const SynthProgress& p) {
    if (progress) progress(p);
  };

  // Tokenizer first: its class count goes into the config.
  std::string v41_json;
  int64_t compressed_vocab = kV41CompressedVocabSize;
  uint32_t pad_class = 0;
  std::vector<uint32_t> class_map;
  if (!o.v3_tokenizer_path.empty()) {
    report_progress({"tokenizer", 0, 0, 0, 0});
    STRATA_ASSIGN_OR_RETURN(std::string v3, io::read_file_to_string(o.v3_tokenizer_path, 256u << 20));
    auto v41 = tokenizer::make_v41_tokenizer_json(v3);
    if (!v41.ok()) return v41.error().with_context(o.v3_tokenizer_path);
    v41_json = std::move(v41).value();
    STRATA_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_json(v41_json, "V4.1 tokenizer.json"));
    STRATA_ASSIGN_OR_RETURN(tokenizer::CompressedVocab cv, tokenizer::build_compressed_vocab(tok));
    compressed_vocab = cv.n_classes;
    class_map = std::move(cv.map);
  }
  STRATA_ASSIGN_OR_RETURN(SynthPlan plan, plan_synth(o, compressed_vocab));
  const model::ModelConfig& c = plan.config;
  if (c.engram_pad_id >= 0 && c.engram_pad_id < static_cast<int64_t>(class_map.size()))
    pad_class = class_map[static_cast<size_t>(c.engram_pad_id)];
  if (!c.engram_layer_ids.empty()) {
    // The hasher re-derives the primes and checks engram_num_embeddings against them.
    model::EngramHashParams hp{c.engram_layer_ids, c.engram_num_embeddings, c.engram_max_ngram_size,
                               c.engram_n_heads,   c.engram_vocab_size,     c.engram_compressed_vocab_size,
                               pad_class};
    auto h = model::EngramHasher::create(hp);
    if (!h.ok()) return Internal("synth Engram layout rejected by EngramHasher: " + h.error().to_string());
  }

  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return IOError(o.out_dir + ": create directory: " + ec.message());
  // Everything the run writes, not the tensors alone: the new tokenizer.json (its old one is
  // removed with the rest and counted as freed) once failed a nearly full disk that held the
  // tensors, after the earlier checkpoint was gone. Headers, the index and the configs: a generous 512
  // bytes a tensor and 64 KiB (their JSON is ~100-200 bytes a tensor). Each file's last block
  // rounds up: the shards, the index and four JSON files (with --shard-gib 0.00001, 150 shards of a
  // tiny checkpoint ran out of room for tokenizer.json after the earlier checkpoint was gone).
  std::vector<io::TensorDecl> decls;
  decls.reserve(plan.tensors.size());
  for (const SynthTensor& t : plan.tensors) decls.push_back(t.decl);
  const uint64_t n_files = io::SafetensorsWriter::shard_ranges(decls, o.max_shard_bytes).size() + 5;  // + index, 4 JSON
  const uint64_t need = plan.total_bytes + v41_json.size() + 512 * static_cast<uint64_t>(plan.tensors.size()) +
                        (64u << 10) + n_files * io::kFileRoundingBytes;
  STRATA_ASSIGN_OR_RETURN(*removed_earlier, clear_previous_output(o.out_dir, need, n_files, !v41_json.empty(), o.env));

  io::SafetensorsWriterOptions wo;
  wo.max_shard_bytes = o.max_shard_bytes;
  wo.fsync = o.fsync;
  wo.env = o.env;
  STRATA_ASSIGN_OR_RETURN(auto writer, io::SafetensorsWriter::create(o.out_dir, std::move(decls), wo));

  const FillTables tables = FillTables::build(plan.tensors);
  ThreadPool pool(o.n_threads);
  BatchCursor cursor(plan.tensors);
  std::vector<Piece> pieces[2];
  std::vector<uint8_t> bufs[2];
  Status writer_status;
  std::thread writer_thread;
  uint64_t bytes_done = 0;
  SynthProgress prog{"weights", 0, plan.total_bytes, 0, plan.tensors.size()};
  report_progress(prog);
  // Generation of batch k (all threads) overlaps the writing of batch k-1 (writer thread).
  for (int k = 0;; ++k) {
    std::vector<Piece>& ps = pieces[k % 2];
    std::vector<uint8_t>& buf = bufs[k % 2];
    const uint64_t n = cursor.next(&ps);
    if (n > 0) {
      if (buf.size() < n) buf.resize(n);
      pool.parallel_for(static_cast<int64_t>(ps.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const Piece& p = ps[static_cast<size_t>(i)];
          fill_rows(plan.tensors[p.tensor], p.tensor, tables, p.row_begin, p.row_end, buf.data() + p.offset);
        }
      });
    }
    if (writer_thread.joinable()) writer_thread.join();
    if (!writer_status.ok()) return writer_status;  // the writer's destructor removes its temp files
    if (o.cancel != nullptr && o.cancel->load())
      return Cancelled("synth " + o.out_dir + ": interrupted after " + std::to_string(bytes_done) + " of " +
                       std::to_string(plan.total_bytes) + " bytes (temporary files removed)");
    if (k > 0) {
      prog.bytes_done = bytes_done;
      prog.tensors_done = writer->current_tensor();
      report_progress(prog);
    }
    if (n == 0) break;
    try {
      writer_thread = std::thread([&writer, &writer_status, &bytes_done, &ps, &buf] {
        for (const Piece& p : ps) {
          writer_status = writer->write(buf.data() + p.offset, p.bytes);
          if (!writer_status.ok()) return;
          bytes_done += p.bytes;
        }
      });
    } catch (const std::system_error& e) {
      return Internal(std::string("synth: cannot start the writer thread: ") + e.what());
    }
  }
  STRATA_RETURN_IF_ERROR(writer->finish());

  // Small files last: a directory with config.json holds a complete checkpoint.
  if (!v41_json.empty()) {
    STRATA_RETURN_IF_ERROR(write_text(o.out_dir, "tokenizer.json", v41_json, o.env));
    STRATA_RETURN_IF_ERROR(write_text(o.out_dir, "tokenizer_config.json", tokenizer_config_json(), o.env));
  }
  const std::string note = "random weights written by strata synth (preset " + o.preset + ", seed " +
                           std::to_string(o.seed) +
                           (o.target_gb > 0 ? ", target " + std::to_string(o.target_gb) + " GB" : std::string()) +
                           "); text-only (no vision_config)";
  STRATA_RETURN_IF_ERROR(write_text(o.out_dir, "inference_config.json", inference_config_json(c), o.env));
  STRATA_RETURN_IF_ERROR(write_text(o.out_dir, "config.json", config_json(c, note), o.env));

  SynthReport r;
  r.n_files = writer->shards().size();
  r.file_bytes = writer->total_file_bytes();
  r.plan = std::move(plan);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  prog.phase = "done";
  prog.bytes_done = bytes_done;
  prog.tensors_done = r.plan.tensors.size();
  report_progress(prog);
  return r;
}

}  // namespace

Result<SynthReport> synth_checkpoint(const SynthOptions& o, const SynthProgressFn& progress) {
  size_t removed = 0;
  Result<SynthReport> r = write_synth_checkpoint(o, progress, &removed);
  // A failure after the earlier checkpoint went says so: the directory no longer holds it.
  if (!r.ok() && removed > 0)
    return Status(r.error().code(), r.error().message() + " (the earlier checkpoint in " + o.out_dir +
                                        " was removed before this failure: " + std::to_string(removed) + " files)");
  return r;
}

}  // namespace strata::tools
