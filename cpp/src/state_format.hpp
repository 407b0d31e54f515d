#pragma once
// Internal to the state-file layer (state_format.cpp, state_write.cpp, state_read.cpp,
// state_inspect.cpp): the header's keys, the tensor table, checksums and messages shared by the writer,
// the reader and inspect. Not installed. The format itself is specified in docs/format.md.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json.hpp"
#include "octopt/state_io.hpp"

namespace octopt::detail {

inline constexpr const char* kMetadataKey = "__metadata__";
inline constexpr const char* kKeyFormat = "octopt.format";
inline constexpr const char* kKeyVersion = "octopt.format_version";
inline constexpr const char* kKeyCrc = "octopt.crc32c";
// The entry of octopt.crc32c that holds the header checksum; no tensor can have this name.
inline constexpr const char* kHeaderCrcName = "__header__";
// The largest single read()/write(): below Linux's 2 GiB cap.
inline constexpr std::size_t kChunk = std::size_t(1) << 30;

// One tensor as the header describes it.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the data section
};

// For messages: 'printable(s)'; "<fn>: '<path>': ", the start of every message about a file; and so on.
std::string quote(std::string_view s);
std::string prefix(const char* fn, const std::string& path);
std::string hex8(std::uint32_t v);  // 8 lowercase hex digits
std::string shape_str(const std::vector<std::int64_t>& shape);
std::string known_dtypes();  // "F64, F32, ..."

// Why `name` cannot name a tensor, or nullptr when it can.
const char* tensor_name_problem(const std::string& name);

// product(shape) * itemsize, or false on overflow of 64 bits.
bool byte_count(const std::vector<std::int64_t>& shape, std::size_t itemsize, std::uint64_t* out);
// Whether the extents other than 0, times itemsize, fit in int64. A tensor with a zero extent holds no
// bytes whatever its other extents are, but array libraries refuse shapes whose extents multiply past
// their index type (NumPy: "array is too big"), so such a file could be read but not returned.
bool extents_fit(const std::vector<std::int64_t>& shape, std::size_t itemsize);

// Throws std::runtime_error on a big-endian host.
void require_little_endian(const char* fn);

// The checksum of everything in the header except octopt.crc32c itself, over an unambiguous encoding
// (docs/format.md, "Header checksum"): metadata sorted by key, then the tensors in data order, every
// string and number length-prefixed / as u64 little-endian.
std::uint32_t header_checksum(std::vector<std::pair<std::string_view, std::string_view>> metadata,
                              const std::vector<Entry>& tensors);

// One of the keys this layer owns (octopt.format, octopt.format_version, octopt.crc32c).
bool owned_key(const std::string& key);

// ---------------------------------------------------------------------------------------------------
// Files

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int close() {  // errno value of close(), or 0
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_ = -1;
};

// A file opened for validated, bounded reading.
class InFile {
 public:
  InFile(const std::string& path, const char* fn) : path_(path), fn_(fn) {
    // O_NONBLOCK: opening a FIFO must not hang; it has no effect on regular files.
    fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd_.get() < 0) throw FileError(errno, std::string(fn) + ": cannot open " + quote(path), path);
    struct stat st;
    if (::fstat(fd_.get(), &st) != 0) throw FileError(errno, std::string(fn) + ": cannot stat " + quote(path), path);
    if (S_ISDIR(st.st_mode)) throw FileError(EISDIR, std::string(fn) + ": cannot read " + quote(path), path);
    if (!S_ISREG(st.st_mode)) throw FormatError(prefix(fn, path) + "not a regular file");
    size_ = std::uint64_t(st.st_size);
  }

  std::uint64_t size() const { return size_; }

  void read_at(std::uint64_t offset, void* buf, std::size_t n) const {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      const ssize_t r = ::pread(fd_.get(), p, std::min(n, kChunk), off_t(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw FileError(errno, std::string(fn_) + ": cannot read " + quote(path_), path_);
      }
      if (r == 0)
        throw FormatError(prefix(fn_, path_) + "file ended at byte " + std::to_string(offset) + ", before its " +
                          std::to_string(size_) + " bytes were read (changed while being read?)");
      p += r;
      n -= std::size_t(r);
      offset += std::uint64_t(r);
    }
  }

 private:
  Fd fd_;
  std::string path_;
  const char* fn_;
  std::uint64_t size_ = 0;
};

// ---------------------------------------------------------------------------------------------------
// Reading: structure, then octopt's keys, then checksums

struct Header {
  std::uint64_t file_size = 0;
  std::uint64_t header_size = 0;  // N: bytes of JSON (with padding) after the 8-byte length
  std::uint64_t data_size = 0;
  bool sizes_known = false;  // header_size and data_size are valid
  bool has_metadata = false;
  std::vector<std::pair<std::string, std::string>> metadata;  // as stored, in header order
  std::vector<Entry> tensors;                                 // in data order
};

const std::string* find_meta(const Header& h, std::string_view key);

// The safetensors layer: lengths, JSON, entries, a contiguous layout that fills the data section exactly.
// Fills `h` as it goes, so that a caller catching the FormatError can report what was established.
void read_header(const InFile& f, const std::string& path, const char* fn, Header& h);

struct OctoptKeys {
  std::map<std::string, std::uint32_t> crcs;  // tensor name (or "__header__") -> stored CRC-32C
};

// octopt's layer on top: format, version and the checksum table.
void read_octopt_keys(const Header& h, const std::string& path, const char* fn, OctoptKeys& k);

std::uint32_t header_checksum(const Header& h);

// The checksum messages read_state_file throws and inspect_state_file reports.
std::string missing_header_crc(const std::string& pre);
std::string missing_tensor_crc(const std::string& pre, const std::string& name);
std::string bad_header_crc(const std::string& pre, std::uint32_t stored, std::uint32_t computed);
std::string bad_tensor_crc(const std::string& pre, const std::string& name, std::uint32_t stored,
                           std::uint32_t computed);

}  // namespace octopt::detail
