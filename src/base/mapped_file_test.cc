#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/huge_buffer.h"

namespace lumen {
namespace {

constexpr size_t kFileBytes = size_t{16} << 20;

// A 16 MiB file in the test's working directory (a real filesystem; /tmp may be tmpfs),
// written and then read 4 KiB at a time without any hint, so that the page cache holds it
// in whatever folios plain reads make.
std::string write_and_read_plainly(const std::string& name) {
  const std::string path = (std::filesystem::current_path() / name).string();
  std::vector<unsigned char> bytes(kFileBytes);
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::fdatasync(fd);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::vector<unsigned char> page(4096);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // no large readahead folios either
  for (size_t off = 0; off < kFileBytes; off += page.size()) EXPECT_EQ(::pread(fd, page.data(), page.size(), off), 4096);
  ::close(fd);
  return path;
}

TEST(MappedFile, HugePageBytesOfAnAnonymousHugeBufferAndOfAPlainMapping) {
  // No mapping there: nothing.
  EXPECT_EQ(huge_page_bytes(nullptr, 4096), 0);
  if (!anonymous_huge_pages_enabled()) GTEST_SKIP() << "transparent huge pages are off on this machine";
  Result<HugeBuffer> b = HugeBuffer::allocate(size_t{8} << 20, "test");
  ASSERT_TRUE(b.ok());
  for (size_t i = 0; i < b.value().n_bytes(); i += 4096) b.value().data()[i] = std::byte{1};
  // The 2 MiB-aligned middle at least (the kernel may place the buffer unaligned).
  EXPECT_GE(huge_page_bytes(b.value().data(), b.value().n_bytes()), int64_t{4} << 20);
}

TEST(MappedFile, PopulateOnHugePagesReadsTheFileAgainIntoHugeFolios) {
  const std::string path = write_and_read_plainly("mapped_file_test_populate.bin");
  double fraction = 0;
  {
    Result<MappedFile> f = MappedFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().message();
    fraction = f.value().populate_on_huge_pages();
    EXPECT_GE(fraction, 0.0);
    EXPECT_LE(fraction, 1.0);
  }
  if (fraction < 0.9) {
    // Either the kernel cannot map files on 2 MiB pages at all, or the refresh failed:
    // the best case (cache dropped first, then read through the advised mapping) tells.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    Result<MappedFile> f = MappedFile::open(path);
    ASSERT_TRUE(f.ok());
    f.value().advise_hugepages();
#ifdef MADV_POPULATE_READ
    madvise(const_cast<std::byte*>(f.value().data()), f.value().size(), MADV_POPULATE_READ);
#endif
    const double best = static_cast<double>(huge_page_bytes(f.value().data(), f.value().size())) / kFileBytes;
    std::filesystem::remove(path);
    if (best < 0.9) GTEST_SKIP() << "this kernel / filesystem maps files on small pages only (" << best << ")";
    FAIL() << "populate_on_huge_pages left " << fraction << " on 2 MiB pages; dropping the cache first gives " << best;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lumen
