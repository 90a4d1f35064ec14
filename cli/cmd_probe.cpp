// strata probe [-m DIR | --dir DIR] [--json] [--cache FILE] [--cached] [--no-disk] [--quick] [--no-engine]
//   [--engine-dir DIR] [-t N]
// Measures this machine (tools/probe.h): cores, SIMD, RAM, memory bandwidth and strata's kernel
// rates per thread count, the disk under the model directory (sequential GB/s, 4 KiB IOPS at depth
// 1 and 32, O_DIRECT and buffered) and GPUs; prints a summary (or the JSON) and saves the profile
// with its date to the cache file `strata plan` reads.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/output_files.h"
#include "cli/probe_cache.h"
#include "cli/progress_bar.h"
#include "tools/plan.h"
#include "tools/probe.h"

namespace strata::cli {

namespace {

struct ProbeCliOptions {
  tools::ProbeOptions probe;
  std::string model_dir, dir;
  std::string cache = default_probe_cache();
  bool json = false, cached = false, no_disk = false, quick = false, no_engine = false;
  double disk_mib = 1024;
};

void print_profile(const tools::MachineProfile& p, const std::string& cache) {
  std::printf("machine: %s, %s\n", p.hostname.c_str(), p.cpu_model.c_str());
  std::printf("  cores: %d logical, %d physical; SIMD %s (kernels: %s)\n", p.logical_cores, p.physical_cores,
              p.simd.c_str(), p.kernel_level.c_str());
  std::printf("  RAM: %s total, %s available\n", tools::format_bytes(static_cast<double>(p.ram_total)).c_str(),
              tools::format_bytes(static_cast<double>(p.ram_available)).c_str());
  std::printf("  %-8s %10s %9s %9s %9s %9s %9s %9s %10s %10s %10s\n", "threads", "mem GB/s", "fp8 GB/s", "fp4 GB/s",
              "bf16 GB/s", "bf16* GB/s", "e4m3 GB/s", "f32 GB/s", "fp8 GF/s", "fp4 GF/s", "attn GF/s");
  using K = tools::LinearKind;
  for (const tools::ThreadRates& r : p.threads) {
    auto gbps = [&](K k) { return r.kernel(k).matvec_gbps[2]; };
    std::printf("  %-8d %10.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %10.0f %10.0f %10.1f\n", r.threads, r.mem_read_gbps,
                gbps(K::kFp8), gbps(K::kFp4), gbps(K::kBf16), gbps(K::kBf16Any), gbps(K::kBf16E4m3), gbps(K::kF32),
                r.kernel(K::kFp8).matmul_gflops.back(), r.kernel(K::kFp4).matmul_gflops.back(), r.attn_gflops);
  }
  std::printf("  (matvec: weight GB/s at n = 1 from DRAM, rows of 4096; bf16*: free summation order (LM head); e4m3: bf16 chains on E4M3 codes (attn.wo_a); GF/s: matmul at n = %d; call overhead fp8 %.1f us at %d threads)\n",
              tools::kMatmulRows.back(), p.threads.back().kernel(K::kFp8).call_us, p.threads.back().threads);
  if (p.threads.back().glue_us_prefill > 0 || p.threads.back().glue_us_decode > 0)
    std::printf("  engine glue (forward pass beyond the modelled kernels, synth preset probe), per token and layer: "
                "%.1f us prefill, %.1f us decode; at %d threads\n",
                p.threads.back().glue_us_prefill, p.threads.back().glue_us_decode, p.threads.back().threads);
  if (!p.engine_note.empty()) std::printf("  %s\n", p.engine_note.c_str());
  const tools::DiskProfile& d = p.disk;
  if (d.measured) {
    std::printf("  disk %s (%s test file, %s):\n", d.dir.c_str(), tools::format_bytes(static_cast<double>(d.file_bytes)).c_str(),
                d.io_uring ? "io_uring" : "pread threads");
    std::printf("    sequential read (1 MiB, depth 8): %.2f GB/s O_DIRECT, %.2f GB/s buffered; one pread at a time %.2f GB/s\n",
                d.seq_gbps_direct, d.seq_gbps_buffered, d.seq_gbps_pread);
    if (d.seq_gbps_load > 0)
      std::printf("    as the load reads (8 MiB, 4 in flight, %s): %.2f GB/s\n", d.direct_supported ? "O_DIRECT" : "buffered",
                  d.seq_gbps_load);
    std::printf("    4 KiB random read: %.0f / %.0f IOPS at depth 1 / 32 O_DIRECT; %.0f / %.0f buffered\n",
                d.iops_qd1_direct, d.iops_qd32_direct, d.iops_qd1_buffered, d.iops_qd32_buffered);
    if (!d.note.empty()) std::printf("    note: %s\n", d.note.c_str());
  } else {
    std::printf("  disk: not measured%s\n", d.note.empty() ? "" : (" (" + d.note + ")").c_str());
  }
  if (p.gpus.empty()) std::printf("  GPU: none (nvidia-smi absent or found none)\n");
  for (const tools::GpuInfo& g : p.gpus)
    std::printf("  GPU: %s, %s total, %s free\n", g.name.c_str(), tools::format_bytes(static_cast<double>(g.vram_total)).c_str(),
                tools::format_bytes(static_cast<double>(g.vram_free)).c_str());
  std::printf("measured %s; saved to %s\n", p.date.c_str(), cache.c_str());
}

}  // namespace

std::string default_probe_cache() { return std::string(STRATA_BINARY_DIR) + "/probe/machine.json"; }

Result<tools::MachineProfile> probe_machine(const tools::ProbeOptions& opt, const std::string& cache) {
  ProgressBar bar;
  tools::ProbeOptions o = opt;
  o.progress = bar.fn();
  // Not a terminal (a log, CI): one line per step instead of the bar, so minutes of measuring are
  // never silent.
  if (!o.progress)
    o.progress = [](const ProgressEvent& e) {
      if (e.finished || e.detail.empty()) return;
      std::fprintf(stderr, "[probe] step %llu/%llu: %.*s\n", static_cast<unsigned long long>(e.done),
                   static_cast<unsigned long long>(e.total), static_cast<int>(e.detail.size()), e.detail.data());
    };
  STRATA_ASSIGN_OR_RETURN(tools::MachineProfile p, tools::measure_machine(o));
  bar.clear();
  if (!cache.empty()) STRATA_RETURN_IF_ERROR(p.save(cache));
  return p;
}

Command register_probe(CLI::App& app) {
  auto o = std::make_shared<ProbeCliOptions>();
  app.add_option("-m,--model", o->model_dir, "checkpoint directory: its disk is the one measured");
  app.add_option("--dir", o->dir, "directory whose disk to measure (default: the model's, else the current one)");
  add_output_option(app, "--cache", &o->cache, "where the profile is saved with its date (read by strata plan)")
      ->capture_default_str();
  app.add_flag("--cached", o->cached, "print the cached profile instead of measuring");
  app.add_flag("--json", o->json, "print the profile as JSON");
  app.add_flag("--no-disk", o->no_disk, "skip the disk measurement");
  app.add_flag("--quick", o->quick, "shorter measurements (noisier)");
  app.add_option("--disk-mib", o->disk_mib, "size of the temporary disk test file in MiB (default 1024)")
      ->check(in_range(16, 1 << 20));
  app.add_flag("--no-engine", o->no_engine,
               "skip the engine run (a ~0.2 GB synthetic checkpoint in a temporary directory) that measures the "
               "engine glue; plan then leaves the glue out");
  app.add_option("--engine-dir", o->probe.engine_dir,
                 "where the engine run writes its temporary checkpoint (default: $TMPDIR or /tmp)");
  add_threads_flag(app, &o->probe.max_threads, "most threads to measure (default: every logical core)");
  return [o]() -> int {
    if (o->cached) {
      auto p = tools::MachineProfile::load(o->cache);
      if (!p.ok())
        return fail(p.error().with_context(p.error().code() == StatusCode::kNotFound
                                               ? "no cached probe (run strata probe)"
                                               : "the cached probe cannot be read (run strata probe to measure again)"));
      if (o->json) std::fputs(p->to_json().c_str(), stdout);
      else print_profile(*p, o->cache);
      Status w = flush_stdout();
      return w.ok() ? 0 : fail(w);
    }
    // Before minutes of measuring: a bad --cache path would otherwise fail only at the save.
    // MachineProfile::save creates the cache's missing directories.
    if (Status s = check_output_files({{"--cache", o->cache, /*creates_dir=*/true}},
                                      {{.flag = "--model", .path = o->model_dir, .model = true}});
        !s.ok())
      return fail_usage(s);
    // The disk test writes its file in --dir: a missing one used to fail after the CPU measurements.
    if (!o->no_disk && !o->dir.empty())
      if (Status s = check_output_dir("--dir", o->dir); !s.ok()) return fail_usage(s);
    // The engine run writes its checkpoint in --engine-dir: a bad one used to leave the engine glue
    // unmeasured, noted on stdout after the measurements, instead of an error.
    if (!o->no_engine && !o->probe.engine_dir.empty())
      if (Status s = check_output_dir("--engine-dir", o->probe.engine_dir); !s.ok()) return fail_usage(s);
    tools::ProbeOptions& po = o->probe;
    if (!o->no_disk) po.disk_dir = !o->dir.empty() ? o->dir : !o->model_dir.empty() ? storage_dir_of(o->model_dir) : ".";
    po.disk_file_bytes = static_cast<uint64_t>(o->disk_mib * 1048576.0);
    po.engine = !o->no_engine;
    if (o->quick) {
      po.seconds_per_test = 0.08;
      po.rounds = 1;
      po.disk_seconds = 0.4;
      po.disk_file_bytes = std::min<uint64_t>(po.disk_file_bytes, 256ull << 20);
    }
    if (!po.disk_dir.empty()) {
      std::error_code ec;
      po.disk_dir = std::filesystem::absolute(po.disk_dir, ec).lexically_normal().string();
    }
    auto p = probe_machine(po, o->cache);
    if (!p.ok()) return fail(p.error());
    if (o->json) std::fputs(p->to_json().c_str(), stdout);
    else print_profile(*p, o->cache);
    Status w = flush_stdout();
    return w.ok() ? 0 : fail(w);
  };
}

}  // namespace strata::cli
