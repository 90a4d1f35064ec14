#include "io/file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "tests/support/files.h"
#include "tests/support/temp_dir.h"

namespace strata::io {
namespace {

TEST(File, ReadsRegularFilesAndReportsShortReads) {
  testing::TempDir d;
  testing::write_all(d.file("a"), "hello world");
  auto f = open_file(d.file("a"));
  ASSERT_TRUE(f.ok());
  char buf[5];
  ASSERT_TRUE((*f)->read_at(6, 5, buf).ok());
  EXPECT_EQ(std::string(buf, 5), "world");
  Status s = (*f)->read_at(8, 10, buf);
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("short read"), std::string::npos);
  EXPECT_NE(s.message().find("offset 8"), std::string::npos);
}

TEST(File, MissingFileIsNotFound) {
  auto f = open_file("/nonexistent/strata/file");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code(), StatusCode::kNotFound);
  auto s = read_file_to_string("/nonexistent/strata/file");
  EXPECT_EQ(s.error().code(), StatusCode::kNotFound);
}

TEST(File, ReadsPipesToTheEnd) {
  // fstat reports size 0 for a FIFO; the reader must not take that as an empty file.
  testing::TempDir d;
  const std::string fifo = d.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string payload(200000, 'x');
  std::thread writer([&] { testing::write_all(fifo, payload); });
  auto s = read_file_to_string(fifo);
  writer.join();
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->size(), payload.size());
  EXPECT_EQ(*s, payload);
}

TEST(File, SizeLimit) {
  testing::TempDir d;
  testing::write_all(d.file("big"), std::string(100, 'a'));
  auto s = read_file_to_string(d.file("big"), 10);
  EXPECT_EQ(s.error().code(), StatusCode::kResourceExhausted);
}

TEST(File, AtomicWriteReplacesWholeFile) {
  testing::TempDir d;
  testing::write_all(d.file("t"), "old contents");
  ASSERT_TRUE(write_file_atomic(d.file("t"), "new", 3).ok());
  EXPECT_EQ(testing::read_all(d.file("t")), "new");
  EXPECT_FALSE(write_file_atomic("/nonexistent/dir/x", "a", 1).ok());
}

TEST(File, FaultInjection) {
  testing::TempDir d;
  testing::write_all(d.file("f"), std::string(1000, 'z'));
  auto base = open_file(d.file("f"));
  ASSERT_TRUE(base.ok());
  auto faulty = make_faulty_file(std::move(*base), FaultSpec{500, 5});
  char buf[100];
  EXPECT_TRUE(faulty->read_at(0, 100, buf).ok());
  Status s = faulty->read_at(450, 100, buf);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("injected"), std::string::npos);
}

}  // namespace
}  // namespace strata::io
