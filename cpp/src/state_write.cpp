// Writing state files: validation of the tensors and metadata, the header with its checksums, and the
// atomic replacement of the file (a temporary next to it, fsynced and renamed over it).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <limits>
#include <random>
#include <set>
#include <string_view>
#include <utility>

#include "crc32c.hpp"
#include "json.hpp"
#include "state_format.hpp"

namespace octopt {
namespace {

using detail::byte_count;
using detail::Entry;
using detail::extents_fit;
using detail::Fd;
using detail::header_checksum;
using detail::hex8;
using detail::Json;
using detail::kChunk;
using detail::kHeaderCrcName;
using detail::kKeyCrc;
using detail::kKeyFormat;
using detail::kKeyVersion;
using detail::kMetadataKey;
using detail::known_dtypes;
using detail::owned_key;
using detail::quote;
using detail::require_little_endian;
using detail::shape_str;
using detail::tensor_name_problem;

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
      throw FileError(errno, std::string(fn_) + ": wrote " + quote(target_) + " but cannot fsync its folder", target_);
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

}  // namespace

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
      throw std::invalid_argument(where + "dtype " + quote(t.dtype) +
                                  " is not supported (supported: " + known_dtypes() + ")");
    for (std::size_t k = 0; k < t.shape.size(); ++k)
      if (t.shape[k] < 0)
        throw std::invalid_argument(where + "shape[" + std::to_string(k) + "] is " + std::to_string(t.shape[k]) +
                                    ", must be >= 0");
    std::uint64_t nbytes = 0;
    if (!byte_count(t.shape, itemsize, &nbytes) || !extents_fit(t.shape, itemsize) || offset + nbytes < offset)
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

}  // namespace octopt
