#include "store/mmap_store.h"

#include "store/engram_layout.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/gguf_names.h"
#include "store/placement_options.h"

namespace strata::store {

Result<std::unique_ptr<MmapStore>> MmapStore::open(std::unique_ptr<io::Checkpoint> ck, int n_layers) {
  // A ggml MXFP4 expert (io/ggml_mxfp4.h) is not the official layout the kernels read, so a view
  // into the mapping cannot serve it, and a copy of every expert would be resident mode under
  // another name (RAM for the whole model, which mmap is chosen to avoid): refused, naming the way.
  for (const auto& [name, t] : ck->tensors())
    if (t.packing != io::TensorInfo::Packing::kPlain)
      return NotSupported(ck->shard(t.shard).path() + ": tensor '" + io::gguf_tensor_name(name.substr(0, name.rfind('.')) + ".weight") +
                          "' holds routed experts as ggml MXFP4 blocks, which are regrouped into the official "
                          "layout after reading and so cannot be used from a memory map; use --load-mode resident or "
                          "--load-mode stream");
  auto s = std::unique_ptr<MmapStore>(new MmapStore(std::move(ck), n_layers));
  for (int i = 0; i < s->ck_->n_shards(); ++i) {
    const io::File& f = s->ck_->shard(i);
    Map m;
    m.size = static_cast<size_t>(f.size());
    if (m.size > 0) {
      const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return IOError(f.path() + ": open for mmap", errno);
      m.base = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
      const int err = errno;
      ::close(fd);
      if (m.base == MAP_FAILED) return IOError(f.path() + ": mmap of " + std::to_string(m.size) + " bytes", err);
    }
    s->maps_.push_back(m);
  }
  return s;
}

MmapStore::~MmapStore() {
  for (const Map& m : maps_)
    if (m.base) ::munmap(m.base, m.size);
}

Status MmapStore::check_shard(int shard) const {
  const io::File& f = ck_->shard(shard);
  STRATA_ASSIGN_OR_RETURN(uint64_t now, f.current_size());
  if (now != maps_[static_cast<size_t>(shard)].size)
    return Corruption(f.path() + ": shard changed size since load (" + std::to_string(maps_[static_cast<size_t>(shard)].size) +
                      " -> " + std::to_string(now) + " bytes); reload the model");
  return Status();
}

Result<TensorView> MmapStore::mapped(const std::string& name) const {
  const io::TensorInfo* t = ck_->find(name);
  if (!t) return NotFound(ck_->dir() + ": tensor '" + name + "' is missing from the checkpoint");
  const Map& m = maps_[static_cast<size_t>(t->shard)];
  // The header parser checked offset + nbytes against the file size at open.
  return TensorView{static_cast<const uint8_t*>(m.base) + t->offset, t->dtype, t->shape};
}

Result<TensorView> MmapStore::resident(const std::string& name) {
  // Resident tensors (everything but routed experts and Engram tables) are read once into aligned
  // RAM: they are used every token, so paging them buys nothing; a view into the mapping could be
  // misaligned for its dtype, and would turn a shard truncated after load into SIGBUS on the next
  // token instead of the size check's clear error.
  std::lock_guard<std::mutex> lock(tensors_mu_);
  return tensors_.get(*ck_, name);
}

Result<TensorView> MmapStore::resident_relaid(const std::string& name, const std::string& layout, const RelayFn& relay) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  return tensors_.relaid(*ck_, name, layout, relay);
}

Status MmapStore::load_resident(const std::function<bool(const io::TensorInfo&)>& wanted, const ProgressFn& progress) {
  std::lock_guard<std::mutex> lock(tensors_mu_);
  return tensors_.read_all(*ck_, select_tensors(*ck_, wanted, false), BulkReadOptions{}, progress);
}

Result<std::unique_ptr<ExpertLease>> MmapStore::acquire_expert(int layer, int expert) {
  const std::string p = layer_prefix(layer, n_layers_) + ".ffn.experts." + std::to_string(expert) + ".";
  ExpertView v;
  TensorView* parts[] = {&v.w1, &v.w1_scale, &v.w2, &v.w2_scale, &v.w3, &v.w3_scale};
  const char* names[] = {"w1.weight", "w1.scale", "w2.weight", "w2.scale", "w3.weight", "w3.scale"};
  for (int i = 0; i < 6; ++i) {
    const io::TensorInfo* t = ck_->find(p + names[i]);
    if (!t) return NotFound(ck_->dir() + ": tensor '" + p + names[i] + "' is missing from the checkpoint");
    STRATA_RETURN_IF_ERROR(check_shard(t->shard));
    STRATA_ASSIGN_OR_RETURN(*parts[i], mapped(p + names[i]));
  }
  return std::make_unique<ExpertLease>(v);
}

Status MmapStore::read_engram_rows(int layer, std::span<const int64_t> rows, uint8_t* weight_out, uint8_t* scale_out) {
  const std::string p = layer_prefix(layer, n_layers_) + ".engram.embed.";
  const io::TensorInfo* wt = ck_->find(p + "weight");
  const io::TensorInfo* st = ck_->find(p + "scale");
  int64_t ihd = 0, ins = 0;
  if (wt && engram_interleaved(*wt, &ihd, &ins)) {  // ds4 / ik_llama.cpp rows of 264 bytes
    STRATA_RETURN_IF_ERROR(check_shard(wt->shard));
    const auto* wb = static_cast<const uint8_t*>(maps_[static_cast<size_t>(wt->shard)].base) + wt->offset;
    return gather_engram_rows_interleaved(p + "weight", wb, wt->shape[0], ihd, ins, rows, weight_out, scale_out);
  }
  if (wt && dtype_is_block_quant(wt->dtype)) {  // `strata quantize --engram T`: no scale tensor
    STRATA_RETURN_IF_ERROR(check_shard(wt->shard));
    const auto* wb = static_cast<const uint8_t*>(maps_[static_cast<size_t>(wt->shard)].base) + wt->offset;
    const int64_t rb = static_cast<int64_t>(dtype_nbytes(wt->dtype, wt->shape[1]));
    return gather_engram_rows(p + "weight", wb, nullptr, wt->shape[0], rb, 0, rows, weight_out, scale_out);
  }
  if (!wt || !st) return NotFound(ck_->dir() + ": tensor '" + p + "weight' or '" + p + "scale' is missing");
  STRATA_RETURN_IF_ERROR(check_shard(wt->shard));
  STRATA_RETURN_IF_ERROR(check_shard(st->shard));
  const int64_t n_rows = wt->shape[0], hd = wt->shape[1], ns = st->shape[1];
  const auto* wb = static_cast<const uint8_t*>(maps_[static_cast<size_t>(wt->shard)].base) + wt->offset;
  const auto* sb = static_cast<const uint8_t*>(maps_[static_cast<size_t>(st->shard)].base) + st->offset;
  return gather_engram_rows(p + "weight", wb, sb, n_rows, hd, ns, rows, weight_out, scale_out);
}

std::string MmapStore::describe() const {
  uint64_t total = 0;
  for (const Map& m : maps_) total += m.size;
  return "mmap: " + std::to_string(maps_.size()) + " shards mapped (" + format_bytes(total) +
         "), paged by the kernel (naive baseline)";
}

}  // namespace strata::store
