// strata probe (tools/probe.h): the profile's JSON round trip and its errors, /proc/meminfo and
// nvidia-smi parsing, and a real (short) disk measurement in a temporary directory.
#include "tools/probe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "io/file.h"
#include "tests/support/temp_dir.h"
#include "tools/plan_cost.h"
#include "tools/synth.h"

namespace strata::tools {
namespace {

MachineProfile sample_profile() {
  MachineProfile p;
  p.date = "2026-11-29T19:30:00Z";
  p.hostname = "box";
  p.cpu_model = "AMD EPYC";
  p.simd = "avx512+bf16+vnni";
  p.kernel_level = "avx512bf16";
  p.logical_cores = 4;
  p.physical_cores = 2;
  p.ram_total = 24ull << 30;
  p.ram_available = 20ull << 30;
  for (int t : {1, 2, 4}) {
    ThreadRates r;
    r.threads = t;
    r.mem_read_gbps = 20.0 * t;
    for (int k = 0; k < kLinearKinds; ++k) {
      r.kernels[static_cast<size_t>(k)].matvec_gbps = {5.0 + k + t, 8.0 + k + t, 10.0 + k + t, 10.5 + k + t};
      r.kernels[static_cast<size_t>(k)].matvec_small_gbps = {3.0 + k + t, 5.0 + k + t, 6.0 + k + t, 6.5 + k + t};
      r.kernels[static_cast<size_t>(k)].call_us = 1.5;
      r.kernels[static_cast<size_t>(k)].matmul_gflops = {10.0 * t, 40.0 * t, 80.0 * t, 100.0 * t};
      r.kernels[static_cast<size_t>(k)].matmul_small_gflops = {5.0 * t, 20.0 * t, 50.0 * t, 70.0 * t};
    }
    r.attn_gflops = 5.0 * t;
    r.index_gflops = 6.0 * t;
    r.glue_us_prefill = 40.0 + t;
    r.glue_us_decode = 70.0 + t;
    p.threads.push_back(r);
  }
  p.topk_ns_per_elem = 3.25;
  p.engine_note = "engine glue not measured (IOError: /x: no space)";
  p.disk.measured = true;
  p.disk.dir = "/data";
  p.disk.device = 2049;
  p.disk.file_bytes = 1ull << 30;
  p.disk.direct_supported = true;
  p.disk.io_uring = true;
  p.disk.seq_gbps_direct = 3.1;
  p.disk.seq_gbps_buffered = 2.2;
  p.disk.seq_gbps_pread = 1.1;
  p.disk.seq_gbps_load = 2.9;
  p.disk.iops_qd1_direct = 12000;
  p.disk.iops_qd32_direct = 300000;
  p.disk.iops_qd1_buffered = 9000;
  p.disk.iops_qd32_buffered = 150000;
  p.gpus.push_back(GpuInfo{"NVIDIA H200", 141ull << 30, 140ull << 30});
  return p;
}

TEST(Probe, JsonRoundTrip) {
  const MachineProfile p = sample_profile();
  auto q = MachineProfile::from_json(p.to_json(), "m.json");
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(q->to_json(), p.to_json());
  EXPECT_EQ(q->threads.size(), 3u);
  EXPECT_EQ(q->disk.seq_gbps_load, 2.9);
  EXPECT_EQ(q->at_threads(3).threads, 2) << "the largest measured count <= 3";
  EXPECT_EQ(q->at_threads(64).threads, 4);
  EXPECT_EQ(q->at_threads(0).threads, 1);
  EXPECT_EQ(q->gpus.at(0).name, "NVIDIA H200");
  EXPECT_GT(q->age_days(), 0);
}

TEST(Probe, SaveAndLoad) {
  testing::TempDir dir;
  const std::string path = dir.file("probe/machine.json");  // parent created by save
  const MachineProfile p = sample_profile();
  ASSERT_TRUE(p.save(path).ok());
  auto q = MachineProfile::load(path);
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(q->date, p.date);
  auto missing = MachineProfile::load(dir.file("none.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), StatusCode::kNotFound);
}

// Profiles saved before the load-pattern rate existed still load (plan then uses the 1 MiB rates);
// a wrong type is still an error.
TEST(Probe, LoadRateIsOptionalButTyped) {
  std::string j = sample_profile().to_json();
  const std::string key = "\"seq_gbps_load\": 2.9";
  const size_t at = j.find(key);
  ASSERT_NE(at, std::string::npos) << j;
  std::string old_profile = j;
  old_profile.replace(at, key.size(), "\"seq_gbps_old\": 2.9");
  auto q = MachineProfile::from_json(old_profile, "old.json");
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_EQ(q->disk.seq_gbps_load, 0.0);
  std::string bad = j;
  bad.replace(at, key.size(), "\"seq_gbps_load\": \"fast\"");
  auto r = MachineProfile::from_json(bad, "bad.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("seq_gbps_load"), std::string::npos) << r.error().message();
}

TEST(Probe, JsonErrorsNameTheField) {
  std::string j = sample_profile().to_json();
  auto cut = [&](const std::string& from, const std::string& to) {
    std::string s = j;
    const size_t p = s.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    s.replace(p, from.size(), to);
    return s;
  };
  struct Case {
    std::string text, expect;
  };
  for (const Case& c : {Case{"[1, 2]", "not a JSON object"}, Case{"{\"format\": \"other/9\"}", "format 'other/9'"},
                        Case{cut("\"ram_total_bytes\"", "\"ram_total\""), "ram_total_bytes"},
                        Case{cut("\"mem_read_gbps\": 20.0", "\"mem_read_gbps\": \"fast\""), "mem_read_gbps"},
                        Case{cut("\"fp4\": {", "\"fp5\": {"), "missing kernel 'fp4'"},
                        Case{cut("\"seq_gbps_direct\"", "\"seq\""), "disk: missing field 'seq_gbps_direct'"},
                        Case{cut("\"glue_us_decode\": 71.0", "\"glue_us_decode\": -5.0"), "'glue_us_decode' is -5"},
                        Case{cut("\"glue_us_prefill\": 41.0", "\"glue_us_prefill\": 5e6"), "'glue_us_prefill' is"},
                        Case{cut("\"glue_us_prefill\": 41.0", "\"glue_ns_prefill\": -1.0"), "'glue_ns_prefill' is -1"},
                        Case{j.substr(0, j.size() / 2), "not valid JSON"},
                        Case{cut("\"mem_read_gbps\": 20.0", "\"mem_read_gbps\": 1e400"), "not valid JSON"},
                        Case{cut("\"mem_read_gbps\": 20.0", "\"mem_read_gbps\": -5.0"), "'mem_read_gbps' is -5"},
                        Case{cut("\"sublayer_ns_prefill\": 0.0", "\"sublayer_ns_prefill\": -100.0"),
                             "'sublayer_ns_prefill' is -100"},
                        Case{cut("\"call_us\": 1.5", "\"call_us\": -50.0"), "kernels.fp8: 'call_us' is -50"},
                        Case{"{\"format\": \"strata-probe/99\"}", "is newer than this build's"},
                        Case{cut("\"logical_cores\": ", "\"logical_cores\": -2, \"x\": "), "'logical_cores' -2"},
                        Case{cut("\"topk_ns_per_elem\": 3.25", "\"topk_ns_per_elem\": -1.0"), "'topk_ns_per_elem' is -1"},
                        Case{cut("\"seq_gbps_direct\": 3.1", "\"seq_gbps_direct\": -1.0"), "disk: 'seq_gbps_direct' is -1"},
                        Case{cut("\"matvec_small_gbps\": [", "\"matvec_small_gbps\": [-1.0, 2.0, 3.0, 4.0], \"x\": ["),
                             "matvec_small_gbps holds -1"},
                        Case{cut("\"matvec_small_gbps\": [", "\"matvec_small_gbps\": [1.0, 2.0, 3.0], \"x\": ["),
                             "matvec_small_gbps has 3 values, expected 4"}}) {
    auto r = MachineProfile::from_json(c.text, "m.json");
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.error().message().find(c.expect), std::string::npos) << r.error().message();
    EXPECT_NE(r.error().message().find("m.json"), std::string::npos) << r.error().message();
    // Only another format is NotSupported: `plan` measures again over that, and refuses the rest
    // naming the field (cli/cmd_plan.cpp; tests/cli/bad_input.sh "plan --probe damaged").
    EXPECT_EQ(r.error().code() == StatusCode::kNotSupported, c.expect.starts_with("format '")) << c.expect;
  }
}

TEST(Probe, MeminfoAndNvidiaSmiParsing) {
  const std::string meminfo = "MemTotal:       24592284 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
  EXPECT_EQ(read_meminfo_field(meminfo, "MemTotal"), 24592284ull * 1024);
  EXPECT_EQ(read_meminfo_field(meminfo, "MemAvailable"), 20000000ull * 1024);
  EXPECT_EQ(read_meminfo_field(meminfo, "Free"), 0u) << "a field name must start a line";
  EXPECT_EQ(read_meminfo_field(meminfo, "SwapTotal"), 0u);

  const auto g = parse_nvidia_smi("NVIDIA H200, 143771, 143000\nNVIDIA GeForce RTX 4090, 24564, 100\ngarbage\n");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].name, "NVIDIA H200");
  EXPECT_EQ(g[0].vram_total, 143771ull << 20);
  EXPECT_EQ(g[1].vram_free, 100ull << 20);
  EXPECT_TRUE(parse_nvidia_smi("").empty());
}

// `p` saved as JSON, edited by `edit` (an older format, a missing field), written to a file and
// loaded back.
Result<MachineProfile> load_edited(const MachineProfile& p, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(p.to_json());
  edit(j);
  testing::TempDir dir;
  const std::string path = dir.file("edited.json");
  const std::string text = j.dump();
  if (Status s = io::write_file_atomic(path, text.data(), text.size()); !s.ok()) return s;
  return MachineProfile::load(path);
}

TEST(Probe, ProfileWithoutSmallWeightRatesLoads) {
  // Profiles saved before the small-weight matmul and matvec were measured: their rates default to
  // the large ones.
  auto q = load_edited(sample_profile(), [](nlohmann::json& j) {
    for (auto& t : j["threads"])
      for (auto& [name, k] : t["kernels"].items()) {
        k.erase("matmul_small_gflops");
        k.erase("matvec_small_gbps");
      }
  });
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  const KernelRates& k = q->threads.at(0).kernel(LinearKind::kFp8);
  EXPECT_EQ(k.matmul_small_gflops, k.matmul_gflops);
  EXPECT_EQ(k.matvec_small_gbps, k.matvec_gbps);
}

TEST(Probe, ProfileWithoutE4m3KernelLoadsAtHalfTheBf16Rate) {
  // Profiles saved before the bf16 kernel on E4M3 codes (attn.wo_a) was measured: its matvec rates
  // are the bf16 kernel's at half the bytes per second, its matmul rates the bf16 kernel's.
  const MachineProfile p = sample_profile();
  auto q = load_edited(p, [](nlohmann::json& j) {
    for (auto& t : j["threads"]) {
      ASSERT_TRUE(t["kernels"].contains("bf16_e4m3")) << "a profile of this build writes the kind";
      t["kernels"].erase("bf16_e4m3");
    }
  });
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  for (const ThreadRates& r : q->threads) {
    const KernelRates& bf16 = r.kernel(LinearKind::kBf16);
    const KernelRates& e4m3 = r.kernel(LinearKind::kBf16E4m3);
    for (size_t i = 0; i < bf16.matvec_gbps.size(); ++i) {
      EXPECT_DOUBLE_EQ(e4m3.matvec_gbps[i], bf16.matvec_gbps[i] / 2);
      EXPECT_DOUBLE_EQ(e4m3.matvec_small_gbps[i], bf16.matvec_small_gbps[i] / 2);
    }
    EXPECT_EQ(e4m3.matmul_gflops, bf16.matmul_gflops);
    EXPECT_EQ(e4m3.call_us, bf16.call_us);
  }
  // The saved kind round-trips as its own rates (not the fallback).
  auto r = load_edited(p, [](nlohmann::json&) {});
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->threads.at(0).kernels[static_cast<size_t>(LinearKind::kBf16E4m3)].matvec_gbps,
            p.threads.at(0).kernels[static_cast<size_t>(LinearKind::kBf16E4m3)].matvec_gbps);
}

TEST(Probe, ProfileWithPrefillGluePerDimValueLoadsConverted) {
  // Profiles saved when prefill glue was ns per token, layer and dim value (measured on the probe
  // preset, dim kProbeEngineDim) load as us per token and layer: the same time on that preset.
  auto q = load_edited(sample_profile(), [](nlohmann::json& j) {
    for (auto& t : j["threads"]) {
      ASSERT_TRUE(t.contains("glue_us_prefill"));
      t.erase("glue_us_prefill");
      t["glue_ns_prefill"] = 100.0;
    }
  });
  ASSERT_TRUE(q.ok()) << q.error().to_string();
  EXPECT_DOUBLE_EQ(q->threads.at(0).glue_us_prefill, 100.0 * kProbeEngineDim / 1000);
  auto preset = preset_config("probe", 0);
  ASSERT_TRUE(preset.ok()) << preset.error().to_string();
  EXPECT_EQ(preset->dim, kProbeEngineDim) << "the engine run's width, which the conversion assumes";
}

TEST(Probe, MatmulRateByRowsAndWeightSize) {
  KernelRates k;
  k.matmul_gflops = {10.0, 40.0, 80.0, 100.0};
  k.matmul_small_gflops = {5.0, 20.0, 40.0, 60.0};
  const double small = static_cast<double>(kSmallMatmulOut * kSmallMatmulIn);
  const double large = static_cast<double>(kLargeMatmulOut * kLargeMatmulIn);
  EXPECT_DOUBLE_EQ(matmul_gflops_at(k, 8), 10.0) << "no size: the large weight";
  EXPECT_DOUBLE_EQ(matmul_gflops_at(k, 512, large), 100.0);
  EXPECT_DOUBLE_EQ(matmul_gflops_at(k, 512, 64.0 * large), 100.0) << "constant above the large weight";
  EXPECT_DOUBLE_EQ(matmul_gflops_at(k, 512, small), 60.0);
  EXPECT_DOUBLE_EQ(matmul_gflops_at(k, 512, small / 16), 60.0) << "constant below the small weight";
  EXPECT_NEAR(matmul_gflops_at(k, 512, std::sqrt(small * large)), 80.0, 1e-9) << "log-linear in size";
  EXPECT_NEAR(matmul_gflops_at(k, 16, small), 12.5, 1e-9) << "log-linear in rows: halfway from 8 to 32";
}

TEST(Probe, MatvecRateByRowLength) {
  KernelRates k;
  k.matvec_gbps = {2.0, 4.0, 6.0, 6.0};
  k.matvec_small_gbps = k.matvec_gbps;
  const double big = kLargeMatvecBytes;
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 64, big), 2.0) << "constant below the shortest probed row";
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 256, big), 2.0);
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 512, big), 3.0) << "log-linear: halfway from 256 to 1024";
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 4096, big), 6.0);
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 1 << 20, big), 6.0);
}

TEST(Probe, MatvecRateByWeightSize) {
  // A short pass from DRAM streams slower than a long one: the rate moves log-linearly in the
  // weight's bytes from the small measurement to the large one, constant outside them.
  KernelRates k;
  k.matvec_gbps = {40.0, 60.0, 60.0, 60.0};
  k.matvec_small_gbps = {20.0, 30.0, 30.0, 30.0};
  const double small = kSmallMatvecBytes, large = kLargeMatvecBytes;
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 1024, small / 8), 30.0);
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 1024, small), 30.0);
  EXPECT_NEAR(matvec_gbps_at(k, 1024, std::sqrt(small * large)), 45.0, 1e-9) << "halfway in log bytes";
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 1024, large), 60.0);
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 1024, large * 64), 60.0);
  EXPECT_DOUBLE_EQ(matvec_gbps_at(k, 512, small), 25.0) << "row length and size together";
}

TEST(Probe, OptionsValidate) {
  ProbeOptions o;
  EXPECT_TRUE(o.validate().ok());
  o.max_threads = -1;
  EXPECT_FALSE(o.validate().ok());
  o = ProbeOptions{};
  o.disk_file_bytes = 1 << 20;
  EXPECT_FALSE(o.validate().ok());
}

TEST(Probe, DiskMeasurementInATempDir) {
  testing::TempDir dir;
  auto d = measure_disk(dir.path(), 16ull << 20, 0.05, nullptr);
  ASSERT_TRUE(d.ok()) << d.error().to_string();
  if (!d->measured) GTEST_SKIP() << "disk not measured: " << d->note;
  EXPECT_EQ(d->file_bytes, 16ull << 20);
  EXPECT_GT(d->seq_gbps_buffered, 0);
  EXPECT_GT(d->seq_gbps_pread, 0);
  EXPECT_GT(d->seq_gbps_load, 0) << "the resident pass's read pattern (8 MiB x 4), direct or buffered";
  EXPECT_GT(d->iops_qd1_buffered, 0);
  EXPECT_GT(d->iops_qd32_buffered, 0);
  if (d->direct_supported) {
    EXPECT_GT(d->seq_gbps_direct, 0);
    EXPECT_GT(d->iops_qd32_direct, 0);
  } else {
    EXPECT_FALSE(d->note.empty()) << "no O_DIRECT must say why";
  }
  // The temporary file is gone.
  size_t n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) n += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(n, 0u);
  EXPECT_FALSE(measure_disk(dir.file("missing"), 16ull << 20, 0.05, nullptr).ok());
}

// The engine glue is the measured forward time less the plan's prediction: positive when the
// profile claims kernels that cost nothing, clamped to 0 when it claims kernels slower than the
// engine runs. The synthetic checkpoint goes to a temporary directory that is removed afterwards.
TEST(ProbeEngine, GlueIsMeasuredTimeLessThePrediction) {
  testing::TempDir dir;
  MachineProfile fast = sample_profile();
  fast.threads.resize(1);
  ThreadRates& r = fast.threads[0];
  for (KernelRates& k : r.kernels) {
    k.matvec_gbps.fill(1e6);
    k.matvec_small_gbps.fill(1e6);
    k.matmul_gflops.fill(1e6);
    k.matmul_small_gflops.fill(1e6);
    k.call_us = 0;
  }
  r.attn_gflops = r.index_gflops = 1e6;
  r.glue_us_prefill = r.glue_us_decode = 123;  // replaced, not added to
  fast.topk_ns_per_elem = 0;
  fast.alloc_gbps = 0;
  ASSERT_TRUE(measure_engine_glue(&fast, dir.path(), 64, 4, 1).ok());
  EXPECT_GT(fast.threads[0].glue_us_prefill, 0);
  EXPECT_GT(fast.threads[0].glue_us_decode, 0);
  EXPECT_TRUE(std::isfinite(fast.threads[0].glue_us_prefill));
  EXPECT_NE(fast.threads[0].glue_us_prefill, 123);

  MachineProfile slow = fast;
  for (KernelRates& k : slow.threads[0].kernels) {
    k.matvec_gbps.fill(1e-6);
    k.matvec_small_gbps.fill(1e-6);
    k.matmul_gflops.fill(1e-6);
    k.matmul_small_gflops.fill(1e-6);
  }
  ASSERT_TRUE(measure_engine_glue(&slow, dir.path(), 64, 4, 1).ok());
  EXPECT_EQ(slow.threads[0].glue_us_prefill, 0);
  EXPECT_EQ(slow.threads[0].glue_us_decode, 0);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the synthetic checkpoint is removed";

  EXPECT_FALSE(measure_engine_glue(&slow, dir.path() + "/missing", 64, 4, 1).ok());
  EXPECT_EQ(measure_engine_glue(&slow, dir.path(), 64, 1, 1).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::tools
