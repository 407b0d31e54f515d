#include "octopt/state_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string_view>
#include <utility>

#include "crc32c.hpp"
#include "json.hpp"

namespace octopt {
namespace {

using detail::Json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kKeyFormat = "octopt.format";
constexpr const char* kKeyVersion = "octopt.format_version";
constexpr const char* kKeyCrc = "octopt.crc32c";
constexpr const char* kHeaderCrcName = "__header__";  // entry of octopt.crc32c; no tensor can have this name
constexpr std::size_t kChunk = std::size_t(1) << 30;  // largest single read()/write(): below Linux's 2 GiB cap

struct DTypeInfo {
  const char* name;
  std::size_t size;
};
constexpr DTypeInfo kDTypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U64", 8},  {"U32", 4},
                                 {"U16", 2}, {"U8", 1},  {"BOOL", 1}};

// One tensor as the header describes it.
struct Entry {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // data_offsets, relative to the start of the data section
};

std::string quote(std::string_view s) { return "'" + detail::printable(s) + "'"; }

std::string prefix(const char* fn, const std::string& path) { return std::string(fn) + ": " + quote(path) + ": "; }

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", unsigned(v));
  return buf;
}

bool parse_hex8(const std::string& s, std::uint32_t* out) {
  if (s.size() != 8) return false;
  std::uint32_t v = 0;
  for (const char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9') v |= std::uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f') v |= std::uint32_t(c - 'a' + 10);
    else return false;
  }
  *out = v;
  return true;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

std::string offsets_str(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON value for a message, shortened.
std::string show(const Json& v) {
  std::string s = detail::write_json(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string known_dtypes() {
  std::string s;
  for (const DTypeInfo& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// Why `name` cannot name a tensor, or nullptr when it can.
const char* tensor_name_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxTensorNameBytes) return "is longer than 1024 bytes";
  if (name.compare(0, 2, "__") == 0) return "starts with '__' (reserved)";
  if (!detail::is_valid_utf8(name)) return "is not valid UTF-8";
  return nullptr;
}

// product(shape) * itemsize, or false on overflow of 64 bits.
bool byte_count(const std::vector<std::int64_t>& shape, std::size_t itemsize, std::uint64_t* out) {
  std::uint64_t n = itemsize;
  for (const std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, std::uint64_t(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Whether the extents other than 0, times itemsize, fit in int64. A tensor with a zero extent holds no
// bytes whatever its other extents are, but array libraries refuse shapes whose extents multiply past
// their index type (NumPy: "array is too big"), so such a file could be read but not returned.
bool extents_fit(const std::vector<std::int64_t>& shape, std::size_t itemsize) {
  std::uint64_t n = itemsize;
  for (const std::int64_t d : shape) {
    if (d < 0 || (d != 0 && __builtin_mul_overflow(n, std::uint64_t(d), &n))) return false;
  }
  return n <= std::uint64_t(std::numeric_limits<std::int64_t>::max());
}

bool host_is_little_endian() {
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
  return __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__;
#else
  const std::uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
#endif
}

void require_little_endian(const char* fn) {
  if (!host_is_little_endian())
    throw std::runtime_error(std::string(fn) +
                             ": state files hold little-endian data and this host is big-endian, which octopt "
                             "does not support");
}

// The checksum of everything in the header except octopt.crc32c itself, over an unambiguous encoding
// (docs/format.md, "Header checksum"): metadata sorted by key, then the tensors in data order, every
// string and number length-prefixed / as u64 little-endian.
void put_u64(std::string& b, std::uint64_t v) {
  for (int k = 0; k < 8; ++k) b += char((v >> (8 * k)) & 0xFF);
}
void put_str(std::string& b, std::string_view s) {
  put_u64(b, s.size());
  b.append(s.data(), s.size());
}

std::uint32_t header_checksum(std::vector<std::pair<std::string_view, std::string_view>> metadata,
                              const std::vector<Entry>& tensors) {
  metadata.erase(std::remove_if(metadata.begin(), metadata.end(), [](const auto& kv) { return kv.first == kKeyCrc; }),
                 metadata.end());
  std::sort(metadata.begin(), metadata.end());
  std::string b;
  put_u64(b, metadata.size());
  for (const auto& [key, value] : metadata) {
    put_str(b, key);
    put_str(b, value);
  }
  put_u64(b, tensors.size());
  for (const Entry& t : tensors) {
    put_str(b, t.name);
    put_str(b, t.dtype);
    put_u64(b, t.shape.size());
    for (const std::int64_t d : t.shape) put_u64(b, std::uint64_t(d));
    put_u64(b, t.begin);
    put_u64(b, t.end);
  }
  return detail::crc32c(0, b.data(), b.size());
}

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

// Writes all n bytes; returns 0 or the errno value.
int write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kChunk));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (w == 0) return EIO;
    p += w;
    n -= std::size_t(w);
  }
  return 0;
}

std::string random_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t r = std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    std::random_device rd;
    r ^= (std::uint64_t(rd()) << 32) ^ rd();
  } catch (const std::exception&) {
    // no entropy source: the clock and the counter still make collisions unlikely, and O_EXCL catches them
  }
  r ^= (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

std::string parent_dir(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A temporary file that is removed unless committed.
class TempFile {
 public:
  TempFile(const std::string& path, const char* fn) : fn_(fn), target_(path) {
    for (int attempt = 0;; ++attempt) {
      path_ = target_ + ".tmp-" + std::to_string(long(::getpid())) + "-" + random_suffix();
      const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) {
        fd_.reset(fd);
        break;
      }
      const int err = errno;
      if ((err == EEXIST || err == EINTR) && attempt < 16) continue;
      throw FileError(err, std::string(fn_) + ": cannot create a temporary file next to " + quote(target_), target_);
    }
    // A replaced file keeps its permission bits (a private checkpoint stays private); best effort.
    struct stat st;
    if (::stat(target_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) (void)::fchmod(fd_.get(), st.st_mode & 07777);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    fd_.reset();
    if (!committed_) ::unlink(path_.c_str());
  }

  void write(const void* data, std::size_t n) {
    if (const int err = write_all(fd_.get(), data, n)) fail(err, "cannot write");
  }

  // fsync, close, rename over the target, fsync the folder.
  void commit() {
    while (::fsync(fd_.get()) != 0) {
      if (errno != EINTR) fail(errno, "cannot fsync");
    }
    if (const int err = fd_.close()) fail(err, "cannot close");
    if (::rename(path_.c_str(), target_.c_str()) != 0) fail(errno, "cannot rename the temporary file onto");
    committed_ = true;
    // The rename is durable only once the folder's entry is: fsync it. Some file systems cannot fsync a
    // folder (EINVAL); the data itself is already on disk there.
    Fd dir(::open(parent_dir(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.get() < 0) {
      throw FileError(errno, std::string(fn_) + ": wrote " + quote(target_) + " but cannot open its folder to fsync",
                      target_);
    }
    while (::fsync(dir.get()) != 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL || errno == ENOTSUP) break;
      throw FileError(errno, std::string(fn_) + ": wrote " + quote(target_) + " but cannot fsync its folder",
                      target_);
    }
  }

 private:
  [[noreturn]] void fail(int err, const char* what) {
    throw FileError(err, std::string(fn_) + ": " + what + " " + quote(target_) + " (temporary " + quote(path_) + ")",
                    target_);
  }

  const char* fn_;
  std::string target_;
  std::string path_;
  Fd fd_;
  bool committed_ = false;
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
  bool sizes_known = false;       // header_size and data_size are valid
  bool has_metadata = false;
  std::vector<std::pair<std::string, std::string>> metadata;  // as stored, in header order
  std::vector<Entry> tensors;                                  // in data order
};

const std::string* find_meta(const Header& h, std::string_view key) {
  for (const auto& kv : h.metadata)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

Entry parse_entry(const std::string& name, const Json& v, const std::string& pre) {
  const std::string where = pre + "tensor " + quote(name) + ": ";
  if (!v.is_object()) throw FormatError(where + "entry must be an object, got " + Json::kind_name(v.kind()));
  for (const Json::Member& m : v.as_object()) {
    if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets")
      throw FormatError(where + "unknown key " + quote(m.first) + " (expected dtype, shape, data_offsets)");
  }
  Entry e;
  e.name = name;
  const Json* dtype = v.find("dtype");
  const Json* shape = v.find("shape");
  const Json* offsets = v.find("data_offsets");
  if (!dtype) throw FormatError(where + "missing key 'dtype'");
  if (!shape) throw FormatError(where + "missing key 'shape'");
  if (!offsets) throw FormatError(where + "missing key 'data_offsets'");
  if (!dtype->is_string()) throw FormatError(where + "dtype must be a string, got " + show(*dtype));
  e.dtype = dtype->as_string();
  const std::size_t itemsize = state_dtype_size(e.dtype);
  if (itemsize == 0)
    throw FormatError(where + "unknown dtype " + quote(e.dtype) + " (known: " + known_dtypes() + ")");
  if (!shape->is_array()) throw FormatError(where + "shape must be an array, got " + show(*shape));
  for (std::size_t k = 0; k < shape->as_array().size(); ++k) {
    const Json& d = shape->as_array()[k];
    if (!d.is_unsigned() || d.as_uint64() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      throw FormatError(where + "shape[" + std::to_string(k) + "] must be a non-negative integer, got " + show(d));
    e.shape.push_back(std::int64_t(d.as_uint64()));
  }
  if (!offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].is_unsigned() ||
      !offsets->as_array()[1].is_unsigned())
    throw FormatError(where + "data_offsets must be [begin, end] with non-negative integers, got " + show(*offsets));
  e.begin = offsets->as_array()[0].as_uint64();
  e.end = offsets->as_array()[1].as_uint64();
  if (e.end < e.begin)
    throw FormatError(where + "data_offsets " + offsets_str(e.begin, e.end) + " end before they begin");
  std::uint64_t nbytes = 0;
  if (!byte_count(e.shape, itemsize, &nbytes) || !extents_fit(e.shape, itemsize))
    throw FormatError(where + "shape " + shape_str(e.shape) + " of " + e.dtype +
                      " is too large (byte count overflows)");
  if (nbytes != e.end - e.begin)
    throw FormatError(where + "shape " + shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(nbytes) +
                      " bytes but data_offsets " + offsets_str(e.begin, e.end) + " span " +
                      std::to_string(e.end - e.begin));
  return e;
}

// The safetensors layer: lengths, JSON, entries, a contiguous layout that fills the data section exactly.
// Fills `h` as it goes, so that a caller catching the FormatError can report what was established.
void read_header(const InFile& f, const std::string& path, const char* fn, Header& h) {
  const std::string pre = prefix(fn, path);
  h.file_size = f.size();
  if (h.file_size < 8)
    throw FormatError(pre + "file is " + std::to_string(h.file_size) +
                      " bytes, too short for the 8-byte header length (truncated?)");
  unsigned char len[8];
  f.read_at(0, len, 8);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len[k];
  if (n > kMaxStateHeaderBytes)
    throw FormatError(pre + "header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kMaxStateHeaderBytes) + " bytes (corrupt file?)");
  if (n > h.file_size - 8)
    throw FormatError(pre + "header length " + std::to_string(n) + " exceeds the " + std::to_string(h.file_size - 8) +
                      " bytes that follow it (truncated?)");
  h.header_size = n;
  h.data_size = h.file_size - 8 - n;
  h.sizes_known = true;

  std::string text(std::size_t(n), '\0');  // bounded by the limit and by the file's size
  f.read_at(8, text.data(), text.size());
  Json doc;
  try {
    doc = detail::parse_json(text, detail::JsonParseOptions{8});
  } catch (const detail::JsonParseError& e) {
    throw FormatError(pre + "header is not valid JSON (at byte " + std::to_string(e.offset) + " of the header): " +
                      e.problem);
  }
  if (!doc.is_object()) throw FormatError(pre + "header must be a JSON object, got " + Json::kind_name(doc.kind()));

  for (const Json::Member& m : doc.as_object()) {
    if (m.first == kMetadataKey) {
      if (!m.second.is_object())
        throw FormatError(pre + "'__metadata__' must be an object, got " + Json::kind_name(m.second.kind()));
      for (const Json::Member& kv : m.second.as_object()) {
        if (!kv.second.is_string())
          throw FormatError(pre + "metadata key " + quote(kv.first) + ": value must be a string, got " +
                            show(kv.second));
        h.metadata.emplace_back(kv.first, kv.second.as_string());
      }
      h.has_metadata = true;
      continue;
    }
    if (const char* problem = tensor_name_problem(m.first))
      throw FormatError(pre + "header key " + quote(m.first) + " " + problem + ": not a valid tensor name");
    h.tensors.push_back(parse_entry(m.first, m.second, pre));
  }

  // Data order; tensors of zero bytes may share an offset and keep their header order.
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expect = 0;
  for (std::size_t k = 0; k < h.tensors.size(); ++k) {
    const Entry& t = h.tensors[k];
    if (t.begin < expect)
      throw FormatError(pre + "tensor " + quote(t.name) + ": data_offsets " + offsets_str(t.begin, t.end) +
                        " overlap tensor " + quote(h.tensors[k - 1].name) + " " +
                        offsets_str(h.tensors[k - 1].begin, h.tensors[k - 1].end));
    if (t.begin > expect)
      throw FormatError(pre + "tensor " + quote(t.name) + ": data_offsets " + offsets_str(t.begin, t.end) +
                        " leave a gap of " + std::to_string(t.begin - expect) + " bytes after " +
                        (k ? "tensor " + quote(h.tensors[k - 1].name) : std::string("the header")));
    expect = t.end;
  }
  if (expect > h.data_size)
    throw FormatError(pre + "tensors need " + std::to_string(expect) + " bytes of data but the file holds " +
                      std::to_string(h.data_size) + " after the header (truncated?)");
  if (expect < h.data_size)
    throw FormatError(pre + std::to_string(h.data_size - expect) +
                      " unexpected bytes after the last tensor (data is " + std::to_string(h.data_size) +
                      " bytes, tensors end at " + std::to_string(expect) + ")");
}

struct OctoptKeys {
  std::map<std::string, std::uint32_t> crcs;  // tensor name (or "__header__") -> stored CRC-32C
};

// octopt's layer on top: format, version and the checksum table.
void read_octopt_keys(const Header& h, const std::string& path, const char* fn, OctoptKeys& k) {
  const std::string pre = prefix(fn, path);
  if (!h.has_metadata) throw FormatError(pre + "the header has no '__metadata__': not an octopt state file");
  const std::string* format = find_meta(h, kKeyFormat);
  if (!format) throw FormatError(pre + "metadata key 'octopt.format' is missing: not an octopt state file");
  if (*format != kStateFormat)
    throw FormatError(pre + "metadata key 'octopt.format' is " + quote(*format) + ", expected 'octopt-state'");
  const std::string* version = find_meta(h, kKeyVersion);
  if (!version) throw FormatError(pre + "metadata key 'octopt.format_version' is missing");
  if (*version != std::to_string(kStateFormatVersion))
    throw FormatError(pre + "unsupported format version " + quote(*version) + " (this build reads " +
                      std::to_string(kStateFormatVersion) + ")");
  const std::string* crc_text = find_meta(h, kKeyCrc);
  if (!crc_text) throw FormatError(pre + "metadata key 'octopt.crc32c' is missing (no checksums)");
  Json crcs;
  try {
    crcs = detail::parse_json(*crc_text, detail::JsonParseOptions{2});
  } catch (const detail::JsonParseError& e) {
    throw FormatError(pre + "metadata key 'octopt.crc32c' is not valid JSON (at byte " + std::to_string(e.offset) +
                      " of its value): " + e.problem);
  }
  if (!crcs.is_object())
    throw FormatError(pre + "metadata key 'octopt.crc32c' must hold a JSON object, got " +
                      Json::kind_name(crcs.kind()));
  std::set<std::string_view> names;
  for (const Entry& t : h.tensors) names.insert(t.name);
  for (const Json::Member& m : crcs.as_object()) {
    std::uint32_t v = 0;
    if (!m.second.is_string() || !parse_hex8(m.second.as_string(), &v))
      throw FormatError(pre + "metadata key 'octopt.crc32c': entry " + quote(m.first) +
                        " must be 8 lowercase hex digits, got " + show(m.second));
    if (m.first != kHeaderCrcName && !names.count(m.first))
      throw FormatError(pre + "metadata key 'octopt.crc32c' has a checksum for " + quote(m.first) +
                        ", which is not a tensor in this file");
    k.crcs[m.first] = v;
  }
}

std::uint32_t header_checksum(const Header& h) {
  std::vector<std::pair<std::string_view, std::string_view>> meta(h.metadata.begin(), h.metadata.end());
  return header_checksum(std::move(meta), h.tensors);
}

std::string missing_header_crc(const std::string& pre) {
  return pre + "metadata key 'octopt.crc32c' has no header checksum ('__header__')";
}
std::string missing_tensor_crc(const std::string& pre, const std::string& name) {
  return pre + "metadata key 'octopt.crc32c' has no checksum for tensor " + quote(name);
}
std::string bad_header_crc(const std::string& pre, std::uint32_t stored, std::uint32_t computed) {
  return pre + "header checksum mismatch (stored " + hex8(stored) + ", computed " + hex8(computed) +
         "): metadata or tensor table corrupt";
}
std::string bad_tensor_crc(const std::string& pre, const std::string& name, std::uint32_t stored,
                           std::uint32_t computed) {
  return pre + "tensor " + quote(name) + ": checksum mismatch (stored " + hex8(stored) + ", computed " +
         hex8(computed) + "): data corrupt";
}

bool owned_key(const std::string& key) { return key == kKeyFormat || key == kKeyVersion || key == kKeyCrc; }

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Public API

std::size_t state_dtype_size(const std::string& dtype) {
  for (const DTypeInfo& d : kDTypes)
    if (dtype == d.name) return d.size;
  return 0;
}

const std::vector<std::string>& state_dtypes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const DTypeInfo& d : kDTypes) v.emplace_back(d.name);
    return v;
  }();
  return names;
}

void write_state_file(const std::string& path, const std::vector<TensorView>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  constexpr const char* fn = "write_state_file";
  require_little_endian(fn);
  if (path.empty()) throw std::invalid_argument(std::string(fn) + ": argument 'path' is empty");
  if (path.back() == '/')
    throw std::invalid_argument(std::string(fn) + ": argument 'path' " + quote(path) + " names a folder, not a file");

  // Validate everything before touching the file system.
  std::vector<Entry> entries;
  entries.reserve(tensors.size());
  std::set<std::string_view> seen;
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    if (const char* problem = tensor_name_problem(t.name))
      throw std::invalid_argument(std::string(fn) + ": tensor name " + quote(t.name) + " " + problem);
    if (!seen.insert(t.name).second)
      throw std::invalid_argument(std::string(fn) + ": tensor name " + quote(t.name) + " appears twice");
    const std::string where = std::string(fn) + ": tensor " + quote(t.name) + ": ";
    const std::size_t itemsize = state_dtype_size(t.dtype);
    if (itemsize == 0)
      throw std::invalid_argument(where + "dtype " + quote(t.dtype) + " is not supported (supported: " +
                                  known_dtypes() + ")");
    for (std::size_t k = 0; k < t.shape.size(); ++k)
      if (t.shape[k] < 0)
        throw std::invalid_argument(where + "shape[" + std::to_string(k) + "] is " + std::to_string(t.shape[k]) +
                                    ", must be >= 0");
    std::uint64_t nbytes = 0;
    if (!byte_count(t.shape, itemsize, &nbytes) || !extents_fit(t.shape, itemsize) ||
        offset + nbytes < offset)
      throw std::invalid_argument(where + "shape " + shape_str(t.shape) + " is too large");
    if (nbytes > 0 && t.data == nullptr) throw std::invalid_argument(where + "data is null");
    entries.push_back(Entry{t.name, t.dtype, t.shape, offset, offset + nbytes});
    offset += nbytes;
  }
  std::map<std::string, std::string> meta;
  for (const auto& [key, value] : metadata) {
    if (key.empty()) throw std::invalid_argument(std::string(fn) + ": metadata key is empty");
    if (owned_key(key))
      throw std::invalid_argument(std::string(fn) + ": metadata key " + quote(key) +
                                  " is reserved (written by the state-file layer itself)");
    if (!detail::is_valid_utf8(key))
      throw std::invalid_argument(std::string(fn) + ": metadata key " + quote(key) + " is not valid UTF-8");
    if (!detail::is_valid_utf8(value))
      throw std::invalid_argument(std::string(fn) + ": metadata value of key " + quote(key) + " is not valid UTF-8");
    meta.emplace(key, value);
  }
  meta[kKeyFormat] = kStateFormat;
  meta[kKeyVersion] = std::to_string(kStateFormatVersion);

  // Checksums: the header's (without octopt.crc32c, which holds it), then each tensor's data.
  Json::Object crcs;
  {
    std::vector<std::pair<std::string_view, std::string_view>> kv(meta.begin(), meta.end());
    crcs.emplace_back(kHeaderCrcName, Json::string(hex8(header_checksum(std::move(kv), entries))));
  }
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const Entry& e = entries[k];
    crcs.emplace_back(e.name, Json::string(hex8(detail::crc32c(0, tensors[k].data, e.end - e.begin))));
  }
  meta[kKeyCrc] = detail::write_json(Json::object(std::move(crcs)));

  Json::Object header;
  {
    Json::Object m;
    for (const auto& [key, value] : meta) m.emplace_back(key, Json::string(value));
    header.emplace_back(kMetadataKey, Json::object(std::move(m)));
  }
  for (const Entry& e : entries) {
    Json::Array shape;
    for (const std::int64_t d : e.shape) shape.push_back(Json::integer(std::uint64_t(d)));
    Json offsets = Json::array({Json::integer(e.begin), Json::integer(e.end)});
    header.emplace_back(e.name, Json::object({{"dtype", Json::string(e.dtype)},
                                              {"shape", Json::array(std::move(shape))},
                                              {"data_offsets", std::move(offsets)}}));
  }
  std::string head(8, '\0');
  detail::write_json(Json::object(std::move(header)), head);
  head.append((8 - head.size() % 8) % 8, ' ');  // the data starts 8-byte aligned in the file
  const std::uint64_t n = head.size() - 8;
  if (n > kMaxStateHeaderBytes)
    throw std::invalid_argument(std::string(fn) + ": the header would be " + std::to_string(n) +
                                " bytes, over the limit of " + std::to_string(kMaxStateHeaderBytes) +
                                " (too many tensors or too much metadata)");
  for (int k = 0; k < 8; ++k) head[std::size_t(k)] = char((n >> (8 * k)) & 0xFF);

  TempFile tmp(path, fn);
  tmp.write(head.data(), head.size());
  for (std::size_t k = 0; k < tensors.size(); ++k) tmp.write(tensors[k].data, entries[k].end - entries[k].begin);
  tmp.commit();
}

StateFile read_state_file(const std::string& path) {
  constexpr const char* fn = "read_state_file";
  require_little_endian(fn);
  const std::string pre = prefix(fn, path);
  InFile f(path, fn);
  Header h;
  read_header(f, path, fn, h);
  OctoptKeys k;
  read_octopt_keys(h, path, fn, k);
  if (!k.crcs.count(kHeaderCrcName)) throw FormatError(missing_header_crc(pre));
  for (const Entry& t : h.tensors)
    if (!k.crcs.count(t.name)) throw FormatError(missing_tensor_crc(pre, t.name));
  const std::uint32_t hc = header_checksum(h);
  if (hc != k.crcs[kHeaderCrcName]) throw FormatError(bad_header_crc(pre, k.crcs[kHeaderCrcName], hc));

  // The header is valid: the data section is exactly the tensors' bytes and at most the file's size.
  StateFile sf;
  sf.bytes.resize(std::size_t(h.data_size));
  if (h.data_size) f.read_at(8 + h.header_size, sf.bytes.data(), sf.bytes.size());
  for (const Entry& t : h.tensors) {
    const std::uint8_t* data = sf.bytes.data() + t.begin;
    const std::uint64_t nbytes = t.end - t.begin;
    const std::uint32_t c = detail::crc32c(0, data, nbytes);
    if (c != k.crcs[t.name]) throw FormatError(bad_tensor_crc(pre, t.name, k.crcs[t.name], c));
    sf.tensors.push_back(StateFile::Tensor{t.name, t.dtype, t.shape, nbytes, data, c});
  }
  for (const auto& [key, value] : h.metadata)
    if (!owned_key(key)) sf.metadata.emplace(key, value);
  return sf;
}

std::string inspect_state_file(const std::string& path) {
  constexpr const char* fn = "inspect_state_file";
  const std::string pre = prefix(fn, path);
  InFile f(path, fn);
  Header h;
  OctoptKeys k;
  std::string error;
  bool header_ok = false, keys_ok = false;
  try {
    read_header(f, path, fn, h);
    header_ok = true;
    read_octopt_keys(h, path, fn, k);
    keys_ok = true;
  } catch (const FormatError& e) {
    error = e.what();
  }
  const auto note = [&](const std::string& problem) {
    if (error.empty()) error = problem;
  };

  Json::Object report;
  report.emplace_back("path", Json::string(detail::printable(path)));
  report.emplace_back("file_size", Json::integer(h.file_size));
  report.emplace_back("header_size", h.sizes_known ? Json::integer(h.header_size) : Json());
  report.emplace_back("data_size", h.sizes_known ? Json::integer(h.data_size) : Json());
  const std::string* format = header_ok ? find_meta(h, kKeyFormat) : nullptr;
  const std::string* version = header_ok ? find_meta(h, kKeyVersion) : nullptr;
  Json::Object meta;
  for (const auto& [key, value] : h.metadata) meta.emplace_back(key, Json::string(value));

  std::string header_status = "missing";
  Json::Array tensors;
  std::size_t n_ok = 0, n_bad = 0, n_missing = 0;
  if (header_ok) {
    if (keys_ok && !k.crcs.count(kHeaderCrcName)) note(missing_header_crc(pre));
    for (const Entry& t : h.tensors)
      if (keys_ok && !k.crcs.count(t.name)) note(missing_tensor_crc(pre, t.name));
    if (keys_ok && k.crcs.count(kHeaderCrcName)) {
      const std::uint32_t hc = header_checksum(h);
      header_status = hc == k.crcs[kHeaderCrcName] ? "ok" : "bad";
      if (header_status == "bad") note(bad_header_crc(pre, k.crcs[kHeaderCrcName], hc));
    }
    std::vector<unsigned char> buf(std::size_t(1) << 20);
    bool readable = true;
    for (const Entry& t : h.tensors) {
      Json computed;
      std::string status;
      if (readable) {
        try {
          std::uint32_t c = 0;
          for (std::uint64_t at = t.begin; at < t.end;) {
            const std::size_t n = std::size_t(std::min<std::uint64_t>(buf.size(), t.end - at));
            f.read_at(8 + h.header_size + at, buf.data(), n);
            c = detail::crc32c(c, buf.data(), n);
            at += n;
          }
          computed = Json::string(hex8(c));
          const auto stored = k.crcs.find(t.name);
          if (stored == k.crcs.end()) {
            status = "missing";
          } else if (stored->second == c) {
            status = "ok";
          } else {
            status = "bad";
            note(bad_tensor_crc(pre, t.name, stored->second, c));
          }
        } catch (const FormatError& e) {  // the file shrank while being read
          note(e.what());
          readable = false;
        }
      }
      if (!readable) status = "unread";
      n_ok += status == "ok";
      n_bad += status == "bad";
      n_missing += status == "missing";
      Json::Array shape;
      for (const std::int64_t d : t.shape) shape.push_back(Json::integer(std::uint64_t(d)));
      const auto stored = k.crcs.find(t.name);
      tensors.push_back(Json::object({
          {"name", Json::string(t.name)},
          {"dtype", Json::string(t.dtype)},
          {"shape", Json::array(std::move(shape))},
          {"data_offsets", Json::array({Json::integer(t.begin), Json::integer(t.end)})},
          {"nbytes", Json::integer(t.end - t.begin)},
          {"crc32c", stored == k.crcs.end() ? Json() : Json::string(hex8(stored->second))},
          {"crc32c_computed", std::move(computed)},
          {"checksum", Json::string(status)},
      }));
    }
  }
  report.emplace_back("valid", Json::boolean(error.empty()));
  report.emplace_back("error", error.empty() ? Json() : Json::string(error));
  report.emplace_back("format", format ? Json::string(*format) : Json());
  report.emplace_back("format_version", version ? Json::string(*version) : Json());
  report.emplace_back("metadata", Json::object(std::move(meta)));
  report.emplace_back("header_checksum", Json::string(header_status));
  report.emplace_back("tensors", Json::array(std::move(tensors)));
  report.emplace_back("checksums", Json::object({{"ok", Json::integer(n_ok)},
                                                 {"bad", Json::integer(n_bad)},
                                                 {"missing", Json::integer(n_missing)}}));
  return detail::write_json(Json::object(std::move(report)));
}

}  // namespace octopt
