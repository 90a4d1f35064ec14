#!/usr/bin/env python3
"""End-to-end resident decode against the memory-bandwidth roofline.

Counts the weight bytes one decode token reads from a checkpoint's safetensors headers, runs
`strata run` to measure decode tokens/s, measures the machine's read bandwidth at the same thread
count (bench/kernels_bench BM_MemRead/T/1: a buffer on transparent huge pages, as the resident store
holds the weights; core/huge_pages.h) right before and right after each run, and prints

    roofline share = (weight bytes per token x decode tok/s) / read bandwidth

with the mean of the run's two bandwidth samples as its read bandwidth. On a shared VM the
bandwidth moves within minutes (BM_MemRead/2 28-46 GB/s within ten minutes, 2026-12-06): one sample
before a run could land in a different minute than the decode it divides; the two samples bracket
it, and both are printed, so a run whose bandwidth moved meanwhile shows it. Until 2026-12-07 the
bandwidth was read on 4 KiB pages: 15-26 GB/s where huge pages gave 26-33 minutes apart on this VM,
so the shares printed before then are too high (docs/performance.md). Each run also prints the CPU
time the hypervisor took from this VM while `strata run` ran (steal, from /proc/stat, as a share of
all CPUs' time; over the whole process, load and prefill included): a run whose cores were taken
away is slower than the bandwidth beside it says, and shows it.

Bytes per decode token (what the resident forward pass reads, ARCHITECTURE.md):
  - every backbone tensor in full (attention, compressor/indexer at their layers, shared expert,
    router, norms), as held in memory: attn.wo_a is read as its FP8 codes and scales (the model's
    blocked copy, model/weights.cpp) when o_lora_rank is a multiple of 32, else as a widened bf16
    copy (2 B/weight, its scale unused); mHC fn tensors and small vectors are held as f32 (4 B/value);
  - routed experts: num_experts_per_tok / n_routed_experts of each layer's expert bytes;
  - Engram tables: 24 rows per token per Engram layer (weight row + its scales);
  - the embedding: one row; the head in full; DSpark (mtp.*) not at all (no speculative decode).

Usage: bench/decode_roofline.py --strata build/cli/strata --bench build/bench/kernels_bench -m DIR
                                [-t THREADS] [-n TOKENS] [--runs R]
The prompt is data/docs/gettysburg-address.txt plus a question (the demo's), greedy decoding.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys

DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "I32": 4, "I64": 8}


def tensor_table(model_dir):
    """name -> (dtype, shape, nbytes) from the safetensors headers (the index's shards, or a lone
    model.safetensors)."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        shards = sorted(set(json.load(open(index_path))["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    table = {}
    for shard in shards:
        with open(os.path.join(model_dir, shard), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            table[name] = (info["dtype"], info["shape"], end - begin)
    return table


def numel(shape):
    out = 1
    for d in shape:
        out *= d
    return out


def decode_bytes_per_token(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg = cfg.get("text_config", cfg)
    top_k, n_routed = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    table = tensor_table(model_dir)
    parts = {"routed experts": 0.0, "head": 0.0, "attention": 0.0, "shared expert + router": 0.0, "mHC": 0.0,
             "Engram": 0.0, "embedding row + norms": 0.0}
    for name, (dtype, shape, nbytes) in table.items():
        if name.startswith("mtp."):
            continue
        if name == "embed.weight":
            parts["embedding row + norms"] += shape[1] * DTYPE_BYTES[dtype]
        elif name == "head.weight":
            parts["head"] += nbytes
        elif ".ffn.experts." in name:
            parts["routed experts"] += nbytes * top_k / n_routed
        elif ".engram.embed." in name:
            parts["Engram"] += 24 * nbytes / shape[0]  # 24 rows of this table per token
        elif ".attn.wo_a." in name and dtype == "F8_E4M3" or name.endswith("attn.wo_a.scale"):
            if cfg["o_lora_rank"] % 32 == 0:  # the codes and scales, as stored
                parts["attention"] += nbytes
            elif name.endswith(".weight"):  # widened to bf16, its scale unused
                parts["attention"] += 2 * numel(shape)
        elif name.endswith("attn.wo_a.weight"):
            parts["attention"] += 2 * numel(shape)
        elif re.search(r"\.hc_(attn|ffn)_(fn|base|scale)$", name):
            parts["mHC"] += 4 * numel(shape)
        elif ".attn." in name and len(shape) == 2:
            parts["attention"] += nbytes
        elif ".ffn." in name and len(shape) == 2:
            parts["shared expert + router"] += nbytes
        elif ".engram." in name and len(shape) == 2 and not name.endswith("_weight"):
            parts["Engram"] += nbytes
        else:  # norms, sinks, biases, Engram q/k weights: f32 copies
            parts["embedding row + norms"] += 4 * numel(shape)
    return parts


def run_decode(strata, model_dir, threads, n_tokens, repo):
    doc = os.path.join(repo, "data", "docs", "gettysburg-address.txt")
    cmd = [strata, "run", "-m", model_dir, "-f", doc, "-p",
           "Question: According to the speaker, who consecrated the ground at Gettysburg?",
           "-n", str(n_tokens), "--temp", "0", "-t", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"prefill ([0-9.]+) tok/s \| generated (\d+) tokens, decode ([0-9.]+) tok/s", out.stdout + out.stderr)
    if not m:
        sys.exit("decode_roofline: no stats line in the output of " + " ".join(cmd))
    return float(m.group(1)), int(m.group(2)), float(m.group(3)), cmd


def cpu_times():
    """(total, steal) jiffies of all CPUs from /proc/stat's first line (None where it is absent)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user and nice]
    return sum(fields[:8]), (fields[7] if len(fields) > 7 else 0)


def steal_share(before, after):
    if before is None or after is None or after[0] <= before[0]:
        return float("nan")
    return (after[1] - before[1]) / (after[0] - before[0])


def read_bandwidth(bench, threads):
    out = subprocess.run([bench, "--benchmark_filter=BM_MemRead/%d/1/" % threads, "--benchmark_repetitions=3",
                          "--benchmark_report_aggregates_only=true", "--benchmark_format=json"],
                         capture_output=True, text=True, check=True)
    for b in json.loads(out.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            return b["bytes_per_second"]
    sys.exit("decode_roofline: BM_MemRead/%d gave no median" % threads)


def main():
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--strata", default=os.path.join(repo, "build", "cli", "strata"))
    ap.add_argument("--bench", default=os.path.join(repo, "build", "bench", "kernels_bench"))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()

    parts = decode_bytes_per_token(a.model)
    per_token = sum(parts.values())
    print("weight bytes per decode token: %.1f MB" % (per_token / 1e6))
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print("  %-24s %8.1f MB (%4.1f%%)" % (k, v / 1e6, 100 * v / per_token))
    rates, shares = [], []
    for r in range(a.runs):
        bw_before = read_bandwidth(a.bench, a.threads)
        cpu_before = cpu_times()
        prefill, gen, tps, cmd = run_decode(a.strata, a.model, a.threads, a.tokens, repo)
        steal = steal_share(cpu_before, cpu_times())
        bw_after = read_bandwidth(a.bench, a.threads)
        bw = (bw_before + bw_after) / 2
        rates.append(tps)
        shares.append(per_token * tps / bw)
        print("run %d: decode %.2f tok/s (%d tokens), prefill %.1f tok/s; read BW %.1f GB/s (before %.1f, after %.1f); "
              "%.1f GB/s of weights = %.0f%%; steal %.1f%%"
              % (r + 1, tps, gen, prefill, bw / 1e9, bw_before / 1e9, bw_after / 1e9, per_token * tps / 1e9,
                 100 * per_token * tps / bw, 100 * steal))
    print("command: " + " ".join(cmd))
    print("median: decode %.2f tok/s, roofline share %.0f%% (threads %d)"
          % (statistics.median(rates), 100 * statistics.median(shares), a.threads))


if __name__ == "__main__":
    main()
