// io::UringReader: reads at queue depth land the right bytes, partial reads are completed, short
// reads and injected faults come back per read with the file and offset named, O_DIRECT reads work
// when aligned, and many batches in flight at a queue depth of 1 all complete.
#include "io/uring_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  return s;
}

std::unique_ptr<UringReader> make_reader(int depth) {
  UringReaderOptions o;
  o.queue_depth = depth;
  auto r = UringReader::create(o);
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

TEST(UringReader, RandomReadsAtDepthReturnTheFileBytes) {
  testing::TempDir d;
  const std::string data = pattern(3 << 20);
  testing::write_all(d.file("f"), data);
  auto f = open_file(d.file("f"));
  ASSERT_TRUE(f.ok());
  auto reader = make_reader(8);
  ASSERT_NE(reader, nullptr);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> offs;
  std::vector<size_t> lens;
  std::vector<std::vector<uint8_t>> bufs;
  ReadBatch b;
  for (int i = 0; i < 200; ++i) {
    const size_t len = 1 + rng() % 70000;
    const uint64_t off = rng() % (data.size() - len);
    offs.push_back(off);
    lens.push_back(len);
    bufs.emplace_back(len);
  }
  for (size_t i = 0; i < offs.size(); ++i) b.add(**f, offs[i], lens[i], bufs[i].data());
  reader->submit(&b);
  ASSERT_TRUE(b.wait().ok());
  for (size_t i = 0; i < offs.size(); ++i)
    ASSERT_EQ(std::memcmp(bufs[i].data(), data.data() + offs[i], lens[i]), 0) << "read " << i;
  EXPECT_EQ(reader->reads_completed(), offs.size());
  EXPECT_EQ(b.bytes(), reader->bytes_read());
}

TEST(UringReader, ShortReadIsCorruptionNamingFileAndOffset) {
  testing::TempDir d;
  testing::write_all(d.file("f"), pattern(10000));
  auto f = open_file(d.file("f"));
  ASSERT_TRUE(f.ok());
  auto reader = make_reader(4);
  std::vector<uint8_t> a(100), c(5000);
  ReadBatch b;
  b.add(**f, 0, a.size(), a.data());
  b.add(**f, 8000, c.size(), c.data());  // 2000 bytes past the end
  reader->submit(&b);
  Status s = b.wait();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("short read"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("offset 8000"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find(d.file("f")), std::string::npos) << s.to_string();
  EXPECT_TRUE(b.status(0).ok());
  EXPECT_FALSE(b.status(1).ok());
}

TEST(UringReader, MinBytesAcceptsATailCutByEndOfFile) {
  testing::TempDir d;
  const std::string data = pattern(6000);
  testing::write_all(d.file("f"), data);
  auto f = open_file(d.file("f"));
  auto reader = make_reader(2);
  std::vector<uint8_t> buf(8192);
  ReadBatch b;
  b.add(**f, 4096, 8192, buf.data(), -1, 6000 - 4096);
  reader->submit(&b);
  ASSERT_TRUE(b.wait().ok());
  EXPECT_EQ(std::memcmp(buf.data(), data.data() + 4096, 6000 - 4096), 0);
}

TEST(UringReader, InjectedFaultsReachTheCaller) {
  testing::TempDir d;
  testing::write_all(d.file("f"), pattern(100000));
  auto base = open_file(d.file("f"));
  ASSERT_TRUE(base.ok());
  auto eio = make_faulty_file(std::move(*base), FaultSpec{50000, 5});
  EXPECT_EQ(eio->native_fd(), -1);
  auto reader = make_reader(4);
  std::vector<uint8_t> a(1000), c(1000);
  ReadBatch b;
  b.add(*eio, 0, a.size(), a.data());
  b.add(*eio, 49500, c.size(), c.data());
  reader->submit(&b);
  Status s = b.wait();
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("injected"), std::string::npos);
  EXPECT_NE(s.message().find("offset 49500"), std::string::npos) << s.to_string();
}

TEST(UringReader, DirectReadsWhenTheFileSystemAllowsThem) {
  testing::TempDir d;
  const std::string data = pattern(1 << 20);
  testing::write_all(d.file("f"), data);
  auto f = open_file(d.file("f"));
  auto fd = open_direct(d.file("f"));
  if (!fd.ok()) GTEST_SKIP() << "O_DIRECT unavailable here: " << fd.error().to_string();
  auto reader = make_reader(4);
  // 64-byte aligned is not enough for O_DIRECT: use a 4 KiB-aligned region inside a larger buffer.
  std::vector<uint8_t> raw(3 * kDirectIoAlign + 64 * 1024);
  uint8_t* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw.data()) + kDirectIoAlign - 1) / kDirectIoAlign *
                                          kDirectIoAlign);
  ReadBatch b;
  b.add(**f, 8 * kDirectIoAlign, 16 * kDirectIoAlign, p, fd->get());
  reader->submit(&b);
  ASSERT_TRUE(b.wait().ok());
  EXPECT_EQ(std::memcmp(p, data.data() + 8 * kDirectIoAlign, 16 * kDirectIoAlign), 0);
}

TEST(UringReader, ManyBatchesThroughADepthOfOne) {
  testing::TempDir d;
  const std::string data = pattern(1 << 18);
  testing::write_all(d.file("f"), data);
  auto f = open_file(d.file("f"));
  auto reader = make_reader(1);
  std::vector<std::unique_ptr<ReadBatch>> batches;
  std::vector<std::vector<uint8_t>> bufs;
  for (int i = 0; i < 20; ++i) {
    batches.push_back(std::make_unique<ReadBatch>());
    for (int j = 0; j < 5; ++j) {
      bufs.emplace_back(4096);
      batches.back()->add(**f, static_cast<uint64_t>((i * 5 + j) * 2048), 4096, bufs.back().data());
    }
    reader->submit(batches.back().get());
  }
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(batches[static_cast<size_t>(i)]->wait().ok());
    for (int j = 0; j < 5; ++j)
      ASSERT_EQ(std::memcmp(bufs[static_cast<size_t>(i * 5 + j)].data(), data.data() + (i * 5 + j) * 2048, 4096), 0);
  }
  // A finished batch can be reset and reused.
  batches[0]->reset();
  std::vector<uint8_t> one(10);
  batches[0]->add(**f, 3, 10, one.data());
  reader->submit(batches[0].get());
  ASSERT_TRUE(batches[0]->wait().ok());
  EXPECT_EQ(std::memcmp(one.data(), data.data() + 3, 10), 0);
}

TEST(UringReader, RejectsBadQueueDepth) {
  UringReaderOptions o;
  o.queue_depth = 0;
  EXPECT_EQ(UringReader::create(o).error().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::io
